"""A discrete-event run of one policy over a fleet, a workload and a list of failures.

The simulator only advances time and supplies durations (policies.Costs). What happens is
decided by the same pure functions the controllers call, for the operator's policy:
- placement: topology.placement.place, with decide.gang.gang_request building the request;
- replacement from spares, moving or shrinking the gang: decide.gang.replacement_for;
- detection of a silent node and its quarantine (storm guard included):
  health.quarantine.decide on the node's Lease renewals, and its quarantine_patch;
- the restart budgets and the application-error backoff: decide.attempt.charged,
  decide.attempt.backoff_until;
- the books (detection, replacement, restart, lost work, checkpoint stalls, by cause):
  health.badput.
Baseline policies (policies.py) decide by their documented rules instead.

Work is kept in accelerator-seconds of training: a running stretch gains its accelerators
every second except while a checkpoint is saved; a failure returns the job to its newest
checkpoint (a corruption to the newest before it began). Goodput is the training kept at
the end over the accelerator-seconds paid for (every node of the fleet, the whole time).
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from goodput_operator import times
from goodput_operator.api.statuses import CheckpointRefDict
from goodput_operator.api.trainingjob import IncidentAction, IncidentCause, TrainingJobSpec
from goodput_operator.api.ultraservergroup import UltraServerGroupSpec
from goodput_operator.decide.attempt import Hit, interrupted
from goodput_operator.decide.gang import gang_request, replacement_for
from goodput_operator.decide.types import JobStatus
from goodput_operator.health import badput
from goodput_operator.health.quarantine import (
    SDC,
    Finding,
    Renewal,
    quarantine_patch,
    release_patch,
)
from goodput_operator.health.quarantine import decide as quarantine_decide
from goodput_operator.simulate.failures import Cause, Failure, FailureModel
from goodput_operator.simulate.policies import Costs, Policy, young_daly
from goodput_operator.topology.model import Fleet, GroupShape, Node, trainingjob_owner
from goodput_operator.topology.placement import Placement, RankSlot, place
from goodput_operator.topology.replacement import Replacement

Obj = dict[str, Any]
CAUSES: dict[str, IncidentCause] = {
    "node": "NodeFailure", "domain": "NodeFailure", "sdc": "SilentDataCorruption",
    "crash": "ApplicationError", "hang": "Hang"}


@dataclass
class Stretch:
    """Training from START with WORK accelerator-seconds already kept, at RATE
    accelerators; saves every CYCLE seconds (interval + save)."""

    start: float
    work: float
    rate: int
    end: float = math.inf
    saves: int = 0  # saves completed by END


@dataclass
class Job:
    name: str
    spec: TrainingJobSpec
    target: float  # accelerator-seconds of training to finish (inf: runs to the end)
    arrival: float = 0.0
    namespace: str = "sim"
    workers: int = 0
    ranks: tuple[RankSlot, ...] = ()
    state: str = "queued"  # queued starting running recovering waiting requeued done failed
    epoch: int = 0  # events scheduled before the last change of state are ignored
    work: float = 0.0  # kept at the newest checkpoint (while not running)
    stretch: Stretch | None = None
    history: list[Stretch] = field(default_factory=list)
    books: JobStatus = field(default_factory=JobStatus)  # the part health.badput keeps
    restarts: int = 0
    swapped: bool = False  # kueue: a node hot-swapped since the last admission
    corrupt_since: float | None = None  # a node of the gang computes wrongly since
    durable: bool = False  # the restart under way loads the durable copy (a rollback)

    @property
    def owner(self) -> str:
        return trainingjob_owner(self.namespace, self.name)

    @property
    def rate(self) -> int:
        return len(self.ranks) * self.spec.accelerators_per_worker


class Census(Mapping[str, Obj]):
    """The fleet as health.quarantine.decide reads it: the unwell nodes listed, the fleet's
    size as its length. A healthy node with no quarantine record adds nothing to a
    decision but its count (the storm guard's budget), so a 30,000-node fleet costs what
    its few unwell nodes cost."""

    def __init__(self, unwell: Mapping[str, Obj], size: int) -> None:
        self.unwell, self.size = unwell, size

    def __getitem__(self, name: str) -> Obj:
        return self.unwell[name]

    def __iter__(self) -> Iterator[str]:
        return iter(list(self.unwell))

    def __len__(self) -> int:
        return self.size


def merge(target: Obj, patch: Obj) -> None:
    """Apply a JSON merge patch (RFC 7386) in place: what the API server does with the
    operator's quarantine and release patches."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge(target[key], value)
        else:
            target[key] = value


@dataclass
class Result:
    policy: str
    horizon: float
    accelerators: int
    useful: float = 0.0  # accelerator-seconds of training kept
    held: float = 0.0  # accelerator-seconds jobs held nodes
    down: float = 0.0  # accelerator-seconds nodes were failed or quarantined
    lost: dict[str, float] = field(default_factory=dict)  # the books' buckets, acc-s
    by_cause: dict[str, float] = field(default_factory=dict)  # closed incidents, acc-s
    uncounted: float = 0.0  # rolled back past a restart: the books still count it
    incidents: int = 0
    completed: int = 0
    failed_jobs: int = 0
    storm_holds: int = 0

    @property
    def paid(self) -> float:
        return self.accelerators * self.horizon

    @property
    def goodput(self) -> float:
        return self.useful / self.paid if self.paid else 1.0

    @property
    def job_goodput(self) -> float:
        """The operator's ratio over every job: training kept over training kept plus
        the time lost (launch, checkpoint stalls, detection, replacement including
        waiting for capacity, restart, lost work)."""
        lost = sum(self.lost.values())
        return self.useful / (self.useful + lost) if self.useful + lost else 0.0


class Simulation:
    def __init__(self, policy: Policy, costs: Costs, group: UltraServerGroupSpec,
                 nodes: Sequence[Obj], jobs: Sequence[Job], failures: Sequence[Failure],
                 model: FailureModel, horizon: float, seed: int = 0,
                 resubmit: bool = False) -> None:
        self.policy, self.costs, self.group, self.model = policy, costs, group, model
        self.horizon, self.resubmit = horizon, resubmit
        self.rng = random.Random(seed)
        self.objs: dict[str, Obj] = {n["metadata"]["name"]: _copy_node(n) for n in nodes}
        self.fleet = Fleet.from_objects(GroupShape.from_spec(group), self.objs.values())
        self.per_node = self.fleet.shape.accelerators_per_node
        self.jobs = list(jobs)
        self.holder: dict[str, Job] = {}  # node -> the job whose rank is on it
        self.down: dict[str, float] = {}  # failed node -> since (until repaired)
        self.judged: set[str] = set()  # failed nodes acted on (quarantined, or seen)
        self.unwell: dict[str, Obj] = {}  # node objects quarantine.decide must see
        self.renewals: dict[str, Renewal] = {}
        self.reported: dict[str, Finding] = {}
        self.clean: dict[str, int] = {}
        self.healthy_since: dict[str, float] = {}
        self.latent: dict[str, float] = {}  # node -> since when a dormant bad device is on it
        self.events: list[tuple[float, int, str, Any]] = []
        self.seq = 0
        self.now = 0.0
        self.result = Result(policy.name, horizon, len(self.objs) * self.per_node)
        self.noticed: set[Failure] = set()  # failures the operator had notice of
        for failure in failures:
            if 0 <= failure.time < horizon:
                self.at(failure.time, "fail", failure)
                if self._has_notice(failure):
                    self.at(max(0.0, failure.time - costs.notice_lead_seconds), "notice",
                            failure)
            elif failure.time < 0:
                self._out_at_start(failure)

    def _has_notice(self, failure: Failure) -> bool:
        """Whether FAILURE (a node's) came with notice: drawn at the scenario's share, for
        the operator only (the baselines let the node fail; a notice is not acted on by
        Kubernetes, Kueue or a HyperPod-like agent)."""
        cause = self.model.cause(failure.cause)
        return self.policy.name == "ours" and cause.effect == "node" and \
            self.costs.notice_fraction > 0 and \
            self.rng.random() < self.costs.notice_fraction

    def _out_at_start(self, failure: Failure) -> None:
        """A node lost before the run and not yet repaired at its start: out of service
        (quarantined, for the operator) until its repair, as the fleet would stand."""
        cause = self.model.cause(failure.cause)
        back = failure.time + cause.repair_hours * 3600.0
        if cause.effect not in ("node", "domain") or back <= 0:
            return
        for name in self._struck(failure.node, cause):
            if name in self.down:
                continue
            self._went_down(name, failure.time)
            self.judged.add(name)
            self.at(back, "repair", name)
            if self.policy.node_detection is None:
                found = Finding("NodeLeaseExpired", "failed before the run", failure.time)
                merge(self.objs[name], quarantine_patch(self.objs[name], found, failure.time))
                self.unwell[name] = self.objs[name]
                self.fleet.upsert_node(self.objs[name])
            else:
                self._set_ready(name, False)

    # ---- the clock -----------------------------------------------------------
    def at(self, when: float, kind: str, payload: Any) -> None:
        self.seq += 1
        heapq.heappush(self.events, (when, self.seq, kind, payload))

    def run(self) -> Result:
        for job in self.jobs:
            self.submit(job, job.arrival)
        while self.events and self.events[0][0] < self.horizon:
            when, _, kind, payload = heapq.heappop(self.events)
            self._advance(when)
            getattr(self, f"on_{kind}")(*payload) if isinstance(payload, tuple) \
                else getattr(self, f"on_{kind}")(payload)
        self._advance(self.horizon)
        return self._finish()

    def _advance(self, when: float) -> None:
        span = when - self.now
        if span > 0:
            self.result.held += span * sum(j.rate for j in self.jobs)
            self.result.down += span * len(self.down) * self.per_node
        self.now = when
        self.fleet.set_clock(when)

    # ---- jobs ----------------------------------------------------------------
    def submit(self, job: Job, when: float) -> None:
        job.books = {"goodput": badput.staged({}, "queueing", when, created=when)}
        job.state = "queued"
        if job not in self.jobs:
            self.jobs.append(job)
        self._place_waiting()

    def _place_waiting(self) -> None:
        """Place every job that waits for a whole placement, in arrival order, as the
        controller does for a new gang or one whose recovery waits for capacity."""
        waiting = sorted((j for j in self.jobs if j.state in ("queued", "waiting")),
                         key=lambda j: j.arrival)
        free = sum(n.free for n in self.fleet.nodes.values()) if waiting else 0
        for job in waiting:
            need = (job.workers or job.spec.workers) * job.spec.accelerators_per_worker
            if need > free:
                continue  # cannot fit whatever the placement: spares and all are too few
            # a gang recovering may take spares (what they are held for); so may a gang of
            # the run's start, which begins mid-life: spares replaced its nodes still out
            recovering = job.state == "waiting" or job.arrival == 0 or \
                self.policy.name != "ours"
            request = gang_request(job.spec, job.workers or job.spec.workers)
            if recovering:
                with self.fleet.spares_released():
                    placed = place(self.fleet, request)
            else:
                placed = place(self.fleet, request)
            if not placed.ok:
                continue
            self._bind(job, placed.ranks)
            free -= need
            if job.state == "queued":
                job.books = {**job.books, "goodput": badput.staged(job.books, "launch",
                                                                   self.now)}
                job.state = "starting"
                job.epoch += 1
                self.at(self.now + self.costs.restart_seconds, "running", (job, job.epoch))
            else:
                self._restart(job, self.now, "move")

    def _bind(self, job: Job, ranks: Sequence[RankSlot],
              moved: Mapping[str, str] | None = None) -> None:
        """Hold RANKS' nodes for JOB: only the nodes that change are released or bound (a
        worker per node; a restart renumbers ranks but moves only the replaced). MOVED:
        the changes (old node -> new node) when the caller knows them."""
        if moved is None:
            before = {r.node for r in job.ranks}
            after = {r.node for r in ranks}
            gone, new = before - after, after - before
        else:
            gone, new = set(moved) - set(moved.values()), set(moved.values()) - set(moved)
        self.fleet.release_all(f"{job.name}@{node}" for node in gone)
        for node in gone:
            if self.holder.get(node) is job:
                del self.holder[node]
        for node in new:
            self.fleet.bind(f"{job.name}@{node}", node, job.spec.accelerators_per_worker,
                            job.owner)
            self.holder[node] = job
        job.ranks = tuple(ranks)
        job.workers = len(ranks)

    def _unbind(self, job: Job) -> None:
        workers = job.workers  # kept: the size it is placed at again
        self._bind(job, ())
        job.workers = workers

    def _corrupts(self, job: Job, node: str) -> None:
        """NODE's bad device corrupts JOB's training from now, until the policy convicts
        it (the replicas' votes, or a person)."""
        job.corrupt_since = min(job.corrupt_since or self.now, self.now)
        delay = self.costs.sdc_vote_seconds if self.policy.detects_sdc else \
            self.costs.human_seconds
        self.at(self.now + delay, "convicted", (node, self.now))

    def on_running(self, job: Job, epoch: int) -> None:
        if job.epoch != epoch:
            return
        if job.state == "starting":
            job.books = {**job.books, "goodput": badput.staged(job.books, None, self.now)}
        job.books = badput.running_again(job.books, self.now)
        job.state = "running"
        job.stretch = Stretch(self.now, job.work, job.rate)
        for node in sorted({r.node for r in job.ranks} & self.latent.keys()):
            del self.latent[node]  # a dormant bad device computes for this gang now
            self._corrupts(job, node)
        if math.isfinite(job.target):
            left = max(0.0, (job.target - job.work) / job.rate)
            saves = math.floor(left / self.interval(job)) if left > 0 else 0
            self.at(self.now + left + saves * self.costs.snapshot_seconds, "complete",
                    (job, job.epoch))

    def on_complete(self, job: Job, epoch: int) -> None:
        if job.epoch != epoch:
            return
        job.work = job.target
        job.books = badput.stopped(job.books, self.now)
        job.state, job.stretch = "done", None
        job.epoch += 1
        self._unbind(job)
        self.result.completed += 1
        if self.resubmit:
            self.submit(Job(f"{job.name.split('.')[0]}.{self.result.completed}", job.spec,
                            job.target, self.now), self.now)
        self._place_waiting()

    def interval(self, job: Job) -> float:
        """Seconds of training between checkpoint saves: as given, else the Young/Daly
        optimum for the job's size and the failure model."""
        if self.costs.interval:
            return self.costs.interval
        workers = job.workers or job.spec.workers
        mtbf = self.model.mtbf(workers * job.spec.accelerators_per_worker, workers)
        return min(young_daly(self.costs.snapshot_seconds, mtbf), self.horizon)

    # ---- failures ------------------------------------------------------------
    def on_notice(self, failure: Failure) -> None:
        """A notice for FAILURE's node: out of placements from now (cordoned), its gang
        asked to save; once saved (a pass, then the save) the rank moves and the gang
        resumes from that save (decide.noticing). The node fails on time, vacated."""
        name = failure.node
        if name in self.down:
            return
        self.noticed.add(failure)
        cause = self.model.cause(failure.cause)
        self._went_down(name, self.now)
        self.judged.add(name)
        self._set_ready(name, False)
        self.at(failure.time + cause.repair_hours * 3600.0, "repair", name)
        job = self.holder.get(name)
        if job is not None and job.state == "running":
            self.at(self.now + self.costs.pass_seconds + self.costs.snapshot_seconds,
                    "saved", (job, job.epoch, name))

    def on_saved(self, job: Job, epoch: int, name: str) -> None:
        if job.epoch == epoch:
            self._interrupt(job, "Notice", self.now, [name])

    def on_fail(self, failure: Failure) -> None:
        if failure in self.noticed:
            return  # vacated at its notice; out until its repair
        cause = self.model.cause(failure.cause)
        if cause.effect in ("crash", "hang"):
            job = self.holder.get(failure.node)
            if job is not None and job.state == "running":
                delay = self.policy.crash_detection if cause.effect == "crash" else \
                    self._hang_window(job)
                self.at(self.now + delay, "detected",
                        (job, job.epoch, CAUSES[cause.effect], self.now, ()))
            return
        if cause.effect == "sdc":
            job = self.holder.get(failure.node)
            if job is None or job.state != "running":
                # a bad device on a node computing nothing: dormant until a gang computes
                # on it (on_running), not gone
                self.latent.setdefault(failure.node, self.now)
                return
            self._corrupts(job, failure.node)
            return
        for name in self._struck(failure.node, cause):
            if name in self.down:
                continue
            self._went_down(name, self.now)
            self.at(self.now + cause.repair_hours * 3600.0, "repair", name)
            self.at(self._verdict_time(name), "verdict", name)
            if self.policy.node_detection is not None:
                self._set_ready(name, False)

    def _went_down(self, name: str, at: float) -> None:
        """NAME fails at AT: down until its repair, and no longer healthy. The healthy time
        and clean probes of an earlier repair go with it, as the operator's cache forgets
        them when a node turns unhealthy; kept, a node failing a second time was released
        by the first repair's clock, minutes into its new quarantine."""
        self.down[name] = at
        self.healthy_since.pop(name, None)
        self.clean.pop(name, None)

    def _struck(self, node: str, cause: Cause) -> list[str]:
        """The nodes a failure of CAUSE at NODE takes down: it, or its whole domain."""
        if cause.effect != "domain":
            return [node]
        return [n.name for n in self.fleet.domains[self.fleet.nodes[node].domain].nodes]

    def _hang_window(self, job: Job) -> float:
        if self.policy.hang_detection is not None:
            return self.policy.hang_detection
        hang = job.spec.failure_policy.hang
        return float(hang.min_seconds) if hang.enabled else self.horizon

    def _verdict_time(self, name: str) -> float:
        """When the policy acts on a silent node: the operator once its Lease has been
        silent long enough (the kubelet last renewed at a random point of its interval)."""
        if self.policy.node_detection is not None:
            return self.now + self.policy.node_detection
        every = self.costs.lease_renew_seconds
        renewed = self.now - self.rng.uniform(0.0, every)
        self.renewals[name] = Renewal(renewed, every)
        limit = self.renewals[name].limit(self.group.quarantine)
        return max(self.now, renewed + limit) + self.costs.pass_seconds

    def on_verdict(self, name: str) -> None:
        if name not in self.down:
            return
        if self.policy.node_detection is None and not self._quarantine({name}):
            return  # the storm guard holds it: judged again when a node is released
        self.judged.add(name)
        job = self.holder.get(name)
        if job is not None:
            self._interrupt(job, "NodeFailure", self.down[name], [name])

    def on_convicted(self, name: str, since: float) -> None:
        job = self.holder.get(name)
        if self.policy.name == "ours":
            self.reported[name] = Finding(SDC, "the replicas' votes disagree with it", since)
            self._quarantine({name})
            self.reported.pop(name, None)
        if name not in self.down:
            self._went_down(name, self.now)
        self.judged.add(name)
        self.at(self.now + self.model.cause("sdc").repair_hours * 3600.0, "repair", name)
        if job is not None:
            self._interrupt(job, "SilentDataCorruption", since, [name])

    def _quarantine(self, names: set[str]) -> bool:
        """The operator's quarantine decision on the nodes NAMES (failing, or blamed):
        True when they are quarantined, False when the storm guard holds them."""
        heard = Renewal(self.now, self.costs.lease_renew_seconds)  # the others renew
        unwell = {**{n: self.objs[n] for n in names}, **self.unwell}
        decision = quarantine_decide(
            Census(unwell, len(self.objs)), self.group.quarantine, self.now, {},
            self.healthy_since, self.reported, self.clean,
            {**{n: r for n, r in self.renewals.items() if n in names}, "": heard})
        if decision.held:
            self.result.storm_holds += 1
        for name, found in decision.quarantine:
            merge(self.objs[name], quarantine_patch(self.objs[name], found, self.now))
            self.unwell[name] = self.objs[name]
            self.fleet.upsert_node(self.objs[name])
        return all(n in self.unwell for n in names)

    def on_repair(self, name: str) -> None:
        if name not in self.down:
            return
        self.renewals.pop(name, None)
        if self.policy.node_detection is not None or name not in self.unwell:
            self._heal(name)
            return
        self.healthy_since[name] = self.now  # healthy again: released when the policy says
        self.clean[name] = self.group.quarantine.release_after_clean_probes
        self.at(self.now + self.group.quarantine.release_after_healthy_seconds
                + self.costs.pass_seconds, "release", name)

    def on_release(self, name: str) -> None:
        decision = quarantine_decide(Census(self.unwell, len(self.objs)),
                                     self.group.quarantine, self.now, {}, self.healthy_since,
                                     {}, self.clean)
        for released, _ in decision.release:
            merge(self.objs[released], release_patch(self.objs[released]))
            self.unwell.pop(released, None)
            self.clean.pop(released, None)
            self._heal(released)
        if name in self.unwell:
            self.at(self.now + 60.0, "release", name)
        for held in [n for n in self.down if n not in self.judged]:
            self.on_verdict(held)  # judged again now that the guard may allow it

    def _heal(self, name: str) -> None:
        self.down.pop(name, None)
        self.latent.pop(name, None)  # repaired: a dormant bad device went with the rest
        self.judged.discard(name)
        self._set_ready(name, True)
        self._place_waiting()
        for job in self.jobs:
            if job.state == "recovering":
                self._recover(job)

    def _set_ready(self, name: str, ready: bool) -> None:
        obj = self.objs[name]
        obj["status"]["conditions"] = [{"type": "Ready", "status": str(ready),
                                        "lastTransitionTime": times.millis(self.now)}]
        self.fleet.upsert_node(obj)

    def on_detected(self, job: Job, epoch: int, cause: IncidentCause, failed_at: float,
                    nodes: tuple[str, ...]) -> None:
        if job.epoch == epoch:
            self._interrupt(job, cause, failed_at, list(nodes))

    # ---- interruption and recovery ---------------------------------------------
    def _interrupt(self, job: Job, cause: IncidentCause, failed_at: float, nodes: list[str]
                   ) -> None:
        """The policy acts on a failure of JOB: the stretch ends, the books open an
        incident, and recovery starts."""
        if job.state in ("queued", "done", "failed", "requeued", "waiting"):
            return
        if job.state == "recovering":  # not restarted yet: recovered from together
            self._recover(job)
            return
        job.durable = cause == "SilentDataCorruption"  # a rollback loads the durable copy
        resume = self._resume_point(job, failed_at, job.durable, cause == "Notice")
        books = job.books
        if job.state == "starting":  # the launch was hit: its stage closes
            books = {**books, "goodput": badput.staged(books, None, self.now)}
        books = {**books, "checkpoint": {"latest": resume, "latestVerified": resume}}
        since = times.parse((books.get("goodput") or {}).get("since"))
        # the operator's own rules (decide.attempt.interrupted); the other policies have
        # no restart budgets and no backoff
        opened = interrupted(books, job.spec if self.policy.name == "ours" else None,
                             job.restarts, Hit(cause, cause, nodes,
                                               max(failed_at, since or failed_at)),
                             self.now, True)
        if opened is None:  # the restart budget is used up: the job fails
            if badput.current_incident(books) is not None:  # its recovery ends with it
                books = badput.running_again(books, failed_at)
            job.books = badput.stopped(books, self.now)
            self._stop(job, "failed")
            self.result.failed_jobs += 1
            return
        job.books, restart_at = opened
        self.result.incidents += 1
        job.state, job.stretch = "recovering", None
        job.epoch += 1
        if restart_at is not None:
            self.at(restart_at, "retry", (job, job.epoch))
            return
        self._recover(job)

    def _resume_point(self, job: Job, failed_at: float, convicted: bool,
                      saved_now: bool = False) -> CheckpointRefDict | None:
        """Close the running stretch at FAILED_AT; the checkpoint the job resumes from
        (once a corruption is CONVICTED, the newest before it began; SAVED_NOW: the one
        a notice's save just wrote), with the work it holds. Restarts before the
        conviction resume from the newest checkpoint, which may already hold wrong
        results."""
        interval, save = self.interval(job), self.costs.snapshot_seconds
        stretch = job.stretch
        if stretch is not None:
            stretch.end = max(stretch.start, failed_at)
            stretch.saves = int((stretch.end - stretch.start) // (interval + save))
            job.history.append(stretch)
            if saved_now and not convicted:  # a save just ended (a notice's): all is kept
                span = stretch.end - stretch.start
                job.work = stretch.work + max(0.0, span - (stretch.saves + 1) * save) * \
                    stretch.rate
                job.books = {**job.books, "goodput": badput.stalled(
                    job.books.get("goodput") or {}, (stretch.saves + 1) * save, failed_at)}
                return {"step": int(job.work), "time": times.millis(failed_at)}
        bad = job.corrupt_since if convicted else None
        if convicted:
            job.corrupt_since = None
        for past in reversed(job.history):
            if bad is not None and past.start > bad:
                continue  # resumed from a checkpoint written after the corruption
            saves = past.saves if bad is None else min(
                past.saves, int((bad - past.start) // (interval + save)))
            job.work = past.work + saves * interval * past.rate
            at = past.start + saves * (interval + save)
            if stretch is not None and past is stretch and saves:
                job.books = {**job.books, "goodput": badput.stalled(
                    job.books.get("goodput") or {}, saves * save, failed_at)}
            return {"step": int(job.work), "time": times.millis(at)}
        job.work = 0.0
        return None

    def on_retry(self, job: Job, epoch: int) -> None:
        if job.epoch == epoch:
            self._recover(job)

    def _recover(self, job: Job) -> None:
        """Restart the gang once the failures on its nodes are judged: on the same nodes,
        with failed ranks replaced, moved whole, shrunk, or waiting for capacity."""
        if job.state != "recovering":
            return
        out = {*self.down, *self.unwell}  # a few nodes, where the gang has thousands
        if any(n not in self.judged and self.holder.get(n) is job for n in self.down):
            return  # failures arriving together are recovered from together
        failed = sorted(n for n in out if self.holder.get(n) is job)
        if not failed:
            self._restart(job, self.now, "restart")
            return
        kind = self.policy.replacement
        if kind == "operator":
            replaced = self.operator_replacement(job, failed)
            if replaced.action == "wait":
                self._wait(job, "waiting")
                return
            moved = None
            if replaced.action == "replace" and replaced.moved is not None:
                out_now = set(failed)
                lost = {r.rank: r.node for r in job.ranks if r.node in out_now}
                moved = {lost[rank]: node for rank, node in replaced.moved.items()}
            self._bind(job, replaced.ranks, moved)
            self._restart(job, self.now + self.costs.replacement_seconds, replaced.action)
        elif kind == "hot-swap":
            spot = self._free_node(failed[0]) if len(failed) == 1 and not job.swapped \
                else None
            if spot is None:
                self._wait(job, "requeued")
                self.at(self.now + self.costs.requeue_seconds, "requeue", (job, job.epoch))
                return
            job.swapped = True
            self._swap(job, {failed[0]: spot})
            self._restart(job, self.now, "replace")
        else:  # scheduler (any free node) or pool (spares first, anywhere)
            spots = self._free_nodes(len(failed))
            if len(spots) < len(failed):
                return  # a pod stays Pending: tried again when a node heals
            self._swap(job, dict(zip(failed, spots, strict=False)))
            self._restart(job, self.now + self.policy.swap_seconds, "replace")

    def operator_replacement(self, job: Job, failed: Sequence[str]) -> Replacement:
        """The operator's decision for JOB's gang when its nodes FAILED are lost: the
        function the controller's restart calls (decide.gang.replacement_for), on this
        fleet, for a request built as the controller builds it."""
        return replacement_for(self.fleet, job.spec, Placement(True, "", job.ranks), failed,
                               gang_request(job.spec, len(job.ranks)), job.owner)

    def hold(self, job: Job, ranks: Sequence[RankSlot]) -> None:
        """Start JOB on RANKS now, running (for a scenario that begins mid-run)."""
        self._bind(job, ranks)
        job.state = "running"
        job.books = badput.running_again(job.books, self.now)
        job.stretch = Stretch(self.now, job.work, job.rate)

    def on_requeue(self, job: Job, epoch: int) -> None:
        if job.epoch == epoch and job.state == "requeued":
            job.state, job.swapped = "waiting", False
            self._place_waiting()

    def _wait(self, job: Job, state: str) -> None:
        self._unbind(job)
        job.state = state
        job.epoch += 1
        if state == "waiting":
            self._place_waiting()

    def _free_node(self, failed: str) -> Node | None:
        """A healthy node with room for a worker in FAILED's domain (Kueue's hot swap)."""
        home = self.fleet.domains[self.fleet.nodes[failed].domain]
        return next((n for n in home.nodes if n.free >= self.per_node), None)

    def _free_nodes(self, count: int) -> list[Node]:
        """Up to COUNT healthy nodes with room for a worker, anywhere (the scheduler
        knows no topology); spares first when the policy keeps a pool."""
        free = [n for n in self.fleet.nodes.values() if n.free >= self.per_node]
        if self.policy.replacement == "pool":
            free.sort(key=lambda n: not n.spare)
        return free[:count]

    def _swap(self, job: Job, moves: Mapping[str, Node]) -> None:
        ranks = tuple(RankSlot(r.rank, moves[r.node].name, moves[r.node].domain,
                               moves[r.node].slot) if r.node in moves else r
                      for r in job.ranks)
        self._bind(job, ranks, {old: node.name for old, node in moves.items()})

    def _restart(self, job: Job, placed_at: float, action: IncidentAction) -> None:
        job.books = badput.replaced(job.books, placed_at, action)
        job.restarts += 1
        job.state = "restarting"
        job.epoch += 1
        self.at(placed_at + self.costs.resume_seconds(job.durable), "running",
                (job, job.epoch))

    def _stop(self, job: Job, state: str) -> None:
        self._unbind(job)
        job.state, job.stretch = state, None
        job.epoch += 1
        self._place_waiting()

    # ---- the end -------------------------------------------------------------
    def _finish(self) -> Result:
        result = self.result
        for job in self.jobs:
            stretch = job.stretch
            work = job.work
            if stretch is not None:  # the end is no failure: all of it is kept
                span = self.horizon - stretch.start
                save = self.costs.snapshot_seconds
                saves = int(span // (self.interval(job) + save))
                work = stretch.work + (span - saves * save) * stretch.rate
                job.books = {**job.books, "goodput": badput.stalled(
                    job.books.get("goodput") or {}, saves * save,
                    self.horizon)}
            result.useful += work
            accelerators = job.spec.accelerators_per_worker * (job.workers or
                                                                job.spec.workers)
            spent = badput.attributed(job.books, self.horizon)
            for bucket, seconds in spent.items():
                if bucket not in ("productive", "queueing", "suspended"):
                    result.lost[bucket] = result.lost.get(bucket, 0.0) + seconds * accelerators
            for cause, seconds in ((job.books.get("goodput") or {}).get("lostByCause")
                                   or {}).items():
                result.by_cause[cause] = result.by_cause.get(cause, 0.0) + \
                    float(seconds) * accelerators
            result.uncounted += max(0.0, spent["productive"] * accelerators - work)
        return result


def _copy_node(node: Obj) -> Obj:
    return {"metadata": {**node["metadata"], "labels": dict(node["metadata"]["labels"]),
                         "annotations": dict(node["metadata"].get("annotations") or {})},
            "spec": dict(node.get("spec") or {}),
            "status": {**node.get("status", {}),
                       "conditions": [{"type": "Ready", "status": "True"}]}}
