"""Leader election on a coordination.k8s.io Lease, as controller-runtime and client-go do.

Why a Lease and not kopf peering: peering only pauses an operator after it has seen a
higher-priority peer's record, so two replicas can both act for a moment at start-up and
after a partition; it needs its own CRD; and nothing else in the cluster reads it. A Lease
gives one holder at a time through the API server's optimistic concurrency (every write
carries the resourceVersion it read), is what `kubectl get lease` and every Kubernetes
operator's runbook already know, and needs only get/create/update on one object.

Timing follows client-go's defaults: a lease lasts 15 s, the holder renews every 2 s and
gives up when it cannot renew for 10 s, so a successor can never act while the old
holder still believes it leads. Expiry is judged by when *this* replica last saw the
record change, never by comparing clocks across machines.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, cast

from kubernetes.client import CoordinationV1Api
from kubernetes.client.exceptions import ApiException

from goodput_operator import names, times
from goodput_operator.controllers.kube import Kube, Obj

log = logging.getLogger("goodput.leader")


def leading_pod(pods: Iterable[Obj], holder_identity: str) -> Obj | None:
    """Of the operator's PODS, the one serving as leader: the Lease's holder (identities are
    `<pod>_<random>`, operator/main.py), Ready, and labelled for the reports Service."""
    holder = holder_identity.rsplit("_", 1)[0] if holder_identity else None
    for pod in pods:
        ready = any(c.get("type") == "Ready" and c.get("status") == "True"
                    for c in pod.get("status", {}).get("conditions") or [])
        labelled = pod["metadata"].get("labels", {}).get(names.LEADER_LABEL) == "true"
        if pod["metadata"]["name"] == holder and ready and labelled:
            return pod
    return None


@dataclass
class Observed:
    holder: str
    renew_time: str
    version: str
    seen_at: float  # monotonic: when this replica saw (holder, renew_time) change


def next_record(lease: Obj | None, identity: str, seen: Observed | None, now: float,
                monotonic: float, duration: float) -> Obj | None:
    """The Lease spec to write to hold the lease, or None when another holder's lease is
    still live. Pure: the whole decision is here and table-tested."""
    spec = (lease or {}).get("spec") or {}
    holder = spec.get("holderIdentity") or ""
    if holder and holder != identity:
        if seen is None or seen.holder != holder or \
                seen.renew_time != (spec.get("renewTime") or ""):
            return None  # the record just changed under us: its holder is alive
        if monotonic - seen.seen_at < float(spec.get("leaseDurationSeconds") or duration):
            return None
    stamp = times.micros(now)
    taking = holder != identity
    return {"holderIdentity": identity, "leaseDurationSeconds": int(duration),
            "acquireTime": stamp if taking else spec.get("acquireTime", stamp),
            "renewTime": stamp,
            "leaseTransitions": int(spec.get("leaseTransitions") or 0) + (
                1 if taking and lease is not None else 0)}


class LeaderElection:
    def __init__(self, kube: Kube, namespace: str, name: str, identity: str,
                 duration: float = 15.0, renew_deadline: float = 10.0,
                 retry_period: float = 2.0) -> None:
        self.api = CoordinationV1Api(kube.api)
        self.namespace, self.name, self.identity = namespace, name, identity
        self.duration, self.renew_deadline, self.retry_period = (duration, renew_deadline,
                                                                 retry_period)
        self.leading = False
        self.last_renewed = 0.0  # monotonic: the last renewal that landed
        self.call_timeout = min(5.0, renew_deadline / 2)  # each Lease request's deadline
        self.executor = ThreadPoolExecutor(1, thread_name_prefix="lease")  # never queued
        # behind the API calls of a busy pass or a flood of reports
        self._seen: Observed | None = None

    def holds(self) -> bool:
        """Leading, and the lease renewed within the renew deadline: what every write
        asks first (a replica stalled past it may already have a successor)."""
        return self.leading and time.monotonic() - self.last_renewed < self.renew_deadline

    def _read(self) -> Obj | None:
        try:
            lease = self.api.read_namespaced_lease(self.name, self.namespace,
                                                   _request_timeout=self.call_timeout)
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return cast(Obj, self.api.api_client.sanitize_for_serialization(lease))

    def try_hold(self) -> bool:
        """One attempt to acquire or renew; True while this replica holds the lease."""
        lease = self._read()
        spec = (lease or {}).get("spec") or {}
        key = (spec.get("holderIdentity") or "", spec.get("renewTime") or "")
        if self._seen is None or (self._seen.holder, self._seen.renew_time) != key:
            version = (lease or {}).get("metadata", {}).get("resourceVersion", "")
            self._seen = Observed(*key, version, time.monotonic())
        record = next_record(lease, self.identity, self._seen, time.time(), time.monotonic(),
                             self.duration)
        if record is None:
            return False
        body: Any = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                     "metadata": {"name": self.name, "namespace": self.namespace},
                     "spec": record}
        try:
            if lease is None:
                self.api.create_namespaced_lease(self.namespace, body,
                                                 _request_timeout=self.call_timeout)
            else:
                body["metadata"]["resourceVersion"] = lease["metadata"]["resourceVersion"]
                self.api.replace_namespaced_lease(self.name, self.namespace, body,
                                                  _request_timeout=self.call_timeout)
        except ApiException as err:
            if err.status in (409, 422):  # someone else wrote first: not ours this time
                return False
            raise
        return True

    def release(self, attempts: int = 3) -> None:
        """Give the lease up at shutdown so a successor takes over at once, not after
        the lease expires. Run it on `executor`, after any renewal still in flight; a
        renewal that landed between the read and the write anyway (409) is read again,
        up to ATTEMPTS times: a lost release costs the successor the whole lease."""
        if not self.leading:
            return
        for attempt in range(attempts):
            try:
                lease = self._read()
                if lease and lease["spec"].get("holderIdentity") == self.identity:
                    lease["spec"].update({"holderIdentity": "", "leaseDurationSeconds": 1,
                                          "renewTime": times.micros(time.time())})
                    self.api.replace_namespaced_lease(self.name, self.namespace,
                                                      cast(Any, lease))
                    log.info("released leadership of lease %s/%s", self.namespace,
                             self.name)
                break
            except ApiException as err:
                if err.status == 409 and attempt + 1 < attempts:
                    continue
                log.warning("could not release lease %s/%s: %s", self.namespace,
                            self.name, err.reason)
                break
        self.leading = False

    async def run(self, on_started: Callable[[], Awaitable[None]],
                  on_lost: Callable[[], None]) -> None:
        """Campaign until leading, call ON_STARTED, keep renewing; call ON_LOST (and return)
        when the lease could not be renewed within the renew deadline."""
        log.info("campaigning for lease %s/%s as %s", self.namespace, self.name,
                 self.identity)
        loop = asyncio.get_running_loop()
        while True:
            try:
                held = await loop.run_in_executor(self.executor, self.try_hold)
            except Exception as err:  # the API server may be away a while
                log.warning("lease %s/%s: %s", self.namespace, self.name, err)
                held = False
            now = time.monotonic()
            if held:
                self.last_renewed = now
                if not self.leading:
                    self.leading = True
                    log.info("became the leader (lease %s/%s)", self.namespace, self.name)
                    await on_started()
            elif self.leading and now - self.last_renewed > self.renew_deadline:
                self.leading = False
                log.error("lost the lease %s/%s: stopping so that only the new leader acts",
                          self.namespace, self.name)
                on_lost()
                return
            await asyncio.sleep(self.retry_period)
