"""Pure builder of the SDC probe Job: `python -m goodput_operator.probe --report` pinned
to one node, holding all of its accelerators, reporting through the workers' channel."""

from __future__ import annotations

from typing import Any

from goodput_operator import names
from goodput_operator.health.probing import KINDS, Kind, accelerator_kind
from goodput_operator.resources.pods import child_name
from goodput_operator.resources.trainingjob import (
    HOSTFILE_DIR,
    MANAGED_BY,
    REPORT_CA_FILE,
    REPORT_CA_PATH,
)

Obj = dict[str, Any]
REPORT_CA_CONFIGMAP = "goodput-report-ca"  # the report channel's CA, in the probe namespace


def report_ca_config_map(namespace: str, report_ca: str) -> Obj:
    """The report channel's CA in the probe namespace, for the probe Jobs to mount."""
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": REPORT_CA_CONFIGMAP, "namespace": namespace,
                         "labels": dict(MANAGED_BY)},
            "data": {REPORT_CA_FILE: report_ca}}


def probe_job_name(node: str, run: int, trigger: str = "") -> str:
    suffix = f"-{trigger[:5]}{run}" if trigger else f"-{run}"
    return child_name(f"probe-{node}", suffix, dns_label=True)


def probe_job(node: str, run: int, namespace: str, image: str, report_url: str,
              resource: str, accelerators: int, trigger: str) -> Obj:
    """Probe run RUN of NODE. It tolerates every taint: it must run on a quarantined node.
    It is told what to exercise (the node's kind of accelerator, all of them): a run that
    could not is inconclusive (health.probing)."""
    name = probe_job_name(node, run, trigger)
    labels = {names.PROBE_LABEL: "true", names.PROBE_TRIGGER_LABEL: trigger, **MANAGED_BY}
    kind = accelerator_kind(resource)
    counted = accelerators if kind == "cuda" else 0  # one CUDA device per nvidia.com/gpu
    annotations = {names.PROBE_NODE_ANNOTATION: node,
                   names.PROBE_EXPECTS_ANNOTATION: f"{kind}/{counted}",
                   names.PROBE_IMAGE_ANNOTATION: image}
    mount = names.REPORT_TOKEN_PATH.rsplit("/", 1)
    container: Obj = {
        "name": "probe", "image": image,
        "command": ["python", "-m", "goodput_operator.probe", "--report", "--expect", kind],
        "env": [{"name": names.ENV_REPORT_URL, "value": report_url},
                {"name": names.ENV_REPORT_TOKEN, "value": names.REPORT_TOKEN_PATH},
                {"name": names.ENV_PROBE_NODE,
                 "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "resources": {"requests": {resource: str(accelerators)},
                      "limits": {resource: str(accelerators)}},
        "volumeMounts": [{"name": "goodput-report-token", "mountPath": mount[0],
                          "readOnly": True}],
    }
    volumes: list[Obj] = [{"name": "goodput-report-token", "projected": {"sources": [
        {"serviceAccountToken": {"audience": names.REPORT_AUDIENCE, "expirationSeconds": 3600,
                                 "path": mount[1]}}]}}]
    if report_url.startswith("https://"):  # the CA the operator keeps in this namespace
        container["env"].append({"name": names.ENV_REPORT_CA, "value": REPORT_CA_PATH})
        container["volumeMounts"].append({"name": "goodput-report-ca",
                                          "mountPath": HOSTFILE_DIR, "readOnly": True})
        volumes.append({"name": "goodput-report-ca", "configMap": {
            "name": REPORT_CA_CONFIGMAP, "optional": True}})
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels,
                     "annotations": annotations},
        "spec": {
            "backoffLimit": 0, "ttlSecondsAfterFinished": 600, "activeDeadlineSeconds": 900,
            "template": {
                "metadata": {"labels": labels, "annotations": annotations},
                "spec": {
                    "nodeName": node, "restartPolicy": "Never",
                    "tolerations": [{"operator": "Exists"}],
                    "automountServiceAccountToken": False,
                    "containers": [container],
                    "volumes": volumes,
                },
            },
        },
    }


def expects(annotations: dict[str, str]) -> tuple[Kind, int] | None:
    """What a probe pod was told to exercise (its PROBE_EXPECTS_ANNOTATION), if anything:
    pods of an older operator carry none, and are judged as before."""
    said, _, count = annotations.get(names.PROBE_EXPECTS_ANNOTATION, "").partition("/")
    kind = KINDS.get(said)
    return None if kind is None else (kind, int(count) if count.isdigit() else 0)
