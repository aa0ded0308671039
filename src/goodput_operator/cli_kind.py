"""`goodput kind up|down|load|status|kubeconfig`: a real kind cluster on this machine
(sandbox/kind.py), for the suite and for users who would rather try the operator on kind."""

from __future__ import annotations

import argparse
from pathlib import Path

from goodput_operator import __version__, cli_faults
from goodput_operator.sandbox import fleet, images, kind, operator_image


def named_verbs(verbs: argparse._SubParsersAction[argparse.ArgumentParser], default: str,
                what: str) -> cli_faults.Verb:
    """A maker of VERBS' parsers, each taking `--name` (of the WHAT it acts on)."""
    def verb(name: str, help_text: str) -> argparse.ArgumentParser:
        parser = verbs.add_parser(name, help=help_text, description=help_text)
        parser.add_argument("--name", default=default,
                            help=f"{what} name (default: %(default)s)")
        return parser
    return verb


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    top = sub.add_parser(
        "kind", help="a real kind cluster (rootful Podman, a node image built here)",
        description="kind v0.33.0 with Podman, from a node image assembled on this machine "
                    "with no registry; KWOK inside it plays the simulated fleet's kubelets.")
    verbs = top.add_subparsers(dest="verb", required=True, metavar="VERB")
    verb = named_verbs(verbs, kind.DEFAULT_NAME, "cluster")

    up = verb("up", "build what is missing (first time: minutes), create the cluster, its "
                    "pod network, DNS and kwok, then the fleet's simulated nodes")
    up.add_argument("--workers", type=int, default=1, metavar="N",
                    help="kind worker nodes beside the control plane (default %(default)s)")
    up.add_argument("--fleet", default=fleet.DEFAULT_FLEET,
                    help="built-in fleet name or fleet YAML file (default: %(default)s)")
    load = verb("load", "load images into every node: the operator's (built from the "
                        "Dockerfile) and the worker's, or the OCI/docker archives named")
    load.add_argument("archive", nargs="*", help="image archives (default: the operator and "
                                                 "worker images)")
    load.add_argument("--tag", default=__version__,
                      help="the operator image's tag (default: %(default)s)")
    verb("down", "delete the cluster; the last one puts the host back as found")
    verb("status", "whether the cluster runs, its kubeconfig and node readiness")
    verb("kubeconfig", "print the path of the cluster's kubeconfig")
    cli_faults.add_parsers(verb)


def run(args: argparse.Namespace) -> int:
    box = kind.KindCluster(args.name)
    if args.verb in cli_faults.VERBS:
        return cli_faults.VERBS[args.verb](box, args)
    if args.verb == "up":
        chosen = kind.up(box, args.workers, args.fleet)
        print(fleet.summary(chosen))
        print(f"\nkubeconfig: {box.kubeconfig}\n"
              f"  goodput kind load --name {box.name}   # the operator and worker images\n"
              f"Delete it with: goodput kind down --name {box.name}")
        return 0
    if args.verb == "load":
        found = [images.Image(path, Path(path)) for path in args.archive] or [
            operator_image.build_image(args.tag).as_image(), images.worker_image()]
        kind.load(box, found)
        return 0
    if args.verb == "down":
        if not kind.down(box):
            print(f"kind cluster {box.name!r}: none to delete")
        return 0
    if args.verb == "kubeconfig":
        print(box.kubeconfig)
        return 0 if box.kubeconfig.is_file() else 1
    running = box.is_running()
    print(f"kind cluster {box.name!r}: {'running' if running else 'not running'}")
    if running:
        from goodput_operator.sandbox import cluster

        ready, total = cluster.node_readiness(box)
        print(f"  kubeconfig: {box.kubeconfig}\n  nodes: {ready}/{total} Ready\n"
              f"  node containers: {', '.join(box.node_containers())}")
    return 0 if running else 1
