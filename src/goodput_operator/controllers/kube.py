"""The few Kubernetes calls the controllers make, on the sync client (run in threads).

Creates are idempotent (409 Conflict means it is already there), deletes tolerate 404,
and every call is plain dicts in, plain dicts out.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar, cast
from urllib.parse import urlsplit

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from goodput_operator import metrics
from goodput_operator.api.base import GROUP, MESSAGE_LENGTH, VERSION
from goodput_operator.controllers.shapes import Decode
from goodput_operator.decide import Event, Failure
from goodput_operator.decide.types import OwnerKey, Quota, changed_keys
from goodput_operator.resources import claims, computedomain
from goodput_operator.resources.pods import controller_of

Obj = dict[str, Any]
D = TypeVar("D")  # a controller's decision for one object
T = TypeVar("T")  # what a write returns
log = logging.getLogger("goodput.kube")


def _json(response: Any) -> Obj:
    """The body of a raw (not preloaded) response: the object as the API server wrote it,
    without building the client's models and serializing them back (a third of the
    memory churn of a rollout)."""
    return cast(Obj, json.loads(response.data))


REQUEST_TIMEOUT = (5.0, 30.0)  # seconds to connect, and to wait for each read


def resource_of(url: str) -> str:
    """The resource an API URL names, with its subresource: "pods", "trainingjobs/status",
    "events" (names and namespaces left out, so the metric's labels stay few)."""
    parts = urlsplit(url).path.strip("/").split("/")
    # /api/v1/... or /apis/GROUP/VERSION/...; then namespaces/NS/ when namespaced
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    if not rest:
        return "-"
    return rest[0] if len(rest) < 3 else f"{rest[0]}/{rest[2]}"


def _count_requests(api_client: client.ApiClient) -> None:
    """Count every request this client sends (goodput_api_requests_total{method}): the
    operator's load on the API server, beside kopf's few long-lived watches. Every request
    gets REQUEST_TIMEOUT unless it asks for another: a call that hangs must not hold a
    thread, a pass, or a leader that lost its lease, forever."""
    rest = api_client.rest_client
    send = rest.request

    def counted(method: str, url: str, headers: Any = None, body: Any = None,
                post_params: Any = None, _request_timeout: Any = None) -> Any:
        metrics.API_REQUESTS.labels(method).inc()
        started = time.perf_counter()
        try:
            return send(method, url, headers, body,  # type: ignore[no-untyped-call]
                        post_params, _request_timeout or REQUEST_TIMEOUT)
        finally:
            metrics.API_REQUEST_SECONDS.labels(method, resource_of(url)).observe(
                time.perf_counter() - started)

    rest.request = counted  # type: ignore[method-assign]


class NotLeading(RuntimeError):
    """A write refused because this replica no longer holds the lease (or never did)."""


class Kube:
    """FENCE, when set, is asked before every write of the reconcile and report paths:
    a replica whose lease lapsed must not land queued writes after a successor took over
    (leader.LeaderElection.holds)."""

    fence: Callable[[], bool] | None = None

    def _check_fence(self) -> None:
        if self.fence is not None and not self.fence():
            raise NotLeading("not the leader (the lease lapsed): write dropped")

    def __init__(self, api_client: client.ApiClient | None = None) -> None:
        if api_client is None:
            try:
                config.load_incluster_config()  # type: ignore[no-untyped-call]
            except config.ConfigException:
                config.load_kube_config()  # type: ignore[no-untyped-call]
            settings = client.Configuration.get_default_copy()
            settings.connection_pool_maxsize = API_CONNECTIONS + BULK_WRITES  # one per thread
            api_client = client.ApiClient(settings)
        self.api = api_client
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.authentication = client.AuthenticationV1Api(api_client)
        self.authorization = client.AuthorizationV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.policy = client.PolicyV1Api(api_client)
        _count_requests(api_client)

    def get_json(self, path: str, query: list[tuple[str, Any]] | None = None,
                 decode: Decode = json.loads) -> Obj:
        """GET an API PATH as plain JSON (no model round trip: lists of thousands of pods
        stay cheap), or as DECODE makes it (a shape of controllers.shapes keeps only what
        the operator reads). Raises ApiException on an error status."""
        request = self.api.param_serialize(method="GET", resource_path=path,
                                           query_params=query or [],
                                           header_params={"Accept": "application/json"},
                                           auth_settings=["BearerToken"])
        response = self.api.call_api(*request)
        data = response.read()  # type: ignore[no-untyped-call]
        if not 200 <= response.status < 300:
            raise ApiException(status=response.status, reason=response.reason)
        return decode(data)

    def watch(self, path: str, query: list[tuple[str, Any]], seconds: int,
              decode: Decode = json.loads) -> Iterator[Obj]:
        """The events of a watch on PATH from the query's resourceVersion, for at most
        SECONDS (the server ends the request then), each as a plain JSON dict (or as DECODE
        makes it). Raises ApiException on an error status."""
        request = self.api.param_serialize(
            method="GET", resource_path=path,
            query_params=[*query, ("watch", "true"), ("timeoutSeconds", seconds)],
            header_params={"Accept": "application/json"}, auth_settings=["BearerToken"])
        response = self.api.call_api(*request, _request_timeout=(5.0, seconds + 30.0))
        try:
            if not 200 <= response.status < 300:
                raise ApiException(status=response.status, reason=response.reason)
            for line in iter_resp_lines(response.response):  # type: ignore[no-untyped-call]
                if line:
                    yield decode(line)
        finally:
            response.response.release_conn()

    def create(self, obj: Obj) -> Obj | None:
        """Create OBJ (Pod, Service, PodDisruptionBudget, ConfigMap, Job, ComputeDomain,
        ResourceClaimTemplate, Kueue Workload, a multi-region endpoint's replica):
        the stored object, or None if it existed."""
        self._check_fence()
        kind, namespace = obj["kind"], obj["metadata"]["namespace"]
        group, _, version = obj["apiVersion"].rpartition("/")
        creators: dict[str, Callable[..., Any]] = {
            "Pod": self.core.create_namespaced_pod,
            "Service": self.core.create_namespaced_service,
            "ConfigMap": self.core.create_namespaced_config_map,
            "PodDisruptionBudget": self.policy.create_namespaced_pod_disruption_budget,
            "Job": self.batch.create_namespaced_job,
            computedomain.KIND: lambda ns, body: self.custom.create_namespaced_custom_object(
                group, version, ns, computedomain.PLURAL, body),
            claims.KIND: lambda ns, body: self.custom.create_namespaced_custom_object(
                group, version, ns, "resourceclaimtemplates", body),
            "Workload": lambda ns, body: self.custom.create_namespaced_custom_object(
                group, version, ns, "workloads", body),
            "InferenceEndpoint": lambda ns, body: self.custom.create_namespaced_custom_object(
                group, version, ns, "inferenceendpoints", body)}
        create = creators[kind]
        try:
            if kind == "Pod":  # the hot path: thousands per rollout, no model round trip
                return _json(create(namespace, obj, _preload_content=False))
            created = create(namespace, obj)
        except ApiException as err:
            if err.status == 409:
                self._check_holder(obj)
                return None
            raise
        return cast(Obj, self.api.sanitize_for_serialization(created))  # type: ignore[no-untyped-call]

    def _read(self, obj: Obj) -> Obj | None:
        """The stored object of OBJ's kind, namespace and name (None when there is none):
        by a get for Services, disruption budgets and ConfigMaps, by a list of that one
        name for the kinds the operator lists anyway; None for the kinds it may only
        create."""
        kind, meta = obj["kind"], obj["metadata"]
        name, namespace = meta["name"], meta["namespace"]
        group, _, version = obj["apiVersion"].rpartition("/")
        listed = {"Pod": f"/api/v1/namespaces/{namespace}/pods",
                  "Workload": f"/apis/{group}/{version}/namespaces/{namespace}/workloads",
                  "InferenceEndpoint":
                      f"/apis/{group}/{version}/namespaces/{namespace}/inferenceendpoints"}
        try:
            if kind == "Service":
                return cast(Obj, self.api.sanitize_for_serialization(  # type: ignore[no-untyped-call]
                    self.core.read_namespaced_service(name, namespace)))
            if kind == "ConfigMap":
                return cast(Obj, self.api.sanitize_for_serialization(  # type: ignore[no-untyped-call]
                    self.core.read_namespaced_config_map(name, namespace)))
            if kind == "PodDisruptionBudget":
                return cast(Obj, self.api.sanitize_for_serialization(  # type: ignore[no-untyped-call]
                    self.policy.read_namespaced_pod_disruption_budget(name, namespace)))
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        if kind not in listed:
            return None
        items = self.get_json(listed[kind], [("fieldSelector", f"metadata.name={name}")])
        found = items.get("items") or []
        return cast(Obj, found[0]) if found else None

    def _check_holder(self, obj: Obj) -> None:
        """OBJ's name is taken: fine when the holder is OBJ's owner's too (made in an
        earlier pass); NameTaken when someone else holds it (TENANCY.md rule 3: a name is
        never taken as ours)."""
        mine = controller_uid(obj)
        held = self._read(obj) if mine is not None else None
        if held is None or controller_uid(held) == mine:
            return
        owner = controller_of(held)
        by = f"{owner.get('kind')} {owner.get('name')}" if owner else "no controller"
        raise NameTaken(f"{obj['kind']} {obj['metadata']['name']} already exists and belongs "
                        f"to {by}, not to {obj['metadata']['ownerReferences'][0].get('kind')} "
                        f"{obj['metadata']['ownerReferences'][0].get('name')}: rename one")

    def replace_config_map(self, obj: Obj) -> None:
        self._check_fence()
        meta = obj["metadata"]
        if controller_uid(obj) is not None:
            self._check_holder(obj)  # never rewrite a ConfigMap of someone else's
        try:
            self.core.patch_namespaced_config_map(
                meta["name"], meta["namespace"], {"data": obj["data"]},
                _content_type="application/merge-patch+json")
        except ApiException as err:
            if err.status != 404:
                raise
            self.create(obj)

    def delete_pod(self, namespace: str, name: str) -> None:
        self._check_fence()
        try:
            self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        except ApiException as err:
            if err.status != 404:
                raise

    def patch_pod(self, namespace: str, name: str, patch: Obj) -> Obj:
        """JSON merge patch: lists in PATCH (gates, node selector terms) are replaced whole."""
        self._check_fence()
        return _json(self.core.patch_namespaced_pod(
            name, namespace, patch, _content_type="application/merge-patch+json",
            _preload_content=False))

    def label_own_pod(self, namespace: str, name: str, labels: dict[str, str | None]) -> None:
        """Label this replica's own pod (the leader label the report Service selects):
        not fenced, a standby must be able to say it does not lead."""
        self.core.patch_namespaced_pod(name, namespace, {"metadata": {"labels": labels}},
                                       _content_type="application/merge-patch+json")

    def review_token(self, token: str, audiences: list[str]) -> Obj:
        """A TokenReview's status: authenticated, user (username, extra), error."""
        body: Any = {"spec": {"token": token, "audiences": audiences}}
        review = self.authentication.create_token_review(body)
        return cast(Obj, self.api.sanitize_for_serialization(review.status) or {})  # type: ignore[no-untyped-call]

    def review_access(self, user: Obj, path: str, verb: str) -> bool:
        """Whether USER (a TokenReview's: username, uid, groups) may VERB the non-resource
        URL PATH: a SubjectAccessReview, answered by the cluster's authorizers (RBAC)."""
        body: Any = {"spec": {"user": user.get("username"), "uid": user.get("uid"),
                              "groups": user.get("groups") or [],
                              "nonResourceAttributes": {"path": path, "verb": verb}}}
        review = self.authorization.create_subject_access_review(body)
        return bool(review.status and review.status.allowed)

    def patch_node(self, name: str, patch: Obj) -> Obj:
        """JSON merge patch of a Node (taints are replaced whole; a resourceVersion in the
        patch makes a concurrent change fail with 409 instead of being overwritten)."""
        self._check_fence()
        patched = self.core.patch_node(name, patch,
                                       _content_type="application/merge-patch+json")
        return cast(Obj, self.api.sanitize_for_serialization(patched))  # type: ignore[no-untyped-call]

    def patch_status(self, plural: str, namespace: str | None, name: str,
                     status: Mapping[str, Any]) -> str:
        """Merge STATUS into the object's status; the resourceVersion the write made."""
        self._check_fence()
        body = {"status": status}
        if namespace is None:
            patched = self.custom.patch_cluster_custom_object_status(GROUP, VERSION, plural,
                                                                     name, body)
        else:
            patched = self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, plural, name, body)
        return str((cast(Obj, patched or {}).get("metadata") or {}).get("resourceVersion") or "")

    def patch_workload_status(self, workload: Obj, status: Obj) -> None:
        """Merge STATUS into a Kueue Workload's status, only if it is still the version
        read (WORKLOAD's resourceVersion): Kueue writes there too; a conflict (409) is for
        the next pass, which reads the newer one."""
        self._check_fence()
        meta = workload["metadata"]
        group, _, version = workload.get("apiVersion", "kueue.x-k8s.io/v1beta2").rpartition("/")
        self.custom.patch_namespaced_custom_object_status(
            group, version, meta["namespace"], "workloads", meta["name"],
            {"metadata": {"resourceVersion": meta.get("resourceVersion")}, "status": status})

    def delete_workload(self, workload: Obj) -> None:
        """Delete a Workload of ours, only the one read (its uid): a newer one of the same
        name is left alone."""
        self._check_fence()
        meta = workload["metadata"]
        group, _, version = workload.get("apiVersion", "kueue.x-k8s.io/v1beta2").rpartition("/")
        try:
            self.custom.delete_namespaced_custom_object(
                group, version, meta["namespace"], "workloads", meta["name"],
                body=client.V1DeleteOptions(
                    preconditions=client.V1Preconditions(uid=meta.get("uid"))))
        except ApiException as err:
            if err.status not in (404, 409):
                raise

    def delete_custom(self, plural: str, namespace: str, name: str) -> None:
        self._check_fence()
        try:
            self.custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
        except ApiException as err:
            if err.status != 404:
                raise

    def event(self, obj: Obj, reason: str, message: str, type_: str = "Normal") -> None:
        """A core/v1 Event on OBJ, as `kubectl describe` shows them."""
        meta = obj["metadata"]
        stamp = datetime.now(UTC)
        namespace = meta.get("namespace") or "default"
        body: Obj = {
            "metadata": {"generateName": f"{meta['name']}.", "namespace": namespace},
            "involvedObject": {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
                               "name": meta["name"], "namespace": meta.get("namespace"),
                               "uid": meta.get("uid")},
            "reason": reason, "message": message[:MESSAGE_LENGTH], "type": type_,
            "source": {"component": "goodput-operator"},
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
            "reportingComponent": "goodput-operator", "reportingInstance": "goodput-operator",
        }
        try:
            # the client takes plain dicts for bodies (its hints say models)
            self.core.create_namespaced_event(namespace, cast(Any, body))
        except ApiException as err:  # events are best effort
            log.warning("could not post event %s on %s: %s", reason, meta["name"], err.reason)


class NameTaken(ApiException):
    """A child's name is held by an object its owner does not control: a refusal."""

    def __init__(self, message: str) -> None:
        super().__init__(status=409, reason="NameTaken")
        self.body = json.dumps({"message": message})


def controller_uid(obj: Obj) -> str | None:
    """The UID of OBJ's controller (resources.pods.controller_of)."""
    ref = controller_of(obj)
    return None if ref is None else str(ref.get("uid"))


def api_message(err: ApiException) -> str:
    """The API server's own message (its Status body), else the HTTP status and reason."""
    try:
        message = json.loads(err.body or "{}").get("message")
    except (ValueError, AttributeError):
        message = None
    return str(message or f"{err.status} {err.reason}")[:MESSAGE_LENGTH]


def refusal(err: ApiException) -> str | None:
    """The API server's message when it refused a request for good: a 4xx other than a
    conflict or throttling (an invalid object, a PodSecurity or webhook denial, a missing
    namespace). None for what may pass by retrying."""
    if isinstance(err, NameTaken):
        return api_message(err)
    if err.status is None or not 400 <= err.status < 500 or err.status in (409, 429):
        return None
    return api_message(err)


async def unless_refused(write: Awaitable[T], body: Obj, refused: list[str]) -> T | None:
    """WRITE's result, or None when the API server refused BODY for good (its words added
    to REFUSED, for the object's condition): such a refusal comes back every time, and must
    not fail the pass of the object, nor of every object applied beside it."""
    try:
        return await write
    except ApiException as err:
        words = refusal(err)
        if words is None:
            raise
        refused.append(f"{body['kind']} {body['metadata']['name']}: {words}")
        return None


APPLY_CONCURRENCY = 16  # objects whose decisions are applied at once (API-bound)
API_CONNECTIONS = 32  # the executor's threads for API calls
BULK_WRITES = 16  # the endpoints' pod writes in flight at once, on threads of their own


def _failed(kind: str, obj: Obj, error: BaseException | None = None) -> None:
    metrics.RECONCILE_ERRORS.labels(kind).inc()
    meta = obj["metadata"]
    log.error("reconcile of %s %s/%s failed", kind, meta.get("namespace"), meta["name"],
              exc_info=error or True)


def log_failures(failures: Iterable[Failure]) -> None:
    """Objects whose decision raised: logged with the traceback and counted."""
    for failure in failures:
        _failed(failure.kind, failure.obj, failure.error)


class Gone(Exception):
    """The object was deleted since the pass read it (its status write found nothing)."""


def wrote(obj: Obj, version: str) -> None:
    """OBJ as held in the state now carries VERSION, the resourceVersion our write made: a
    watch event older than it (already on its way) is then ignored instead of undoing
    the write in the cache until the write's own event arrives."""
    if version:
        obj.setdefault("metadata", {})["resourceVersion"] = version


async def patch_status(kube: Kube, plural: str, namespace: str | None, name: str,
                       body: Mapping[str, Any]) -> str:
    """Kube.patch_status in a thread; Gone when the object no longer exists: a deletion
    its watch never delivered (one between the initial list and the watch's start) must
    not leave it in the state, failing every pass and holding its nodes, for ever."""
    try:
        return await asyncio.to_thread(kube.patch_status, plural, namespace, name, body)
    except ApiException as err:
        if err.status == 404:
            raise Gone(f"{plural} {namespace or ''}/{name}".replace(" /", " ")) from err
        raise


async def apply_each(kind: str, decisions: Iterable[D], apply: Callable[[D], Awaitable[None]],
                     object_of: Callable[[D], Obj],
                     forget: Callable[[D], None] | None = None) -> None:
    """Apply the decisions of a pass APPLY_CONCURRENCY at a time: a pass costs the slowest
    objects' round trips, not the sum of all. One object's failure is logged and counted;
    the others go on. An object found Gone is FORGOTTEN."""
    limit = asyncio.Semaphore(APPLY_CONCURRENCY)

    async def one(decision: D) -> None:
        async with limit:
            started = time.perf_counter()
            try:
                await apply(decision)
            except asyncio.CancelledError:
                raise
            except Gone as gone:
                log.info("%s is gone: forgotten", gone)
                if forget is not None:
                    forget(decision)
            except Exception:
                _failed(kind, object_of(decision))
            finally:
                metrics.RECONCILE_OBJECT_SECONDS.labels(kind).observe(
                    time.perf_counter() - started)

    await asyncio.gather(*(one(decision) for decision in decisions))


async def apply_quota(kube: Kube, quota: Quota | None,
                      noted: Callable[[OwnerKey, str, str | None, float], None]) -> None:
    """Under Kueue: create the object's Workload, or write what its status must say (quota
    given back after an eviction, finished). What becomes of a create is NOTED
    (State.note_workload): a refusal for good is said on the owner, and tried again after
    a backoff; anything else waits for the next pass, which reads the Workload anew."""
    if quota is None:
        return
    if quota.create is not None:
        owner = quota.owner
        try:
            await asyncio.to_thread(kube.create, quota.create)
        except ApiException as err:
            log.warning("Workload %s/%s refused: %s", quota.create["metadata"]["namespace"],
                        quota.workload, api_message(err))
            if (words := refusal(err)) is not None and owner is not None:
                noted(owner, quota.workload, words, time.time())
        else:
            if owner is not None:
                noted(owner, quota.workload, None, time.time())
    if quota.remove is not None:
        try:
            await asyncio.to_thread(kube.delete_workload, quota.remove)
        except ApiException as err:
            log.warning("Workload %s/%s not deleted: %s %s",
                        quota.remove["metadata"]["namespace"], quota.workload, err.status,
                        err.reason)
    if quota.patch is not None and quota.target is not None:
        try:
            await asyncio.to_thread(kube.patch_workload_status, quota.target, quota.patch)
        except ApiException as err:
            log.warning("Workload %s/%s: %s %s", quota.target["metadata"]["namespace"],
                        quota.workload, err.status, err.reason)


async def write_status(kube: Kube, plural: str, obj: Obj, current: Obj,
                       desired: Mapping[str, Any],
                       events: Iterable[Event] = ()) -> set[str]:
    """One status write when anything in DESIRED differs from CURRENT, then the events
    (never before), posted together; the keys that differed. The write lands on the live
    status held for OBJ: other writers (the report handlers) may have changed other keys
    meanwhile; None removes a key."""
    changed = changed_keys(current, desired)
    if changed:
        meta = obj["metadata"]
        written = await patch_status(kube, plural, meta.get("namespace"), meta["name"], desired)
        merged = {**(obj.get("status") or {}), **desired}
        obj["status"] = {k: v for k, v in merged.items() if v is not None}
        wrote(obj, written)
    # all at once: an endpoint placing 18 groups posts 18 events, and one after another
    # they were most of its reconcile time under load (kubectl orders events by time,
    # to the second, so their order was never kept anyway)
    await asyncio.gather(*(asyncio.to_thread(kube.event, obj, reason, message, type_)
                           for type_, reason, message in events))
    return changed
