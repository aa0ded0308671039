"""The fleet as the placement engine sees it: network levels -> domains -> nodes (in slot
order) -> accelerators, with usage from bound pods and each node's state.

Built from plain Node and Pod dicts plus the group's shape, then kept current
incrementally (node added/changed/removed, pod bound/finished): a placement never rebuilds
the world. Pure: no Kubernetes client.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Literal

from goodput_operator import names
from goodput_operator.api.base import NODE_NAME_FIELD
from goodput_operator.api.ultraservergroup import LEMON_HALF_LIFE_DAYS
from goodput_operator.health.notices import notice_key
from goodput_operator.health.quarantine import decayed, lemon_of

if TYPE_CHECKING:
    from goodput_operator.api.ultraservergroup import UltraServerGroupSpec
    from goodput_operator.topology.placement import RankSlot

NodeState = Literal["ready", "notready", "cordoned", "quarantined", "misshaped"]
_DIGITS = re.compile(r"(\d+)")


@dataclass(frozen=True)
class GroupShape:
    """What the placement engine needs from an UltraServerGroup spec."""

    domain_label: str
    nodes_per_domain: int
    accelerators_per_node: int
    accelerator_resource: str = "aws.amazon.com/neuron"
    network_levels: tuple[str, ...] = ()
    slot_label: str | None = None  # None: slots by natural node-name order
    spares_per_domain: int = 0
    spares_per_group: int = 0  # held at the end of the fabric (Fleet._designate)
    domain_noun: str = "domain"  # "UltraServer", "NVLink domain": used in explanations
    lemon_half_life_days: float = LEMON_HALF_LIFE_DAYS  # incident scores halve this often
    # a domain runs whole (a TPU slice): gangs are whole domains, one worker per node
    whole_domains: bool = False

    @property
    def claims(self) -> bool:
        """Pods claim their devices by DRA: capacity is the declared per-node count."""
        return self.device_class is not None
    device_class: str | None = None  # pods claim devices of this DRA class (None: requests)

    @classmethod
    def from_spec(cls, spec: UltraServerGroupSpec) -> GroupShape:
        """From an UltraServerGroupSpec (pydantic model)."""
        return cls(
            domain_label=spec.domain_key, nodes_per_domain=spec.nodes_per_domain,
            accelerators_per_node=spec.accelerator.per_node,
            accelerator_resource=spec.accelerator.resource,
            network_levels=tuple(spec.network_levels),
            slot_label=spec.slot_order.label if spec.slot_order.by == "label" else None,
            spares_per_domain=spec.spares.per_domain,
            spares_per_group=spec.spares.per_group, domain_noun=spec.traits.noun,
            lemon_half_life_days=spec.quarantine.lemon_half_life_days,
            device_class=spec.accelerator.device_class,
            whole_domains=spec.traits.whole_domains,
        )


PodUse = tuple[str, int, str]
"""A pod's hold on a node's accelerators: (node, accelerators, owner), the owner being
"kind/namespace/name" of the workload, for explanations. A plain tuple on purpose: there
are a quarter-million at 1M accelerators, and the cyclic garbage collector stops tracking
an exact tuple of strings and ints (and then the node's dict of them), where a NamedTuple
stays tracked. Tracked, they made every full collection walk them: 228 ms against 8 ms on
a full 1M NVL72 fleet, landing inside a solve now and then (bench/HISTORY.md, issue 19)."""


@dataclass(eq=False)
class Node:
    name: str
    domain: str
    capacity: int
    state: NodeState = "ready"
    used: int = 0
    spare: bool = False
    slot: int = 0
    lemon: float = 0.0  # incident score, decayed to the fleet's clock (Fleet.set_clock)
    lemon_raised: tuple[float, float | None] = (0.0, None)  # the score as raised, and when
    sort_key: tuple[Any, ...] = ()
    pods: dict[str, PodUse] = field(default_factory=dict)

    @property
    def healthy(self) -> bool:
        return self.state == "ready"

    @property
    def usable(self) -> bool:
        """Takes new placements: healthy and not held back as a spare."""
        return self.healthy and not self.spare

    @property
    def free(self) -> int:
        return max(self.capacity - self.used, 0) if self.healthy else 0


@dataclass(eq=False)
class Domain:
    id: str
    path: tuple[str, ...]  # network level values, outermost first
    order: tuple[Any, ...] = ()  # fabric order of domains: path, then id (set_path)
    nodes: list[Node] = field(default_factory=list)  # in slot order
    # Derived values, recomputed lazily after the domain changes: what makes a solve cost
    # O(domains) instead of O(nodes) when most domains did not change since the last one.
    capacity_cache: dict[int, int] = field(default_factory=dict)  # accelerators -> workers
    # accelerators -> (node, workers) for each node with room, in slot order: a gang that
    # fills the domain takes exactly these (most domains of the largest gangs)
    fill_cache: dict[int, list[tuple[Node, int]]] = field(default_factory=dict)
    pristine_cache: bool | None = None
    unhealthy_cache: list[str] | None = None
    # (an eligible set of node names, whether it holds every node here): a pass's pods of
    # one template share one set (decide.fit memo), so the answer is asked once a domain
    eligible_cache: tuple[frozenset[str], bool] | None = None
    lemon: float = 0.0  # its nodes' incident scores: placement prefers clean domains
    # path[:depth] for each depth, made once: placement groups every domain by them per solve
    prefixes: tuple[tuple[str, ...], ...] = ()

    def __post_init__(self) -> None:
        self.set_path(self.path)

    def set_path(self, path: tuple[str, ...]) -> None:
        self.path = path
        self.order = (path, natural_key(self.id))
        self.prefixes = tuple(path[:depth] for depth in range(len(path) + 1))

    def changed(self) -> None:
        self.capacity_cache.clear()
        self.fill_cache.clear()
        self.pristine_cache = None
        self.unhealthy_cache = None
        self.eligible_cache = None

    def sum_lemons(self) -> None:
        self.lemon = sum(n.lemon for n in self.nodes)

    def owners(self) -> set[str]:
        return {owner for node in self.nodes for _, _, owner in node.pods.values()}


def natural_key(name: str) -> tuple[Any, ...]:
    """trn2-01-10 after trn2-01-9: digits compare as numbers."""
    return tuple(int(part) if part.isdigit() else part for part in _DIGITS.split(name))


def node_state(node: Mapping[str, Any]) -> NodeState:
    spec = node.get("spec", {})
    taints = spec.get("taints") or []
    if any(t.get("key") == names.QUARANTINE_TAINT for t in taints):
        return "quarantined"
    if notice_key(node) is not None:  # cordoned, or about to go (health.notices)
        return "cordoned"
    conditions = node.get("status", {}).get("conditions") or []
    ready = next((c for c in conditions if c.get("type") == "Ready"), None)
    if ready is None or ready.get("status") != "True":
        return "notready"
    return "ready"


class QuantityError(ValueError):
    """A resource quantity that is not a whole number of devices."""


_SUFFIXES = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
             "E": 10**18, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50,
             "Ei": 2**60}
_QUANTITY = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(m|Ki|Mi|Gi|Ti|Pi|Ei"
                       r"|k|M|G|T|P|E)?)$")


MAX_QUANTITY_CHARS = 64  # longer is no quantity a node or a pod could mean
MAX_EXPONENT = 24  # 1e24 devices: far past any fleet; 1e10000000 costs seconds to expand


def _quantity_text(quantity: Any) -> str:
    """QUANTITY (a JSON string or number) as text, cut past MAX_QUANTITY_CHARS."""
    if isinstance(quantity, int) and not isinstance(quantity, bool) and \
            quantity.bit_length() > 4 * MAX_QUANTITY_CHARS:
        return "9" * (MAX_QUANTITY_CHARS + 1)  # too long: said so without printing it
    if isinstance(quantity, str | int | float):
        return str(quantity)[:MAX_QUANTITY_CHARS + 1]
    raise QuantityError(f"a {type(quantity).__name__} is not a Kubernetes quantity")


def parse_quantity(quantity: Any) -> Fraction:
    """A Kubernetes resource.Quantity, exactly: "16", 16, "1k" (the API server stores 1000
    devices so), "2Ki", "1e3", "1.5k", "500m". Free text from a tenant, so bounded before
    it is expanded (TENANCY.md rule 5): at most MAX_QUANTITY_CHARS characters and an
    exponent of at most MAX_EXPONENT; anything else is a QuantityError, never a cost."""
    text = _quantity_text(quantity).strip()
    if len(text) > MAX_QUANTITY_CHARS:
        raise QuantityError(f"{text[:16]!r}... is longer than {MAX_QUANTITY_CHARS} characters")
    match = _QUANTITY.match(text)
    if match is None:
        raise QuantityError(f"{text!r} is not a Kubernetes quantity")
    number, exponent, suffix = match.groups()
    if exponent and abs(int(exponent[1:])) > MAX_EXPONENT:
        raise QuantityError(f"{text!r}: an exponent beyond {MAX_EXPONENT}")
    value = Fraction(number)
    if exponent:
        value *= Fraction(10) ** int(exponent[1:])
    elif suffix == "m":
        value /= 1000
    else:
        value *= _SUFFIXES[suffix or ""]
    return value


def parse_count(quantity: Any) -> int:
    """A whole number of devices from an extended-resource quantity ("16", "1k" = 1000);
    QuantityError for anything else ("500m", "abc", a negative count)."""
    text = _quantity_text(quantity).strip()
    if text.isascii() and text.isdigit() and len(text) <= MAX_QUANTITY_CHARS:
        return int(text)  # "16": most counts, without the exact parse
    value = parse_quantity(quantity)
    if value.denominator != 1 or value < 0:
        raise QuantityError(f"{quantity!r} is not a whole number of devices")
    return int(value)


def pod_accelerators(pod: Mapping[str, Any], resource: str, claimed_cap: int = 0) -> int:
    """The accelerators POD holds: its requests of RESOURCE, or with CLAIMED_CAP (the group
    claims devices by DRA) the count its accelerator claim asks for, as the operator
    wrote it on the pod (names.ACCELERATORS_ANNOTATION), at most CLAIMED_CAP (a node's):
    a pod's annotation can never book more than its own node."""
    total = 0
    for container in pod.get("spec", {}).get("containers") or []:
        requests = (container.get("resources") or {}).get("requests") or {}
        limits = (container.get("resources") or {}).get("limits") or {}
        if resource in requests or resource in limits:
            total += parse_count(requests.get(resource, limits.get(resource)))
    if claimed_cap and not total:
        said = ((pod.get("metadata") or {}).get("annotations") or {}).get(
            names.ACCELERATORS_ANNOTATION)
        if said is not None:
            total = min(parse_count(said), claimed_cap)
    return total


IMEX_DRIVER = "compute-domain.nvidia.com"  # channels, not accelerators
KNOWN_DRIVERS = ("neuron.aws.com", "gpu.nvidia.com")  # their DeviceClass has their name


@dataclass(frozen=True)
class ClaimUse:
    """What an allocated DRA ResourceClaim holds: on which node, how many devices of each
    driver, for which pods (namespace/name)."""

    node: str | None
    devices: tuple[tuple[str, int], ...]
    pods: tuple[str, ...]
    pod_claim: str = ""  # the pod's name for it, when made from a pod's claim template

    def count(self, device_class: str | None) -> int:
        """The devices of a group claiming DEVICE_CLASS: that driver's, when the class is
        a driver's own; else every device but IMEX channels."""
        if device_class in KNOWN_DRIVERS:
            return sum(n for driver, n in self.devices if driver == device_class)
        return sum(n for driver, n in self.devices if driver != IMEX_DRIVER)


POD_CLAIM_NAME = "resource.kubernetes.io/pod-claim-name"  # the claim controller writes it


def claim_use(claim: Mapping[str, Any]) -> ClaimUse:
    """An allocated claim's node, devices and pods (nothing while unallocated)."""
    status = claim.get("status") or {}
    allocation = status.get("allocation") or {}
    node = None
    for term in (allocation.get("nodeSelector") or {}).get("nodeSelectorTerms") or []:
        for field_ in term.get("matchFields") or []:
            if field_.get("key") == NODE_NAME_FIELD and field_.get("values"):
                node = str(field_["values"][0])
    drivers: dict[str, int] = {}
    for result in (allocation.get("devices") or {}).get("results") or []:
        driver = str(result.get("driver", ""))
        drivers[driver] = drivers.get(driver, 0) + 1
    namespace = (claim.get("metadata") or {}).get("namespace", "default")
    pods = tuple(f"{namespace}/{r.get('name', '')}" for r in status.get("reservedFor") or []
                 if r.get("resource") == "pods")
    made_for = ((claim.get("metadata") or {}).get("annotations") or {}).get(POD_CLAIM_NAME, "")
    return ClaimUse(node if drivers else None, tuple(sorted(drivers.items())), pods,
                    str(made_for))


def trainingjob_owner(namespace: str, name: str) -> str:
    """How a TrainingJob is named as the owner of usage in the fleet (and in explanations)."""
    return f"tj/{namespace}/{name}"


def endpoint_owner(namespace: str, name: str) -> str:
    """How an InferenceEndpoint is named as the owner of usage in the fleet."""
    return f"ie/{namespace}/{name}"


def is_foreign(owner: str) -> bool:
    """Usage the operator did not place: a pod of a user's own (plain, a Job's, a
    DaemonSet's), not a TrainingJob's or InferenceEndpoint's (nor a scratch trial's)."""
    return not owner.startswith(("tj/", "ie/", "scratch/"))


def pod_owner(pod: Mapping[str, Any]) -> str:
    meta = pod.get("metadata", {})
    labels = meta.get("labels") or {}
    namespace = meta.get("namespace", "default")
    if names.JOB_LABEL in labels:
        return trainingjob_owner(namespace, labels[names.JOB_LABEL])
    if names.ENDPOINT_LABEL in labels:
        return endpoint_owner(namespace, labels[names.ENDPOINT_LABEL])
    refs = meta.get("ownerReferences") or []
    if refs:
        return f"{refs[0].get('kind', '').lower()}/{namespace}/{refs[0].get('name', '')}"
    return f"pod/{namespace}/{meta.get('name', '')}"


class Fleet:
    """The group's nodes by domain, kept current by upsert/remove/bind/release."""

    def __init__(self, shape: GroupShape) -> None:
        self.shape = shape
        self.nodes: dict[str, Node] = {}
        self.domains: dict[str, Domain] = {}
        self.pods: dict[str, PodUse] = {}
        self.by_owner: dict[str, set[str]] = {}  # owner -> pod keys
        self._ordered: list[Domain] | None = None
        self._most: dict[int, tuple[int, int]] = {}  # most_workers, by accelerators
        self._journal: dict[str, PodUse | None] | None = None  # inside trial(): undo log
        self._tail: list[tuple[tuple[Any, ...], str]] = []  # the group's spares, by key
        self._designated: set[str] = set()  # their names
        self.clock = 0.0  # what incident scores are decayed to (set_clock)
        self._lemons: set[str] = set()  # nodes with an incident score
        self._loading = False  # inside from_objects: spares designated after the last node

    def set_clock(self, now: float) -> None:
        """Decay the nodes' incident scores to NOW (an hour at a time: they halve in
        days), so that placement, spares and replacement read them as of the pass."""
        if now - self.clock < 3600:
            return
        self.clock = now
        touched = set()
        for name in self._lemons:  # only nodes with a score change, and their domains
            node = self.nodes.get(name)
            if node is not None:
                self._decay(node)
                touched.add(node.domain)
        for domain_id in touched:
            self.domains[domain_id].sum_lemons()

    def _decay(self, node: Node) -> None:
        node.lemon = decayed(*node.lemon_raised, self.clock, self.shape.lemon_half_life_days)

    @classmethod
    def from_objects(cls, shape: GroupShape, nodes: Iterable[Mapping[str, Any]],
                     pods: Iterable[Mapping[str, Any]] = ()) -> Fleet:
        fleet = cls(shape)
        fleet._loading = True  # the group's spares are chosen once, at the end
        for node in nodes:
            fleet.upsert_node(node, refresh=False)
        fleet._loading = False
        if shape.spares_per_group:
            fleet._designate()
        for domain in fleet.domains.values():
            fleet._refresh_domain(domain)
        for pod in pods:
            fleet.observe_pod(pod)
        return fleet

    # ---- nodes ---------------------------------------------------------------
    def upsert_node(self, node: Mapping[str, Any], refresh: bool = True) -> None:
        meta = node.get("metadata", {})
        labels = meta.get("labels") or {}
        name = meta["name"]
        domain_id = labels.get(self.shape.domain_label)
        if domain_id is None:  # not (or no longer) part of a domain
            self.remove_node(name)
            return
        allocatable = (node.get("status", {}).get("allocatable") or {})
        try:
            capacity = (self.shape.accelerators_per_node if self.shape.claims else
                        parse_count(allocatable.get(self.shape.accelerator_resource, 0)))
        except QuantityError:  # unusable, and the group's MisShaped condition says so
            capacity = 0
        state = node_state(node)
        if state == "ready" and capacity < self.shape.accelerators_per_node:
            state = "misshaped"
        path = tuple(labels.get(level, "") for level in self.shape.network_levels)
        existing = self.nodes.get(name)
        moved = False  # a change of the node's place in the fabric order
        if existing is not None and existing.domain != domain_id:
            self._detach(existing)  # relabelled: it moves, its pods still hold its devices
            existing.domain = domain_id
            moved = True
        domain = self.domains.get(domain_id)
        if domain is None:
            domain = Domain(domain_id, path)
            self.domains[domain_id] = domain
            self._ordered = None
        elif domain.path != path:
            domain.set_path(path)
            self._ordered = None
            moved = True
        sort_key = (int(labels.get(self.shape.slot_label, 1 << 30)),) if self.shape.slot_label \
            else natural_key(name)
        moved = moved or (existing is not None and existing.sort_key != sort_key)
        raised = lemon_of(meta.get("annotations") or {})
        if existing is None or moved or existing.capacity != capacity:
            self._most.clear()  # not on a heartbeat: most_workers counts every node
        if existing is None:
            existing = Node(name, domain_id, capacity, state, sort_key=sort_key)
            self.nodes[name] = existing
        else:
            existing.capacity, existing.state, existing.sort_key = capacity, state, sort_key
        existing.lemon_raised = raised
        self._decay(existing)
        if raised[0] > 0:
            self._lemons.add(name)
        else:
            self._lemons.discard(name)
        added = existing not in domain.nodes
        if added:
            domain.nodes.append(existing)
        if self.shape.spares_per_group and not self._loading:
            if moved:
                self._designate()
            elif added:
                self._consider_spare(existing)
        if refresh:
            self._refresh_domain(domain)

    def remove_node(self, name: str) -> None:
        self._most.clear()
        node = self.nodes.pop(name, None)
        if node is None:
            return
        for key in list(node.pods):
            self._forget(key)
        self._lemons.discard(name)
        self._detach(node)
        if name in self._designated:
            self._designate()

    # ---- the group's spares (spares.perGroup) --------------------------------------
    def _spare_key(self, node: Node) -> tuple[Any, ...]:
        return (self.domains[node.domain].order, node.sort_key, node.name)

    def _designate(self) -> None:
        """The group's spares: its last spares_per_group nodes in fabric order, whatever
        their state (a spare that fails or takes a replacement is simply not spare while
        it is). A multiple of the domain size holds whole domains at the end of the fabric
        back, so gangs that need whole domains keep the others whole."""
        wanted = self.shape.spares_per_group
        keyed = sorted((self._spare_key(n), n.name) for n in self.nodes.values())
        self._set_tail(keyed[len(keyed) - wanted:] if wanted else [])

    @property
    def group_spares(self) -> frozenset[str]:
        """The nodes held for the whole group (spares.perGroup), whether free right now
        or not (a spare running a replacement is not `spare` until it is free again)."""
        return frozenset(self._designated)

    def _consider_spare(self, node: Node) -> None:
        """A node joined: it becomes a spare if it sorts among the last spares_per_group
        (O(spares), not a sort of the fleet: nodes join one by one at start-up)."""
        key = (self._spare_key(node), node.name)
        if len(self._tail) < self.shape.spares_per_group:
            self._set_tail(sorted([*self._tail, key]))
        elif self._tail and key > self._tail[0]:
            self._set_tail(sorted([*self._tail[1:], key]))

    def _set_tail(self, tail: list[tuple[tuple[Any, ...], str]]) -> None:
        before = self._designated
        self._tail, self._designated = tail, {name for _, name in tail}
        for name in before ^ self._designated:  # their domains' spares change
            if name in self.nodes:
                self._refresh_domain(self.domains[self.nodes[name].domain])

    def _detach(self, node: Node) -> None:
        domain = self.domains[node.domain]
        domain.nodes.remove(node)
        if not domain.nodes:
            del self.domains[domain.id]
            self._ordered = None
        else:
            self._refresh_domain(domain)

    def _refresh_domain(self, domain: Domain) -> None:
        """Slot order, then spares: the healthy, empty nodes most often quarantined before,
        then the highest slots of the domain."""
        domain.changed()
        domain.sum_lemons()
        domain.nodes.sort(key=lambda n: n.sort_key)
        for slot, node in enumerate(domain.nodes):
            node.slot = slot
        wanted = self.shape.spares_per_domain
        designated = self._designated if self.shape.spares_per_group else set()
        # repeat offenders are held back first (they run jobs last), then the highest slots
        for node in sorted(reversed(domain.nodes), key=lambda n: -n.lemon):
            free = node.healthy and not node.pods
            if node.name in designated:  # the group's, on top of the domain's own
                node.spare = free
                continue
            keep = wanted > 0 and free
            node.spare = keep
            wanted -= keep

    # ---- pods ----------------------------------------------------------------
    def observe_pod(self, pod: Mapping[str, Any]) -> bool:
        """Count a pod's accelerators against its node while it is bound and not finished
        (a terminating pod still holds its devices until it is gone). False: its device
        request cannot be read, and it is left out (the caller says so)."""
        meta = pod.get("metadata", {})
        key = f"{meta.get('namespace', 'default')}/{meta.get('name', '')}"
        node = pod.get("spec", {}).get("nodeName")
        finished = pod.get("status", {}).get("phase") in ("Succeeded", "Failed")
        try:
            accelerators = pod_accelerators(pod, self.shape.accelerator_resource,
                                            self.shape.accelerators_per_node
                                            if self.shape.claims else 0)
        except QuantityError:
            self.release(key)
            return False
        if not node or finished or accelerators == 0:
            self.release(key)
        else:
            self.bind(key, node, accelerators, pod_owner(pod))
        return True

    def hold(self, ranks: Iterable[RankSlot], accelerators: int, owner: str,
             prefix: str | None = None) -> None:
        """What one placement takes, in one call: each of RANKS' nodes bound for
        ACCELERATORS, held by OWNER as `PREFIX#rank` (PREFIX: OWNER unless given)."""
        for rank in ranks:
            self.bind(f"{prefix or owner}#{rank.rank}", rank.node, accelerators, owner)

    def bind(self, key: str, node_name: str, accelerators: int, owner: str) -> None:
        self._remember(key)
        if key in self.pods:  # bound elsewhere before: moved
            self.release(key)
        node = self.nodes.get(node_name)
        if node is None:
            return  # a node outside the group
        use = (node_name, accelerators, owner)
        self.pods[key] = use
        self.by_owner.setdefault(owner, set()).add(key)
        node.pods[key] = use
        node.used += accelerators
        domain = self.domains[node.domain]
        if node.spare:  # a spare took a replacement: it is no longer spare
            self._refresh_domain(domain)
        else:
            domain.changed()

    def _forget(self, key: str) -> PodUse | None:
        use = self.pods.pop(key, None)
        if use is not None:
            owner = use[2]
            keys = self.by_owner.get(owner)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self.by_owner[owner]
        return use

    def release(self, key: str) -> None:
        self.release_all((key,))

    def release_all(self, keys: Iterable[str]) -> None:
        """Release KEYS, refreshing each domain they touch once (a gang of thousands
        released together costs its domains, not its pods, in refreshes)."""
        touched: dict[str, Domain] = {}
        for key in keys:
            self._remember(key)
            use = self._forget(key)
            if use is None:
                continue
            node_name, accelerators, _ = use
            node = self.nodes.get(node_name)
            if node is not None:
                node.pods.pop(key, None)
                node.used -= accelerators
                touched[node.domain] = self.domains[node.domain]
        for domain in touched.values():
            self._refresh_domain(domain)

    def _remember(self, key: str) -> None:
        if self._journal is not None and key not in self._journal:
            self._journal[key] = self.pods.get(key)

    @contextlib.contextmanager
    def trial(self) -> Iterator[None]:
        """Within the block, reservations (bind, release) count as usual, so a placement
        sees the ones made before it; after it, the fleet is exactly as before. Decisions
        place on the live fleet in a trial and hand their reservations to the controller,
        which makes them when it applies the decision."""
        if self._journal is not None:  # nested: the outer trial undoes everything
            yield
            return
        self._journal = {}
        try:
            yield
        finally:
            journal, self._journal = self._journal, None
            for key, held in reversed(list(journal.items())):
                self.release(key)
                if held is not None:
                    self.bind(key, *held)

    @contextlib.contextmanager
    def without(self, owners: Iterable[str]) -> Iterator[None]:
        """Within the block, the pods of OWNERS count as gone (what preempting them would
        free); after it, they are back as they were."""
        held = [(key, self.pods[key]) for owner in dict.fromkeys(owners)
                for key in list(self.by_owner.get(owner, ()))]
        self.release_all(key for key, _ in held)
        try:
            yield
        finally:
            for key, use in held:
                self.bind(key, *use)

    def release_owner(self, owner: str) -> None:
        self.release_all(list(self.by_owner.get(owner, ())))

    @contextlib.contextmanager
    def spares_released(self) -> Iterator[None]:
        """Within the block, spares count as ordinary free nodes: for a gang recovering
        from a failure, which is what spares are held for, when it must move or wait."""
        if self.shape.spares_per_domain == 0 and self.shape.spares_per_group == 0:
            yield
            return
        held = self.shape
        # the domains whose spares change: every one, or those holding the group's spares
        touched = list(self.domains.values()) if held.spares_per_domain else list({
            self.nodes[n].domain: self.domains[self.nodes[n].domain]
            for n in self._designated if n in self.nodes}.values())
        self.shape = dataclasses.replace(held, spares_per_domain=0, spares_per_group=0)
        for domain in touched:
            self._refresh_domain(domain)
        try:
            yield
        finally:
            self.shape = held
            for domain in touched:
                self._refresh_domain(domain)

    # ---- views ---------------------------------------------------------------
    def most_workers(self, accelerators: int) -> tuple[int, int]:
        """The most workers of ACCELERATORS one node, and one domain (its spares left
        out), of this fleet hold when empty: what the nodes really hold, which may be
        more than the group's nominal size (larger nodes, a larger rack). Cached until a
        node changes."""
        found = self._most.get(accelerators)
        if found is None:
            spares = self.shape.spares_per_domain
            per_node = {n.name: n.capacity // accelerators for n in self.nodes.values()}
            per_domain = 0
            for domain in self.domains.values():
                counts = sorted((per_node[n.name] for n in domain.nodes), reverse=True)
                per_domain = max(per_domain, sum(counts[:max(len(counts) - spares, 1)]))
            found = self._most[accelerators] = (max(per_node.values(), default=0),
                                                per_domain)
        return found

    def ordered_domains(self) -> list[Domain]:
        """Domains in fabric order (network path, then natural id order)."""
        if self._ordered is None:
            self._ordered = sorted(self.domains.values(), key=lambda d: d.order)
        return self._ordered

    def snapshot(self) -> dict[str, tuple[int, str, bool, tuple[str, ...]]]:
        """Comparable state: per node (used, state, spare, pods) — for tests."""
        return {n.name: (n.used, n.state, n.spare, tuple(sorted(n.pods)))
                for n in self.nodes.values()}
