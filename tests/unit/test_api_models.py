"""The pydantic models are the single source of truth for the CRDs and the API docs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from goodput_operator import generate, names
from goodput_operator.api import crds
from goodput_operator.api.inferenceendpoint import InferenceEndpointSpec
from goodput_operator.api.trainingjob import TrainingJobSpec
from goodput_operator.api.ultraservergroup import UltraServerGroupSpec
from tests.unit.fleets import slice_size

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
SPECS = {"TrainingJob": TrainingJobSpec, "UltraServerGroup": UltraServerGroupSpec,
         "InferenceEndpoint": InferenceEndpointSpec}


def test_a_model_change_makes_the_generated_files_stale(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "operating.md").write_text((ROOT / "docs" / "operating.md").read_text())
    assert generate.main(["--root", str(tmp_path)]) == 0
    assert generate.stale(tmp_path) == []
    # Change a model's documentation: the committed YAML no longer matches.
    field = TrainingJobSpec.model_fields["workers"]
    monkeypatch.setattr(field, "description", "Workers (changed without regenerating).")
    TrainingJobSpec.model_rebuild(force=True)
    try:
        behind = generate.stale(tmp_path)
        assert tmp_path / "crds" / "goodput.dev_trainingjobs.yaml" in behind
        assert tmp_path / "docs" / "api.md" in behind
        assert generate.main(["--root", str(tmp_path), "--check"]) == 1
    finally:
        monkeypatch.undo()
        TrainingJobSpec.model_rebuild(force=True)
    assert generate.stale(tmp_path) == []


def walk(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for name, child in schema.get("properties", {}).items():
        yield from walk(child, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from walk(schema["additionalProperties"], f"{path}{{}}")


@pytest.mark.parametrize("kind", crds.KINDS, ids=lambda k: k.kind)
def test_schemas_are_structural_and_documented(kind: crds.Kind) -> None:
    root = crds.crd(kind)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in walk(root):
        assert not {"$ref", "$defs", "title", "allOf", "oneOf"} & node.keys(), path
        if "anyOf" in node:
            assert node.get("x-kubernetes-int-or-string"), f"{path}: anyOf outside int-or-string"
        else:
            assert "type" in node, f"{path}: no type"
        parent_is_map = path.endswith("{}")
        if path.count(".") >= 2 and not path.endswith("[]") and not parent_is_map:
            assert node.get("description"), f"{path}: no description"
    status = root["properties"]["status"]
    assert not [p for p, n in walk(status) if "default" in n], "status must carry no defaults"
    conditions = status["properties"]["conditions"]
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]


def test_names_columns_and_subresources() -> None:
    by_kind = {k.kind: crds.crd(k) for k in crds.KINDS}
    for kind, short in (("TrainingJob", "tj"), ("UltraServerGroup", "usg"),
                        ("InferenceEndpoint", "ie")):
        names = by_kind[kind]["spec"]["names"]
        assert names["shortNames"] == [short]
        assert names["categories"] == ["goodput"]
        version = by_kind[kind]["spec"]["versions"][0]
        assert version["name"] == "v1alpha1"
        assert "status" in version["subresources"]
        assert version["additionalPrinterColumns"][-1]["name"] == "Age"
    scale = by_kind["InferenceEndpoint"]["spec"]["versions"][0]["subresources"]["scale"]
    assert scale["specReplicasPath"] == ".spec.replicas"
    assert by_kind["UltraServerGroup"]["spec"]["scope"] == "Cluster"


def examples() -> list[Path]:
    """Our API objects: not examples/fleets (sandbox input) nor examples/peers (other
    systems' manifests)."""
    return sorted(p for p in (ROOT / "examples").rglob("*.yaml")
                  if "fleets" not in p.parts and "peers" not in p.parts)


@pytest.mark.parametrize("path", examples(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_example_parses_with_the_models(path: Path) -> None:
    doc = yaml.safe_load(path.read_text())
    assert doc["apiVersion"] == "goodput.dev/v1alpha1"
    SPECS[doc["kind"]].model_validate(doc["spec"])


def test_there_is_an_example_of_each_kind_for_each_fleet() -> None:
    seen = {(p.parent.name, yaml.safe_load(p.read_text())["kind"]) for p in examples()}
    for fleet_name in ("trn2", "p5", "nvl72", "trn3", "p5e", "p6", "b300"):
        for kind in SPECS:
            assert (fleet_name, kind) in seen, (fleet_name, kind)


def example_groups() -> list[Path]:
    return [p for p in examples() if yaml.safe_load(p.read_text())["kind"] == "UltraServerGroup"
            and not p.stem.endswith("-real")]


@pytest.mark.parametrize("path", example_groups(), ids=lambda p: str(p.relative_to(ROOT)))
def test_each_example_group_fits_a_pool_of_its_fleet_and_its_jobs_fit_a_domain(
        path: Path) -> None:
    """examples/F/ is written for the built-in fleet F: its group selects one pool of it by
    instance type and reads that pool's shape (accelerators per node, nodes per domain,
    the domain's label); each job (or each of its slices) and endpoint on the group fits
    inside one domain beside its spares, as the demo and tests/e2e/test_fleets.py apply
    them."""
    from goodput_operator.sandbox import fleet

    group = yaml.safe_load(path.read_text())
    spec = UltraServerGroupSpec.model_validate(group["spec"])
    pools = [p for p in fleet.load(path.parent.name).spec.pools
             if spec.node_selector == {"node.kubernetes.io/instance-type": p.instance_type}]
    assert len(pools) == 1, f"{path.name} selects {len(pools)} pools of {path.parent.name}"
    [pool] = pools
    assert str(pool.capacity[spec.accelerator.resource]) == str(spec.accelerator.per_node)
    assert spec.accelerator.efa_per_node <= int(pool.capacity.get("vpc.amazonaws.com/efa", 0))
    assert pool.nodes_per_domain == spec.nodes_per_domain
    assert (pool.domain_label or pool.layer_labels[-1]) == spec.domain_key
    assert set(spec.network_levels) <= set(pool.layer_labels[:-1])
    rdma = spec.accelerator.rdma_resource
    assert rdma is None or int(str(pool.capacity[rdma]).removesuffix("k")) > 0
    room = spec.nodes_per_domain - spec.spares.per_domain
    users = [yaml.safe_load(p.read_text()) for p in examples()
             if yaml.safe_load(p.read_text())["spec"].get("ultraServerGroup")
             == group["metadata"]["name"]]
    assert users, f"no job or endpoint runs on {group['metadata']['name']}"
    for doc in users:
        for shape in shapes(doc["spec"]):  # a job, a replica, a disaggregated role's
            name = doc["metadata"]["name"]
            per_domain = slice_size(shape)  # a slice of the gang, or all of it
            assert per_domain <= room and shape.get("workers", 1) % per_domain == 0, name
            assert shape["acceleratorsPerWorker"] <= spec.accelerator.per_node, name
            if spec.interconnect == "ici":  # a TPU slice runs whole, a host per worker
                assert (per_domain, shape["acceleratorsPerWorker"]) == (
                    spec.nodes_per_domain, spec.accelerator.per_node), name


def shapes(tree: Any) -> Iterator[dict[str, Any]]:
    """Every mapping in TREE that sizes workers (it has acceleratorsPerWorker)."""
    if isinstance(tree, dict):
        if "acceleratorsPerWorker" in tree:
            yield tree
        for value in tree.values():
            yield from shapes(value)
    elif isinstance(tree, list):
        for value in tree:
            yield from shapes(value)


def test_models_read_what_the_api_server_stores() -> None:
    """The operator parses specs with the models: camelCase in, defaults filled."""
    spec = TrainingJobSpec.model_validate({
        "ultraServerGroup": "trn2-pool", "workers": 8, "acceleratorsPerWorker": 16,
        "template": {"spec": {"containers": [{"name": "t", "image": "i", "command": ["x"]}]}},
    })
    assert spec.topology.unit == "domain" and spec.launcher.port == 29500
    assert spec.template.spec.containers[0].model_extra == {"command": ["x"]}
    with pytest.raises(ValidationError, match="workers"):
        TrainingJobSpec.model_validate({"workers": 0, "acceleratorsPerWorker": 1,
                                        "template": {"spec": {"containers": []}}})


@pytest.mark.parametrize("key", [names.GROUP_LABEL, names.NODE_DOMAIN_LABEL, names.SLOT_LABEL])
def test_a_group_may_not_select_on_the_labels_the_operator_writes(key: str) -> None:
    """The schema refuses it at admission (tests/integration/test_api.py); a group stored
    before that rule is refused by the model too, and the operator then ignores it."""
    spec = {"nodeSelector": {"pool": "trn2", key: "x"}, "accelerator": {"perNode": 16},
            "nodesPerDomain": 4}
    with pytest.raises(ValidationError, match="nodeSelector may not select on"):
        UltraServerGroupSpec.model_validate(spec)
    UltraServerGroupSpec.model_validate({**spec, "nodeSelector": {"pool": "trn2"}})


def test_nested_defaults_match_the_schema_defaults() -> None:
    """What the API server fills in equals what the models assume when a field is absent."""
    root = crds.crd(crds.KINDS[1])["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    spec_schema = root["properties"]["spec"]["properties"]
    parsed = TrainingJobSpec.model_validate({
        "ultraServerGroup": "g", "workers": 1, "acceleratorsPerWorker": 1,
        "template": {"spec": {"containers": [{"name": "t", "image": "i"}]}},
    }).model_dump(by_alias=True, exclude_none=True, mode="json")
    for field in ("launcher", "topology", "checkpoint", "failurePolicy", "sdc"):
        assert spec_schema[field]["default"] == parsed[field], field
