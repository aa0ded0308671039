"""`goodput` (also `kubectl goodput`): the command line of Goodput Operator."""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable, Sequence
from typing import Any, cast

import yaml

from goodput_operator import __version__, cli_faults, cli_kind, cli_report
from goodput_operator.sandbox import (
    build,
    cluster,
    fleet,
    hostnet,
    images,
    jobset,
    kueue,
    lws,
    operator_image,
    procs,
    realnode,
    scalers,
    versions,
)


def _sandbox_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sandbox = sub.add_parser(
        "sandbox", help="a real local control plane with a simulated accelerator fleet",
        description="A real kube-apiserver, etcd, scheduler and controller-manager on "
                    "127.0.0.1, with KWOK playing the kubelets of simulated accelerator nodes.",
    )
    verbs = sandbox.add_subparsers(dest="verb", required=True, metavar="VERB")
    verb = cli_kind.named_verbs(verbs, cluster.DEFAULT_NAME, "sandbox")

    up = verb("up", "build (first time) and start a sandbox, then create the fleet's nodes")
    up.add_argument("--fleet", default=fleet.DEFAULT_FLEET,
                    help=f"built-in fleet name ({', '.join(fleet.builtin_names())}), a fleet "
                         "YAML file, or synthetic:KIND:N (default: %(default)s)")
    up.add_argument("--real-nodes", type=int, default=0, metavar="N",
                    help="make the fleet's first N nodes real (kubelet + containerd running "
                         "real containers; needs root; first run builds images, minutes)")
    up.add_argument("--system-nodes", type=int, default=0, metavar="N",
                    help="also start N real nodes without accelerators (system-0, ...) for "
                         "the operator's own pods (helm install; see docs/real-nodes.md)")
    up.add_argument("--kueue", action="store_true",
                    help="also build (first time) and run Kueue with its CRDs for this sandbox "
                         "(quotas; MultiKueue with `sandbox connect`; docs/multicluster.md)")
    up.add_argument("--peers", type=_peers, default=(), metavar="NAME[,NAME]",
                    help="also build (first time) and run these peers beside the control "
                         f"plane, for head-to-head runs: {', '.join(PEERS)} "
                         "(bench/README.md)")
    up.add_argument("--object-store", action="store_true",
                    help="also build (first time) and run an S3-compatible server (versitygw) "
                         "for checkpoint.dir s3://... (docs/recovery.md)")
    up.add_argument("--prometheus-url", default="http://127.0.0.1:9090", metavar="URL",
                    help="the Prometheus the hpa peer's prometheus-adapter reads "
                         "(default %(default)s)")
    add = verb("add-real-node", "turn one more fleet node into a real node (the first one "
                                "still simulated, or NODE)")
    add.add_argument("node", nargs="?")
    add.add_argument("--system", action="store_true",
                     help="add a real node without accelerators (NODE, else system-N)")
    image = verb("image", "build the operator image from the Dockerfile (buildah, no registry) "
                          "and import it into the sandbox's system nodes, if it runs")
    image.add_argument("--tag", default=__version__, help="image tag (default: %(default)s)")
    verb("down", "stop and delete a sandbox")
    verb("status", "show whether a sandbox runs, its kubeconfig, fleet and node readiness")
    verb("kubeconfig", "print the path of the sandbox's kubeconfig")
    verb("env", "print shell exports (KUBECONFIG, and PATH with the sandbox's kubectl first): "
                "eval $(goodput sandbox env)")
    cli_faults.add_parsers(verb)
    render = verbs.add_parser(
        "render-fleet", help="print a fleet's Node objects as YAML (for kind + kwok clusters)")
    render.add_argument("--fleet", default=fleet.DEFAULT_FLEET)
    connect = verbs.add_parser(
        "connect", help="wire MultiKueue: MANAGER dispatches to the WORKER sandboxes",
        description="Secrets with the workers' kubeconfigs, a MultiKueueCluster each, and an "
                    "AdmissionCheck + MultiKueueConfig per worker (named after it) and one "
                    f"for all of them ({kueue.ALL_WORKERS}). Every sandbox must run Kueue.")
    connect.add_argument("manager")
    connect.add_argument("workers", nargs="+", metavar="worker")
    verbs.add_parser("build", help="build the upstream binaries, helm included")
    verbs.add_parser("fleets", help="list the built-in fleets")


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(
        prog="goodput", description="Goodput Operator: accelerator training and inference "
                                    "that keeps goodput near 100%.",
    )
    root.add_argument("--version", action="version", version=f"goodput {__version__}")
    sub = root.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _sandbox_parser(sub)
    cli_kind.add_parser(sub)
    topology = sub.add_parser(
        "topology", help="draw each UltraServerGroup's domains and the jobs on their nodes",
        description="Domains as boxes of nodes in slot order, each node marked with the job "
                    "on it, or free, spare, quarantined, NotReady, cordoned.")
    topology.add_argument("--kubeconfig", help="default: $KUBECONFIG or ~/.kube/config")
    topology.add_argument("--group", action="append", help="only this group (repeatable)")
    topology.add_argument("--output", "-o", help="also write the picture as SVG to this file")
    node = sub.add_parser("node", help="quarantine a node by hand, or release it",
                          description="Quarantine: taint goodput.dev/quarantine=REASON:"
                          "NoSchedule with evidence; jobs on it recover on spares. Release: "
                          "remove it (the operator quarantines it again if it still fails).")
    actions = node.add_subparsers(dest="action", required=True, metavar="ACTION")
    hold = actions.add_parser("quarantine", help="take a node out of service")
    hold.add_argument("node")
    hold.add_argument("--reason", default="Manual",
                      help="CamelCase reason on the taint (default: %(default)s)")
    hold.add_argument("--message", default="", help="evidence to record with it")
    free = actions.add_parser("release", help="return a quarantined node to service")
    free.add_argument("node")
    probe = actions.add_parser("probe", help="run the SDC probe on a node now (a Job)")
    probe.add_argument("node")
    probe.add_argument("--namespace", default="goodput-system",
                       help="the operator's probe namespace (default: %(default)s)")
    probe.add_argument("--image", default=f"goodput-operator:{__version__}")
    probe.add_argument("--report-url",
                       default="http://goodput-operator.goodput-system.svc:8081",
                       help="where the probe reports (the operator's --report-url)")
    for action in (hold, free, probe):
        action.add_argument("--kubeconfig", help="default: $KUBECONFIG or ~/.kube/config")
    placement = sub.add_parser(
        "placement", help="a TrainingJob's ranks, one line each: rank, node, domain",
        description="Reads status.placement (slices of consecutive ranks per domain, nodes as "
                    "hostlists) and prints it one rank per line.")
    placement.add_argument("job")
    placement.add_argument("--namespace", "-n", default="default")
    placement.add_argument("--rank", type=int, help="print only this rank's node")
    placement.add_argument("--kubeconfig", help="default: $KUBECONFIG or ~/.kube/config")
    from goodput_operator.simulate import command as simulate

    simulate.add_parser(sub)
    cli_report.add_parser(sub)
    return root


def placement_lines(placement: dict[str, Any] | None, rank: int | None = None) -> list[str]:
    """The placement record one rank per line (`rank node domain`), or RANK's node alone."""
    from goodput_operator.topology.record import ranks_of

    ranks = ranks_of(placement)
    if rank is not None:
        return [r["node"] for r in ranks if r["rank"] == rank]
    return [f"{r['rank']} {r['node']} {r.get('domain') or '-'}" for r in ranks]


def _run_placement(args: argparse.Namespace) -> int:
    from kubernetes import config
    from kubernetes.client.exceptions import ApiException

    from goodput_operator.controllers.kube import Kube

    kube = Kube(config.new_client_from_config(config_file=args.kubeconfig))  # type: ignore[no-untyped-call]
    try:
        job = kube.get_json(f"/apis/goodput.dev/v1alpha1/namespaces/{args.namespace}/"
                            f"trainingjobs/{args.job}")
    except ApiException as err:
        print(f"error: trainingjob {args.namespace}/{args.job}: "
              f"{'not found' if err.status == 404 else err.reason}", file=sys.stderr)
        return 1
    lines = placement_lines((job.get("status") or {}).get("placement"), args.rank)
    if not lines:
        print(f"error: trainingjob {args.namespace}/{args.job} has no placement"
              + (f" for rank {args.rank}" if args.rank is not None else ""), file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


def _start_probe(kube: Any, node: dict[str, Any], args: argparse.Namespace) -> int:
    import time

    from goodput_operator.resources.probe import probe_job
    from goodput_operator.topology.model import parse_count

    allocatable = node.get("status", {}).get("allocatable") or {}
    resource = next((r for r in ("aws.amazon.com/neuron", "nvidia.com/gpu")
                     if str(allocatable.get(r, "0")) not in ("0", "")), None)
    if resource is None:
        print(f"error: node {args.node} has no aws.amazon.com/neuron or nvidia.com/gpu",
              file=sys.stderr)
        return 1
    job = probe_job(args.node, int(time.time()), args.namespace, args.image, args.report_url,
                    resource, parse_count(allocatable[resource]), "manual")
    kube.create(job)
    print(f"probe Job {args.namespace}/{job['metadata']['name']} started on {args.node}")
    return 0


def _run_node(args: argparse.Namespace) -> int:
    import re
    import time

    from kubernetes import config
    from kubernetes.client.exceptions import ApiException

    from goodput_operator.controllers.kube import Kube
    from goodput_operator.health import quarantine as q

    if args.action == "quarantine" and not re.fullmatch(r"[A-Z][A-Za-z0-9]{0,62}", args.reason):
        print(f"error: --reason must be CamelCase letters and digits (got {args.reason!r})",
              file=sys.stderr)
        return 2
    kube = Kube(config.new_client_from_config(config_file=args.kubeconfig))  # type: ignore[no-untyped-call]
    try:
        body = cast(dict[str, Any], kube.api.sanitize_for_serialization(  # type: ignore[no-untyped-call]
            kube.core.read_node(args.node)))
        if args.action == "probe":
            return _start_probe(kube, body, args)
        if args.action == "quarantine":
            now = time.time()
            finding = q.Finding(args.reason, args.message or "quarantined by hand", now)
            kube.patch_node(args.node, q.quarantine_patch(body, finding, now, q.BY_HAND))
            print(f"node {args.node} quarantined ({args.reason}); release it with "
                  f"`goodput node release {args.node}`")
        elif q.record_of(body) is None:
            print(f"node {args.node} is not quarantined")
        else:
            kube.patch_node(args.node, q.release_patch(body))
            print(f"node {args.node} released (the operator quarantines it again if it "
                  "still fails its health checks)")
    except ApiException as err:
        reason = "not found" if err.status == 404 else "changed meanwhile, try again" \
            if err.status == 409 else err.reason
        print(f"error: node {args.node}: {reason}", file=sys.stderr)
        return 1
    return 0


def _run_sandbox(args: argparse.Namespace) -> int:
    if args.verb == "build":
        for name, path in build.ensure_all(versions.ALL_COMPONENTS).items():
            print(f"{name}: {path}")
        return 0
    if args.verb == "render-fleet":
        items = fleet.nodes(fleet.load(args.fleet))
        print(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items},
                             sort_keys=False), end="")
        return 0
    if args.verb == "connect":
        kueue.connect(cluster.Sandbox(args.manager), [cluster.Sandbox(w) for w in args.workers])
        return 0
    if args.verb == "fleets":
        for name in fleet.builtin_names():
            print(fleet.summary(fleet.load(name)))
        return 0
    return SANDBOX_VERBS[args.verb](cluster.Sandbox(args.name), args)


# what `sandbox up --peers` starts (PEERS.md's versions); hpa: prometheus-adapter, so that
# the controller-manager's HPA can read custom metrics
PEERS = ("kueue", "jobset", "lws", "hpa", "keda")


def _peers(value: str) -> tuple[str, ...]:
    """--peers: known names, comma-separated; an unknown one is refused by name."""
    names = tuple(n.strip() for n in value.split(",") if n.strip())
    unknown = [n for n in names if n not in PEERS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown peer(s) {', '.join(unknown)}: known are {', '.join(PEERS)}")
    return names


def _up(box: cluster.Sandbox, args: argparse.Namespace) -> int:
    chosen = cluster.up(box, args.fleet, real_nodes=args.real_nodes,
                        system_nodes=args.system_nodes)
    if args.kueue or "kueue" in args.peers:
        kueue.start(box)
    if "jobset" in args.peers:
        jobset.start(box)
    if "lws" in args.peers:
        lws.start(box)
    if "hpa" in args.peers:
        scalers.start_adapter(box, args.prometheus_url)
    if "keda" in args.peers:
        scalers.start_keda(box)
    if args.object_store:
        from goodput_operator.sandbox import objectstore

        store = objectstore.start_for(box)
        literals = " ".join(f"--from-literal={k}={v}" for k, v in store.items())
        print(f"S3-compatible server (versitygw) at {store['AWS_ENDPOINT_URL']}; a job's "
              f"checkpoint.credentialsSecret:\n  kubectl create secret generic store "
              f"{literals}")
    print(fleet.summary(chosen))
    print(f"\nkubeconfig: {box.kubeconfig}\n"
          f"  eval $(goodput sandbox env --name {box.name})   # KUBECONFIG + kubectl v1.36\n"
          "  kubectl get nodes -L topology.k8s.aws/ultraserver-id,nvidia.com/gpu.clique\n"
          f"Stop it with: goodput sandbox down --name {box.name}")
    return 0


def _image(box: cluster.Sandbox, args: argparse.Namespace) -> int:
    built = operator_image.build_image(args.tag)
    nodes = cluster.load_operator_image(box, built.as_image()) if box.is_running() else []
    print(f"{built.name}: {built.size}, built in {built.seconds:.0f}s"
          + (f"; imported into {', '.join(nodes)}" if nodes else ""))
    return 0


def _status(box: cluster.Sandbox, args: argparse.Namespace) -> int:
    state = cluster.status(box)
    if not state.running:
        print(f"sandbox {box.name!r}: not running")
        return 1
    print(f"sandbox {box.name!r}: running\n  kubeconfig: {state.kubeconfig}\n"
          f"  fleet: {state.fleet}\n  nodes: {state.nodes_ready}/{state.nodes_total} Ready")
    if kueue.running(box):
        print(f"  kueue: {versions.KUEUE} running (log: {kueue.home(box) / 'kueue.log'})")
    if jobset.running(box):
        print(f"  jobset: {versions.JOBSET} running (log: {jobset.home(box) / 'jobset.log'})")
    if lws.running(box):
        print(f"  lws: {versions.LWS} running (log: {lws.home(box) / 'lws.log'})")
    return 0


def _env(box: cluster.Sandbox, args: argparse.Namespace) -> int:
    cluster.require_running(box)
    kubectl_dir = build.bin_dir(versions.KUBERNETES_COMPONENT)
    print(f"export KUBECONFIG={shlex.quote(str(box.kubeconfig))}")
    print(f'export PATH={shlex.quote(str(kubectl_dir))}:"$PATH"')
    return 0


def _add_real_node(box: cluster.Sandbox, args: argparse.Namespace) -> int:
    print(f"node {cluster.add_real_node(box, args.node, system=args.system)} is a real node")
    return 0


def _down(box: cluster.Sandbox, args: argparse.Namespace) -> int:
    print(f"sandbox {box.name!r} " + ("deleted" if cluster.down(box) else "was not running"))
    return 0


def _kubeconfig(box: cluster.Sandbox, args: argparse.Namespace) -> int:
    cluster.require_running(box)
    print(box.kubeconfig)
    return 0


SANDBOX_VERBS: dict[str, Callable[[cluster.Sandbox, argparse.Namespace], int]] = {
    "up": _up, "add-real-node": _add_real_node, "image": _image, "down": _down,
    "status": _status, "kubeconfig": _kubeconfig, "env": _env, **cli_faults.VERBS,
}
"""The verbs that act on one sandbox (--name)."""


def _run_topology(args: argparse.Namespace) -> int:
    import time

    from kubernetes import client, config

    from goodput_operator.api.base import GROUP, VERSION
    from goodput_operator.controllers.state import State
    from goodput_operator.topology.view import render_svg, render_text

    api = config.new_client_from_config(config_file=args.kubeconfig)  # type: ignore[no-untyped-call]
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    state = State()
    for node in core.list_node().items:
        state.upsert_node(api.sanitize_for_serialization(node))
    for pod in core.list_pod_for_all_namespaces().items:
        state.upsert_pod(api.sanitize_for_serialization(pod))
    listed = cast(dict[str, Any], custom.list_cluster_custom_object(GROUP, VERSION,
                                                                   "ultraservergroups"))
    groups = listed["items"]
    for group in groups:
        if not args.group or group["metadata"]["name"] in args.group:
            state.upsert_group(group)
    if not state.fleets:
        print("no UltraServerGroup found" + (f" named {', '.join(args.group)}"
                                             if args.group else ""), file=sys.stderr)
        return 1
    now = time.time()
    for group_fleet in state.fleets.values():
        group_fleet.set_clock(now)  # incident scores as of now
    print("\n\n".join(render_text(fleet, name) for name, fleet in sorted(state.fleets.items())))
    if args.output:
        with open(args.output, "w") as out:
            out.write(render_svg(state.fleets))
        print(f"\nwrote {args.output}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        if args.command == "sandbox":
            return _run_sandbox(args)
        if args.command == "kind":
            return cli_kind.run(args)
        if args.command == "topology":
            return _run_topology(args)
        if args.command == "node":
            return _run_node(args)
        if args.command == "placement":
            return _run_placement(args)
        if args.command == "report":
            return cli_report.run(args)
        if args.command == "plan":
            from goodput_operator.simulate import command as simulate

            return simulate.run_plan(args)
    except (cluster.SandboxError, fleet.FleetError, build.BuildError, realnode.RealNodeError,
            images.ImageError, hostnet.HostError, procs.ProcessError) as err:
        # one line that says why, no trace
        print(f"error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 2


if __name__ == "__main__":
    sys.exit(main())
