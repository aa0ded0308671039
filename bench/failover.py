"""Leader failover of the in-cluster operator: how long the reports Service has no leader.

    python -m bench.failover [--json] [--trials N]

A sandbox (fleet trn2) with two system nodes runs the chart's Deployment from the image
built from the Dockerfile, as users run it. Each trial removes the leader one way and times
until the other replica holds the Lease and has labelled its pod (the reports Service's
selector), from the moment of the removal:

- `delete`: `kubectl delete pod` of the leader (a drain, a rollout); on SIGTERM it gives
  the Lease back;
- `crash` (the baseline): every container on the leader's node killed (`fail-node
  --crash`); the Lease must expire (15 s).

The ratio `delete / crash` is what releasing the Lease on the way out saves.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from typing import Any

from goodput_operator import __version__
from goodput_operator.operator.leader import leading_pod
from goodput_operator.sandbox import build, cluster, operator_image, realnode
from goodput_operator.sandbox.versions import HELM_COMPONENT

SANDBOX = "gp-failover"  # short: unix socket paths under it must fit 107 bytes
RELEASE = NAMESPACE = "goodput-operator"
SELECTOR = f"app.kubernetes.io/instance={RELEASE}"


def pods(box: cluster.Sandbox) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = json.loads(box.kubectl(
        "get", "pods", "-n", NAMESPACE, "-l", SELECTOR, "-o", "json").stdout)["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


def leader(box: cluster.Sandbox) -> dict[str, Any] | None:
    """The pod holding the Lease, Ready and labelled for the reports Service."""
    holder = box.kubectl("get", "lease", RELEASE, "-n", NAMESPACE, "-o",
                         "jsonpath={.spec.holderIdentity}", check=False).stdout.strip()
    return leading_pod(pods(box), holder)


def wait(probe: Any, timeout: float, what: str, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(interval)
    raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")


def both_ready(box: cluster.Sandbox) -> bool:
    ready = [p for p in pods(box) if any(c["type"] == "Ready" and c["status"] == "True"
                                          for c in p.get("status", {}).get("conditions", []))]
    return len(ready) == 2 and leader(box) is not None


def trial(box: cluster.Sandbox, how: str) -> float:
    wait(lambda: both_ready(box), 240, "two Ready replicas, one leading", 0.5)
    old = leader(box)
    assert old is not None
    name, node = old["metadata"]["name"], old["spec"]["nodeName"]
    started = time.monotonic()
    if how == "delete":
        box.kubectl("delete", "pod", name, "-n", NAMESPACE, "--wait=false")
    else:
        subprocess.run([sys.executable, "-m", "goodput_operator.cli", "sandbox", "fail-node",
                        "--crash", node, "--name", box.name], check=True, capture_output=True)
    wait(lambda: (found := leader(box)) and found["metadata"]["name"] != name, 60,
         "the standby leading")
    return time.monotonic() - started


def run(trials: int) -> dict[str, Any]:
    box = cluster.Sandbox(SANDBOX)
    cluster.down(box)
    operator_image.build_image(__version__)
    try:
        cluster.up(box, "trn2", system_nodes=2)
        helm = build.build(HELM_COMPONENT) / "helm"
        subprocess.run([str(helm), "install", RELEASE, str(operator_image.CHECKOUT / "charts" /
                        "goodput-operator"), "--namespace", NAMESPACE, "--create-namespace",
                        "--kubeconfig", str(box.kubeconfig), "--set", "image.pullPolicy=Never",
                        "--set", "dashboards.enabled=false", "--set-json",
                        f'nodeSelector={{"{realnode.SYSTEM_LABEL}":"true"}}', "--wait",
                        "--timeout", "4m"], check=True, capture_output=True)
        seconds = {how: [trial(box, how) for _ in range(trials)] for how in ("delete", "crash")}
    finally:
        cluster.down(box)
    result: dict[str, Any] = {how: {"median_s": round(statistics.median(values), 2),
                                    "max_s": round(max(values), 2),
                                    "trials": [round(v, 2) for v in values]}
                              for how, values in seconds.items()}
    result["delete_vs_crash"] = round(result["delete"]["median_s"]
                                      / result["crash"]["median_s"], 3)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args(argv)
    result = run(args.trials)
    print(f"{'leader removed by':<24}{'median':>10}{'max':>10}   ratio")
    for how in ("delete", "crash"):
        ratio = result["delete_vs_crash"] if how == "delete" else 1.0
        print(f"{how:<24}{result[how]['median_s']:>9.2f}s{result[how]['max_s']:>9.2f}s"
              f"   x{ratio}")
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
