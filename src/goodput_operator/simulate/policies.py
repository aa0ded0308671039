"""Who decides what after a failure, and the durations the simulator supplies.

`ours` is the operator: its Lease watch and quarantine decision (health.quarantine), its
replacement (decide.gang.replacement_for), its restart budgets and backoff (decide.attempt),
its books (health.badput). The baselines are what their documentation says they do:

- `kubernetes`: a silent node is marked unreachable after the node lifecycle controller's
  50 s grace; its pods are evicted when the NoExecute taint has stood the default 300 s
  toleration; kube-scheduler puts the replacement pod on any free node (no spares, no
  topology); a JobSet-style failure policy restarts the whole gang. A hang lasts until
  PyTorch's NCCL watchdog (600 s by default) kills the processes; corruption is not seen
  until a person reads the loss curve.
- `kueue`: topology-aware scheduling's failed-node replacement ("hot swap"): once the
  node's pods have terminated (the same 350 s: Kueue v0.17's TASReplaceNodeOnPodTermination
  gate, beta and on since 0.14), one failed node is replaced inside the same topology
  domain; a second failure, or no room there, evicts the workload, which is requeued after
  the requeue backoff (backoffBaseSeconds, 60 s) and placed again whole.
- `kueue-30s`: the same with that gate off, as older releases behave: the node is
  failed once NotReady for NodeFailureDelay (30 s, pkg/controller/tas/constants.go), after
  the lifecycle controller's 50 s grace marks it NotReady. Not in the default comparison
  (`--policies ours,kueue-30s`).
- `hyperpod`: SageMaker HyperPod-like resiliency: health agents find a failed node and
  replace it from a pool of spares anywhere in the cluster, with job auto-resume; about
  2 minutes from failure to the new node (60 s to detect, 60 s to swap). No topology is
  kept; corruption is not detected while training.

Every policy restarts the whole gang from its newest checkpoint (a collective job cannot
continue without a rank) and pays the same pod start, checkpoint load and save costs: they
belong to the training program, not to the control plane.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

NODE_MONITOR_GRACE = 50.0  # kube-controller-manager: a silent kubelet -> unreachable
TOLERATION = 300.0  # the default not-ready/unreachable NoExecute toleration
NCCL_WATCHDOG = 600.0  # PyTorch ProcessGroupNCCL's default collective timeout
KUEUE_NODE_FAILURE_DELAY = 30.0  # Kueue TAS: NotReady this long = failed (gate off)

Replacement = Literal["operator", "scheduler", "hot-swap", "pool"]


@dataclass(frozen=True)
class Costs:
    """Durations the simulator supplies; what is done with them is the policy's. Defaults
    are the operator's measured figures (bench/README.md, "Recovery", real nodes) where one
    exists, else a stated assumption."""

    pass_seconds: float = 0.35  # event -> the operator's verdict (measured 0.3-0.4 s)
    replacement_seconds: float = 0.06  # verdict -> new placement written (measured)
    pod_start_seconds: float = 1.33  # placement -> every worker Running (measured, median)
    load_seconds: float = 1.96  # Running -> first step: rendezvous, checkpoint load (measured)
    save_seconds: float = 1.0  # training stalled by one checkpoint save (assumption)
    interval: float | None = None  # seconds of training between saves; None: Young/Daly
    lease_renew_seconds: float = 10.0  # a kubelet renews its Lease this often (upstream)
    sdc_vote_seconds: float = 60.0  # corruption -> the replicas' votes convict (assumption)
    human_seconds: float = 6 * 3600.0  # corruption -> a person rolls back (assumption)
    requeue_seconds: float = 60.0  # Kueue's requeue backoff base
    hyperpod_detect_seconds: float = 60.0
    hyperpod_swap_seconds: float = 60.0
    # in-memory checkpoints (assumptions: the operator does not keep them yet): each rank's
    # state copied to host memory and to a peer in another domain, the durable copy written
    # from memory in the background; a restart loads from the peer, a rollback after
    # corruption from the durable copy
    in_memory: bool = False
    memory_save_seconds: float = 0.1  # training stalled by one snapshot to host memory
    memory_load_seconds: float = 0.5  # a replacement's state fetched from its peer
    # notices (spot interruption, maintenance, rebalance): this share of node failures
    # comes notice_lead_seconds ahead; the operator saves the gang and moves the rank
    # before the node goes (decide.noticing); the other policies let the node fail
    notice_fraction: float = 0.0
    notice_lead_seconds: float = 120.0

    @property
    def restart_seconds(self) -> float:
        """A gang restart, placement written -> training again."""
        return self.pod_start_seconds + self.load_seconds

    @property
    def snapshot_seconds(self) -> float:
        """The stall of one checkpoint: to host memory when in_memory, else durable."""
        return self.memory_save_seconds if self.in_memory else self.save_seconds

    def resume_seconds(self, durable: bool) -> float:
        """Placement written -> training again, loading from a peer's memory unless the
        restart needs the DURABLE copy (a rollback past corruption) or there is none."""
        load = self.memory_load_seconds if self.in_memory and not durable else \
            self.load_seconds
        return self.pod_start_seconds + load


@dataclass(frozen=True)
class Policy:
    name: str
    title: str
    node_detection: float | None  # failure -> acted on; None: the operator's own verdict
    crash_detection: float  # a worker process exits -> the gang restarts
    hang_detection: float | None  # progress stops -> acted on; None: the job's hang window
    detects_sdc: bool  # the replicas' votes convict the node (else a person, much later)
    replacement: Replacement
    swap_seconds: float = 0.0  # detection -> a new node handed over (HyperPod's swap)


def policies(costs: Costs) -> dict[str, Policy]:
    k8s_detect = NODE_MONITOR_GRACE + TOLERATION
    return {
        "ours": Policy("ours", "goodput operator", None, costs.pass_seconds, None, True,
                       "operator"),
        "kubernetes": Policy("kubernetes", "Kubernetes defaults + JobSet restart",
                             k8s_detect, 1.0, NCCL_WATCHDOG, False, "scheduler"),
        "kueue": Policy("kueue", "Kueue TAS node hot swap", k8s_detect, 1.0, NCCL_WATCHDOG,
                        False, "hot-swap"),
        "kueue-30s": Policy("kueue-30s", "Kueue TAS hot swap, 30 s NotReady",
                            NODE_MONITOR_GRACE + KUEUE_NODE_FAILURE_DELAY, 1.0, NCCL_WATCHDOG,
                            False, "hot-swap"),
        "hyperpod": Policy("hyperpod", "HyperPod-like node replacement",
                           costs.hyperpod_detect_seconds, 1.0, NCCL_WATCHDOG, False, "pool",
                           costs.hyperpod_swap_seconds),
    }


def young_daly(save_seconds: float, mtbf: float) -> float:
    """The checkpoint interval that minimises expected loss: sqrt(2 x save cost x MTBF)
    (Young 1974; Daly 2006's first-order form)."""
    if math.isinf(mtbf) or save_seconds <= 0:
        return math.inf if math.isinf(mtbf) else 60.0
    return math.sqrt(2.0 * save_seconds * mtbf)
