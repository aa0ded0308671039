"""The chart under test: helm (built like the sandbox's other binaries) and a kubeconfig that
acts as the chart's ServiceAccount, so tests run the operator with exactly its RBAC."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from goodput_operator.sandbox import build
from goodput_operator.sandbox.versions import HELM_COMPONENT

CHART = Path(__file__).resolve().parents[1] / "charts" / "goodput-operator"


def helm(*args: str, kubeconfig: Path | None = None, check: bool = True
         ) -> subprocess.CompletedProcess[str]:
    binary = build.build(HELM_COMPONENT) / "helm"
    command = [str(binary), *args] + (["--kubeconfig", str(kubeconfig)] if kubeconfig else [])
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed ({proc.returncode}):\n"
                             f"{proc.stdout}\n{proc.stderr}")
    return proc


def set_flags(values: dict[str, Any]) -> list[str]:
    """--set-json KEY=VALUE for each value (types survive: 0 stays an integer)."""
    import json

    return [arg for key, value in values.items()
            for arg in ("--set-json", f"{key}={json.dumps(value)}")]


def install(kubeconfig: Path, release: str, namespace: str, **values: Any) -> None:
    helm("upgrade", "--install", release, str(CHART), "--namespace", namespace,
         "--create-namespace", *set_flags(values), kubeconfig=kubeconfig)


def account_name(release: str) -> str:
    """The chart's fullname for RELEASE (what its ServiceAccount and roles are called)."""
    return release if "goodput-operator" in release else f"{release}-goodput-operator"


def service_account_kubeconfig(admin: Path, token: str, target: Path) -> Path:
    """ADMIN's cluster and CA with a bearer TOKEN instead of its admin credentials."""
    config = yaml.safe_load(admin.read_text())
    context = next(c for c in config["contexts"]
                   if c["name"] == config["current-context"])["context"]
    cluster = next(c for c in config["clusters"] if c["name"] == context["cluster"])
    target.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "chart",
        "clusters": [{"name": "chart", "cluster": cluster["cluster"]}],
        "users": [{"name": "chart", "user": {"token": token}}],
        "contexts": [{"name": "chart", "context": {"cluster": "chart", "user": "chart"}}]}))
    return target


Permission = tuple[str, str, str, str]  # (api group, resource[/subresource], verb, namespace)


def granted(release: str, namespace: str, **values: Any) -> set[Permission]:
    """Every (group, resource, verb, namespace) the chart's roles grant; namespace "*" for
    a ClusterRole's."""
    rendered = helm("template", release, str(CHART), "--namespace", namespace,
                    *set_flags(values)).stdout
    rules: set[Permission] = set()
    for doc in yaml.safe_load_all(rendered):
        if not doc or doc["kind"] not in ("ClusterRole", "Role"):
            continue
        scope = "*" if doc["kind"] == "ClusterRole" else doc["metadata"]["namespace"]
        for rule in doc["rules"]:
            if "nonResourceURLs" in rule:  # granted to readers (/sd/serving), not to us
                continue
            rules |= {(group, resource, verb, scope) for group in rule["apiGroups"]
                      for resource in rule["resources"] for verb in rule["verbs"]}
    return rules


def audited(audit_log: Path, username: str) -> tuple[set[Permission], list[str]]:
    """What USERNAME did according to the API server's audit log: the permissions it used
    and the requests RBAC refused."""
    import json

    used: set[Permission] = set()
    refused: list[str] = []
    for line in audit_log.read_text().splitlines():
        event = json.loads(line)
        ref = event.get("objectRef")
        if event.get("user", {}).get("username") != username or not ref:
            continue
        resource = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource")
                                      else "")
        permission = (ref.get("apiGroup", ""), resource, event["verb"],
                      ref.get("namespace", ""))
        decision = (event.get("annotations") or {}).get("authorization.k8s.io/decision")
        if decision == "forbid":  # RBAC said no (a 403 from admission, e.g. a namespace
            # being deleted, is allowed by RBAC and not the chart's business)
            refused.append(f"{event['verb']} {resource} in {ref.get('namespace') or '-'}: "
                           f"{event['requestURI']}")
        elif decision == "allow":  # authorized (admission may still have said no)
            used.add(permission)
    return used, refused


def covers(grant: Permission, use: Permission) -> bool:
    return grant[:3] == use[:3] and grant[3] in ("*", use[3])
