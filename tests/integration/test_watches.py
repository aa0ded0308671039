"""The operator's own pod and node watches against a real API server: cluster-wide, tracked
pods only, slim nodes, deletions seen, and an expired place listed again."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from goodput_operator.controllers.kube import Kube
from goodput_operator.controllers.state import State
from goodput_operator.operator.runtime import prime
from goodput_operator.operator.watches import NodeWatch, PodWatch
from tests.conftest import Cluster


def device_pod(name: str, devices: int = 0) -> dict[str, Any]:
    resources = {"requests": {"example.com/device": str(devices)},
                 "limits": {"example.com/device": str(devices)}} if devices else {}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": "no-such-node", "containers": [
                {"name": "c", "image": "registry.invalid/none", "resources": resources}]}}


async def until(check: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


def kube_for(cluster: Cluster) -> Kube:
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    assert isinstance(api, client.ApiClient)
    return Kube(api)


def test_pods_of_every_namespace_are_followed_from_the_initial_list(
        crds: Cluster, namespace: str) -> None:
    """Managed namespaces or not: a device pod anywhere counts; a pod without devices is
    not kept; a deletion is seen."""
    async def scenario() -> None:
        state, kube = State(), kube_for(crds)
        await prime(state, kube, namespaces=["some-other-namespace"])
        watch = PodWatch(state, kube, asyncio.get_running_loop())
        watch.start(state.pods_version)
        try:
            for pod in (device_pod("holds-two", 2), device_pod("holds-none")):
                crds.kubectl("apply", "-n", namespace, "-f", "-", input_text=json.dumps(pod))
            await until(lambda: f"{namespace}/holds-two" in state.pods, "the device pod")
            assert f"{namespace}/holds-none" not in state.pods
            crds.kubectl("delete", "pod", "holds-two", "-n", namespace, "--wait=false",
                            "--grace-period=0", "--force")
            await until(lambda: f"{namespace}/holds-two" not in state.pods, "its deletion")
        finally:
            watch.stop()

    asyncio.run(scenario())


def test_a_relist_drops_what_is_gone_and_keeps_the_rest(
        crds: Cluster, namespace: str) -> None:
    """What an expired place (410 Gone) leads to: every pod listed again; a pod the state
    held that is gone leaves, the others stay, and the watch goes on from the new list."""
    async def scenario() -> None:
        crds.kubectl("apply", "-n", namespace, "-f", "-",
                     input_text=json.dumps(device_pod("still-here", 1)))
        state, kube = State(), kube_for(crds)
        await prime(state, kube)
        assert f"{namespace}/still-here" in state.pods
        phantom = {**device_pod("phantom", 1), "metadata": {
            "name": "phantom", "namespace": namespace, "resourceVersion": "1"}}
        state.upsert_pod(phantom)
        watch = PodWatch(state, kube, asyncio.get_running_loop())
        await asyncio.to_thread(watch.relist)
        assert f"{namespace}/phantom" not in state.pods
        assert f"{namespace}/still-here" in state.pods
        assert int(watch.resource_version) >= int(state.pods_version)
        watch.start(watch.resource_version)
        try:  # and it follows from there
            crds.kubectl("apply", "-n", namespace, "-f", "-",
                         input_text=json.dumps(device_pod("after", 1)))
            await until(lambda: f"{namespace}/after" in state.pods, "a pod after the relist")
        finally:
            watch.stop()

    asyncio.run(scenario())


def test_changes_made_while_the_stream_was_away_arrive_in_their_final_state(
        crds: Cluster, namespace: str) -> None:
    """A watch that reconnects from its place sees what changed while it was away, ending
    in each object's final state; so does one from a place long gone (resourceVersion 1:
    replayed while etcd still holds it, else 410 Gone and a new list — that path is
    tests/unit/test_watches.py's)."""
    def labelled(name: str, value: str) -> None:
        crds.kubectl("label", "pod", name, "-n", namespace, f"step={value}", "--overwrite")

    def step(state: State, name: str) -> str | None:
        pod = state.pods.get(f"{namespace}/{name}")
        return None if pod is None else (pod["metadata"].get("labels") or {}).get("step")

    async def scenario() -> None:
        state, kube = State(), kube_for(crds)
        await prime(state, kube)
        first = PodWatch(state, kube, asyncio.get_running_loop())
        first.start(state.pods_version)
        crds.kubectl("apply", "-n", namespace, "-f", "-",
                     input_text=json.dumps(device_pod("moving", 1)))
        await until(lambda: f"{namespace}/moving" in state.pods, "the pod")
        first.stop()  # the stream is away: what follows reaches it no more
        place = first.resource_version
        for value in ("1", "2", "3"):
            labelled("moving", value)
        crds.kubectl("apply", "-n", namespace, "-f", "-",
                     input_text=json.dumps(device_pod("born-meanwhile", 1)))
        crds.kubectl("delete", "pod", "moving", "-n", namespace, "--wait=false")
        labelled("born-meanwhile", "final")
        assert step(state, "born-meanwhile") is None and f"{namespace}/moving" in state.pods

        again = PodWatch(state, kube, asyncio.get_running_loop())
        again.start(place)  # the reconnect: from the place the stream had reached
        try:
            await until(lambda: step(state, "born-meanwhile") == "final",
                        "the pod made while away, as it is now")
            pod = state.pods.get(f"{namespace}/moving")
            assert pod is None or pod["metadata"].get("deletionTimestamp"), \
                "the deleted pod is gone or going"
        finally:
            again.stop()

        fresh = State()
        oldest = PodWatch(fresh, kube, asyncio.get_running_loop())
        oldest.start("1")
        try:
            await until(lambda: step(fresh, "born-meanwhile") == "final",
                        "the final state from the oldest place", timeout=60)
        finally:
            oldest.stop()

    asyncio.run(scenario())


def test_nodes_are_followed_slim_from_the_initial_list(crds: Cluster, namespace: str) -> None:
    """A node that joins, changes and leaves after the initial list is seen each time, in
    its slim form (what decisions read), from where that list left off."""
    name = f"watched-{namespace}"
    body = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"topology.k8s.aws/ultraserver-id": "us-w"}},
            "spec": {"taints": [{"key": "example.com/test", "effect": "NoSchedule"}]}}

    def labels() -> dict[str, str]:
        return (state.nodes.get(name) or {}).get("metadata", {}).get("labels") or {}

    state, kube = State(), kube_for(crds)

    async def scenario() -> None:
        await prime(state, kube)
        assert state.nodes_version and name not in state.nodes
        watch = NodeWatch(state, kube, asyncio.get_running_loop())
        watch.start(state.nodes_version)
        try:
            crds.kubectl("apply", "-f", "-", input_text=json.dumps(body))
            await until(lambda: name in state.nodes, "the new node")
            held = state.nodes[name]
            assert held["kind"] == "Node" and held["metadata"]["uid"]
            assert held["spec"]["taints"][0]["key"] == "example.com/test"
            assert "managedFields" not in held["metadata"]
            crds.kubectl("label", "node", name, "example.com/role=spare")
            await until(lambda: labels().get("example.com/role") == "spare", "its new label")
            crds.kubectl("delete", "node", name, "--wait=false")
            await until(lambda: name not in state.nodes, "its deletion")
        finally:
            watch.stop()
            crds.kubectl("delete", "node", name, "--ignore-not-found", "--wait=false")

    asyncio.run(scenario())
