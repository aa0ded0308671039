"""Fault injection verbs shared by `goodput sandbox` and `goodput kind`: a simulated node
fails or heals through KWOK's chaos stage (in a kind cluster, the kwok controller inside it
plays the same stages), a real sandbox node by its kubelet; a simulated pod ends with an
exit code."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from goodput_operator.sandbox import cluster, faults

Verb = Callable[[str, str], argparse.ArgumentParser]


def add_parsers(verb: Verb) -> None:
    """fail-node, heal-node, fail-pod and succeed-pod, each made by VERB (it adds --name)."""
    fail = verb("fail-node", "make nodes NotReady until heal-node: a simulated node by KWOK's "
                             "chaos stage, a real node by stopping its kubelet (a partition: "
                             "its containers keep running); several nodes fail together")
    fail.add_argument("node", nargs="+")
    fail.add_argument("--crash", action="store_true",
                      help="real nodes: kill every container on them instead")
    fail.add_argument("--reason", default="SimulatedFailure",
                      help="reason on the node's condition (default: %(default)s)")
    fail.add_argument("--signal", default="not-ready", choices=list(faults.SIGNALS),
                      help="how the node fails (default: %(default)s): " + "; ".join(
                          f"{name}: {s.what}" for name, s in faults.SIGNALS.items()))
    notice = verb("notice-node", "give nodes notice that they are about to go, as the AWS "
                                 "Node Termination Handler, Karpenter or a drain would: the "
                                 "gangs there save, then move (heal-node lifts it)")
    notice.add_argument("node", nargs="+")
    notice.add_argument("--kind", default="spot", choices=list(faults.NOTICES),
                        help="the notice (default: %(default)s)")
    heal = verb("heal-node", "make failed nodes Ready again (and lift notices)")
    heal.add_argument("node", nargs="+")
    pod = verb("fail-pod", "terminate a Running pod's containers with an exit code")
    pod.add_argument("pod")
    pod.add_argument("--exit-code", type=int, required=True)
    pod.add_argument("-n", "--namespace", default="default")
    pod.add_argument("--container", help="fail only this container")
    done = verb("succeed-pod", "finish a Running pod with exit code 0, as a worker whose "
                               "script returned")
    done.add_argument("pod")
    done.add_argument("-n", "--namespace", default="default")


def _fail_node(box: cluster.Sandbox, args: argparse.Namespace) -> int:
    faults.fail_node(box, *args.node, reason=args.reason, crash=args.crash, signal=args.signal)
    names = " ".join(args.node)
    if args.crash:
        print(f"every container on {names} killed (SIGKILL: exit code 137); the "
              f"{'nodes stay' if len(args.node) > 1 else 'node stays'} Ready")
    else:
        print(f"{'nodes' if len(args.node) > 1 else 'node'} {names} failing ({args.signal}, "
              f"reason {args.reason}); heal with `goodput {args.command} heal-node {names}`")
    return 0


def _notice_node(box: cluster.Sandbox, args: argparse.Namespace) -> int:
    faults.notice_node(box, *args.node, kind=args.kind)
    names = " ".join(args.node)
    print(f"{'nodes' if len(args.node) > 1 else 'node'} {names} given notice ({args.kind}); "
          f"lift it with `goodput {args.command} heal-node {names}`")
    return 0


def _heal_node(box: cluster.Sandbox, args: argparse.Namespace) -> int:
    faults.heal_node(box, *args.node)
    print(f"{'nodes' if len(args.node) > 1 else 'node'} {' '.join(args.node)} healing")
    return 0


def _succeed_pod(box: cluster.Sandbox, args: argparse.Namespace) -> int:
    faults.succeed_pod(box, args.pod, args.namespace)
    print(f"pod {args.namespace}/{args.pod} is finishing with exit code 0")
    return 0


def _fail_pod(box: cluster.Sandbox, args: argparse.Namespace) -> int:
    faults.fail_pod(box, args.pod, args.exit_code, args.namespace, args.container)
    print(f"pod {args.namespace}/{args.pod} is failing with exit code {args.exit_code}")
    return 0


VERBS: dict[str, Callable[[cluster.Sandbox, argparse.Namespace], int]] = {
    "fail-node": _fail_node, "notice-node": _notice_node, "heal-node": _heal_node,
    "succeed-pod": _succeed_pod, "fail-pod": _fail_pod}
