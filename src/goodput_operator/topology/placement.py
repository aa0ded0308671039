"""Gang placement: all-or-nothing, topology-aware, fragmentation-aware, ranks in fabric order.

The objective, compared in this order (smaller is better):
1. domains spanned (unit=node too: it has no hard constraint, but a compact gang is
   faster and the tie-breaks below still fill fragments first);
2. network levels spanned: the gang stays under the innermost network group that can
   still hold it in that many domains;
3. whole domains broken: pristine domains left partially used by this gang;
4. accelerators left stranded in the domains it touches (best fit);
5. the incident history of the nodes it takes (their decayed lemon scores: at equal
   topology cost, nodes with a clean recent history);
6. fabric order (deterministic).
`required` accepts only the minimum number of domains the gang could ever need (or one
network block for unit=block); `preferred` takes the best placement available now.
With `balance`, a gang that spans domains is split evenly over them (counts differ by at
most one: 6+6, not 10+2), over the fewest domains that admit such a split, so that
collectives see symmetric domains. With `slice` (workers per slice), the gang is made of
slices of consecutive ranks, each inside one domain: domains are chosen, balanced and
counted in whole slices (16 nodes in slices of 4: four whole UltraServers; on NVL72,
slices of 16 per 18-node rack), while the gang's unit still holds for the whole.
Inside a domain whose size is a power of two (Trn2 UltraServers: 4 nodes), a gang takes an
aligned buddy slice (1, 2 or 4 nodes at aligned slots) next to existing use, so small jobs
do not split the NeuronLink ring needlessly; other domains (NVL72: 18 nodes) take the
tightest contiguous run of free slots.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

from goodput_operator.topology.model import (
    Domain,
    Fleet,
    GroupShape,
    Node,
    is_foreign,
    natural_key,
)

Unit = Literal["node", "domain", "block"]
Policy = Literal["required", "preferred"]
Near = Literal["domain", "block", "any"]


@dataclass(frozen=True)
class Companion:
    """A pod set placed with the gang (a leader, launcher or driver): COUNT pods of
    ACCELERATORS each (0: CPU only), `near` the workers (topology.podsets)."""

    name: str
    count: int
    accelerators: int
    near: Near = "domain"
    eligible: frozenset[str] | None = None  # nodes its pod may run on; None: all
    ineligible: str = ""  # why the others may not (for the explanation)


@dataclass(frozen=True)
class Request:
    """N workers x A accelerators, packed by `unit` under `policy`, with the pod sets
    that must land with them (`companions`)."""

    workers: int
    accelerators: int
    unit: Unit = "domain"
    policy: Policy = "required"
    eligible: frozenset[str] | None = None  # nodes the pod may run on; None: all
    ineligible: str = ""  # why the others may not (for the explanation)
    balance: bool = False  # split evenly over the domains spanned (topology.balance)
    slice: int = 1  # workers per slice, each slice inside one domain (topology.slice)
    companions: tuple[Companion, ...] = ()  # pod sets placed with the gang (spec.podSets)
    within: frozenset[str] | None = None  # the domains it must stay in (a serving unit)


class RankSlot(NamedTuple):
    """Where one rank runs (a tuple: gangs of 30k workers build 30k of them per solve)."""

    rank: int
    node: str
    domain: str
    slot: int


class CompanionSlot(NamedTuple):
    """Where pod ORDINAL of the companion pod set NAME runs (topology.podsets)."""

    name: str
    ordinal: int
    node: str
    domain: str


def in_rank_order(ranks: Sequence[RankSlot], order: str) -> tuple[RankSlot, ...]:
    """RANKS renumbered for topology.rankOrder: fabric keeps the placement's order
    (network level, domain, slot: consecutive ranks are neighbours); index numbers the same
    nodes by their names' natural order."""
    if order != "index":
        return tuple(ranks)
    by_name = sorted(ranks, key=lambda r: natural_key(r.node))
    return tuple(r._replace(rank=i) for i, r in enumerate(by_name))


@dataclass(frozen=True)
class Placement:
    """A gang placement (ok) or the precise reason there is none."""

    ok: bool
    reason: str
    ranks: tuple[RankSlot, ...] = ()
    domains: tuple[str, ...] = ()
    min_domains: int = 0  # domains the gang needs on an empty fleet
    companions: tuple[CompanionSlot, ...] = ()  # pod sets placed with it (topology.podsets)

    @property
    def hosts(self) -> list[str]:
        """The host list in rank order (one line per worker)."""
        return [r.node for r in self.ranks]

    @property
    def extra_domains(self) -> int:
        return len(self.domains) - self.min_domains if self.ok else 0


@dataclass
class _Choice:
    domains: list[tuple[Domain, int]]  # (domain, workers placed there)
    # (domains spanned, whole domains broken, worker slots stranded, incident history,
    # fabric order)
    score: tuple[int, int, int, float, tuple[object, ...]]


def workers_on(node: Node, accelerators: int, eligible: frozenset[str] | None = None) -> int:
    if not node.usable or (eligible is not None and node.name not in eligible):
        return 0
    return node.free // accelerators


def domain_capacity(domain: Domain, accelerators: int,
                    eligible: frozenset[str] | None = None) -> int:
    """Workers of ACCELERATORS the domain takes now; cached per domain, and counted afresh
    only for a gang limited to ELIGIBLE nodes that leave out one of this domain's. A few
    tainted nodes (a quarantine) make every pod's eligible set a list of all the others:
    counting the whole fleet node by node for every replica placed was 80 ms a replica
    at 20,000 nodes."""
    if eligible is not None and not all_eligible(domain, eligible):
        return sum(workers_on(n, accelerators, eligible) for n in domain.nodes)
    cached = domain.capacity_cache.get(accelerators)
    if cached is None:
        cached = sum(workers_on(n, accelerators) for n in domain.nodes)
        domain.capacity_cache[accelerators] = cached
    return cached


def all_eligible(domain: Domain, eligible: frozenset[str]) -> bool:
    """Whether ELIGIBLE holds every node of DOMAIN (cached for the last set asked)."""
    cached = domain.eligible_cache
    if cached is None or cached[0] is not eligible:
        cached = domain.eligible_cache = (eligible, all(n.name in eligible
                                                        for n in domain.nodes))
    return cached[1]


def unhealthy(domain: Domain) -> list[str]:
    """`node state` of each unhealthy node (cached until the domain changes)."""
    if domain.unhealthy_cache is None:
        domain.unhealthy_cache = [f"{n.name} {n.state}" for n in domain.nodes if not n.healthy]
    return domain.unhealthy_cache


def is_pristine(domain: Domain) -> bool:
    if domain.pristine_cache is None:
        domain.pristine_cache = all(not n.pods for n in domain.nodes)
    return domain.pristine_cache


def place(fleet: Fleet, request: Request) -> Placement:
    """Place the whole gang, and its companion pod sets with it, or explain why not."""
    if request.companions:
        from goodput_operator.topology.podsets import place_together  # it builds on this
        return place_together(fleet, request)
    return place_gang(fleet, request)


def place_gang(fleet: Fleet, request: Request) -> Placement:
    """Place the workers of REQUEST (not its companions) or explain why not."""
    shape = fleet.shape
    if request.workers < 1 or request.accelerators < 1:
        return Placement(False, "a gang needs at least 1 worker and 1 accelerator per worker")
    # the group's nominal sizes, or what its nodes really hold when that is more
    nominal = shape.accelerators_per_node // request.accelerators
    node_most, domain_most = fleet.most_workers(request.accelerators)
    per_node = max(nominal, node_most)
    if per_node == 0:
        return Placement(False, f"each worker asks {request.accelerators} "
                                f"{shape.accelerator_resource}; nodes have "
                                f"{shape.accelerators_per_node}")
    if shape.whole_domains:
        whole = _whole_domains(shape, request)
        if isinstance(whole, str):
            return Placement(False, whole)
        request = whole
    # spares never take new placements, so a domain offers its other nodes
    per_domain = max(nominal * max(shape.nodes_per_domain - shape.spares_per_domain, 1),
                     domain_most)
    size = max(1, request.slice)  # with slices, domains are chosen in whole slices
    if request.workers % size or size > per_domain:
        return Placement(False, f"{request.workers} workers do not make whole slices of "
                                f"{size}, each inside one {shape.domain_noun} of "
                                f"{per_domain} workers")
    units = request.workers // size
    min_domains = math.ceil(units / (per_domain // size))
    domains = fleet.ordered_domains() if request.within is None else sorted(
        (fleet.domains[i] for i in request.within if i in fleet.domains), key=lambda d: d.order)
    caps = [(d, c // size) for d in domains
            if (c := domain_capacity(d, request.accelerators, request.eligible)) >= size]
    if sum(c for _, c in caps) < units:
        return Placement(False, _sliced(request, explain_shortage(fleet, request, min_domains)),
                         min_domains=min_domains)

    choice = _fewest_domains(fleet, caps, dataclasses.replace(request, workers=units),
                             min_domains)
    if choice is None:
        reason = explain_shortage(fleet, request, min_domains)
        if request.balance:
            reason = (f"no {min_domains} {shape.domain_noun}s hold an even split "
                      f"(topology.balance) now; " + reason)
        return Placement(False, _sliced(request, reason), min_domains=min_domains)
    choice.domains = [(domain, count * size) for domain, count in choice.domains]
    return _assign(fleet, request, choice, min_domains)


def _whole_domains(shape: GroupShape, request: Request) -> Request | str:
    """REQUEST in slices of whole domains, where a domain runs whole (a TPU slice: its hosts
    start together, one worker each holding all its chips); or why it cannot be."""
    size = request.slice if request.slice > 1 else request.workers
    hosts, chips = shape.nodes_per_domain, shape.accelerators_per_node
    if request.accelerators != chips or size != hosts or request.workers % hosts:
        return (f"a {shape.domain_noun} runs whole: {hosts} workers of {chips} "
                f"{shape.accelerator_resource} each (one per host), and for several slices "
                f"topology.slice.size {hosts}; asked {request.workers} workers of "
                f"{request.accelerators}" + (f" in slices of {size}" if request.slice > 1
                                             else ""))
    return dataclasses.replace(request, slice=hosts)


def _sliced(request: Request, reason: str) -> str:
    return f"in slices of {request.slice}: {reason}" if request.slice > 1 else reason


def _fewest_domains(fleet: Fleet, caps: list[tuple[Domain, int]], request: Request,
                    min_domains: int) -> _Choice | None:
    levels = len(fleet.shape.network_levels)
    balance = request.balance
    if request.unit == "block":
        choice = _best_in_groups(caps, request.workers, depth=levels, k=None, balance=balance)
        if choice is None and balance and request.policy == "preferred":
            # staying inside one block comes first, evenness second (as Kueue's TAS
            # keeps a preferred level before anything else): unevenly, in one block
            choice = _best_in_groups(caps, request.workers, depth=levels, k=None)
        if choice is not None or request.policy == "required":
            return choice
    if not balance and any(c >= request.workers for _, c in caps):
        return _tightest_domain(caps, request.workers, levels)
    descending = sorted((c for _, c in caps), reverse=True)
    k_star = (fewest_even if balance else fewest)(descending, request.workers)
    if k_star > len(descending) or (request.policy == "required" and request.unit == "domain"
                                    and k_star > min_domains):
        return None
    for depth in range(levels, -1, -1):  # innermost network group first, then climb
        choice = _best_in_groups(caps, request.workers, depth=depth, k=k_star,
                                 balance=balance)
        if choice is not None:
            return choice
    return None  # unreachable: depth 0 is the whole fleet


def _tightest_domain(caps: list[tuple[Domain, int]], workers: int, levels: int) -> _Choice:
    """What `_best_in_groups` chooses when one domain holds the whole gang (one replica,
    most often), in one scan instead of a sort and a selection per network group: in each
    innermost group `_select` takes the domain of the tightest fit (a used one before a
    whole one), and of those the best score wins. Every replica placed scanned the fleet
    that way: 40 ms a replica at 5,000 domains."""
    tightest: dict[tuple[str, ...], tuple[tuple[bool, int, float, object], Domain]] = {}
    for domain, cap in caps:
        if cap < workers:
            continue
        key = (is_pristine(domain), cap - workers, domain.lemon, domain.order)
        group = domain.prefixes[levels]
        held = tightest.get(group)
        if held is None or key < held[0]:
            tightest[group] = (key, domain)
    choices = [_Choice([(domain, workers)],
                       (1, int(key[0] and key[1] > 0), key[1], domain.lemon, domain.order))
               for key, domain in tightest.values()]
    return min(choices, key=lambda choice: choice.score)


def fewest(descending: Iterable[int], n: int) -> int:
    """Fewest domains, taken roomiest first, whose capacities sum to at least n
    (one more than there are when they cannot)."""
    total, k = 0, 0
    for k, cap in enumerate(descending, 1):
        total += cap
        if total >= n:
            return k
    return k + 1


def fewest_even(descending: Sequence[int], n: int) -> int:
    """Fewest domains over which n splits evenly (each n // k or one more) within their
    capacities, DESCENDING (one more than there are when no number does)."""
    for k in range(fewest(descending, n), len(descending) + 1):
        if _even_fits(descending, n, k):
            return k
    return len(descending) + 1


def _even_fits(descending: Sequence[int], n: int, k: int) -> bool:
    """Whether k of the domains (capacities DESCENDING) take n split evenly: n % k of them
    need n // k + 1, the others n // k."""
    share, extra = divmod(n, k)
    return k <= len(descending) and share > 0 and descending[k - 1] >= share and \
        (extra == 0 or descending[extra - 1] >= share + 1)


def _best_in_groups(caps: list[tuple[Domain, int]], workers: int, depth: int,
                    k: int | None, balance: bool = False) -> _Choice | None:
    """Best selection inside any one network group (path prefix of length depth).
    With k set, only selections of exactly k domains count."""
    groups: dict[tuple[str, ...], list[tuple[Domain, int]]] = defaultdict(list)
    for domain, cap in caps:
        groups[domain.prefixes[depth]].append((domain, cap))
    best: _Choice | None = None
    for members in groups.values():
        if sum(c for _, c in members) < workers:  # cannot hold the gang, whatever the choice
            continue
        choice = (_select_even if balance else _select)(members, workers, k)
        if choice is not None and (best is None or choice.score < best.score):
            best = choice
    return best


def _select(members: list[tuple[Domain, int]], workers: int, k: int | None) -> _Choice | None:
    """The k-1 roomiest domains, then the tightest fit for the remainder, preferring a
    domain already in use so that whole domains stay whole."""
    needed = fewest(sorted((c for _, c in members), reverse=True), workers)
    if needed > len(members) or (k is not None and needed != k):
        return None
    # the needed-1 roomiest by a partial sort (a 1,736-domain gang among 13,889 domains)
    chosen = heapq.nsmallest(needed - 1, members,
                             key=lambda dc: (-dc[1], dc[0].lemon, dc[0].order))
    remainder = workers - sum(c for _, c in chosen)
    taken = {domain.id for domain, _ in chosen}
    rest = [dc for dc in members if dc[0].id not in taken]
    last = min((dc for dc in rest if dc[1] >= remainder),
               key=lambda dc: (is_pristine(dc[0]), dc[1] - remainder, dc[0].lemon,
                               dc[0].order))
    picks = [*chosen, (last[0], remainder)]
    stranded = last[1] - remainder  # the roomiest k-1 are filled completely
    broken = int(is_pristine(last[0]) and stranded > 0)
    return _Choice(picks, (needed, broken, stranded, sum(d.lemon for d, _ in picks),
                           picks[0][0].order))


def _select_even(members: list[tuple[Domain, int]], workers: int, k: int | None
                 ) -> _Choice | None:
    """The fewest domains (exactly k when set) that take WORKERS split evenly: the
    n % k larger shares go to the tightest domains that hold them, the others to the
    tightest of the rest, domains in use before pristine ones, so that little is stranded
    and whole domains stay whole."""
    descending = sorted((c for _, c in members), reverse=True)
    needed = fewest_even(descending, workers) if k is None else k
    if needed > len(descending) or not _even_fits(descending, workers, needed):
        return None
    share, extra = divmod(workers, needed)
    tightest = sorted(members, key=lambda dc: (dc[1], is_pristine(dc[0]), dc[0].lemon,
                                               dc[0].order))
    picks: list[tuple[Domain, int]] = []
    for size, count in ((share + 1, extra), (share, needed - extra)):
        taken = {domain.id for domain, _ in picks}
        fitting = [dc for dc in tightest if dc[1] >= size and dc[0].id not in taken]
        picks += [(domain, size) for domain, _ in fitting[:count]]
    capacity = {domain.id: cap for domain, cap in members}
    stranded = sum(capacity[domain.id] - count for domain, count in picks)
    broken = sum(1 for domain, count in picks
                 if is_pristine(domain) and capacity[domain.id] > count)
    picks.sort(key=lambda dc: dc[0].order)
    return _Choice(picks, (needed, broken, stranded, sum(d.lemon for d, _ in picks),
                           picks[0][0].order))


def _assign(fleet: Fleet, request: Request, choice: _Choice, min_domains: int) -> Placement:
    """Ranks in fabric order: domains in order, each domain's nodes by slot. Built domain
    by domain, without sorting every rank (a 31k-worker gang over 1,736 NVLink domains)."""
    ranks: list[RankSlot] = []
    for domain, count in sorted(choice.domains, key=lambda dc: dc[0].order):
        for node, n in _nodes_in_domain(fleet, domain, count, request.accelerators,
                                        request.eligible):
            first = len(ranks)
            if n == 1:  # whole-node workers, most of the largest gangs
                ranks.append(RankSlot(first, node.name, domain.id, node.slot))
            else:
                ranks.extend(RankSlot(first + i, node.name, domain.id, node.slot)
                             for i in range(n))
    if len(ranks) != request.workers:  # never a gang placed short: a bug, said loudly
        raise AssertionError(f"placement of {request.workers} workers found "
                             f"{len(ranks)} slots in {[d.id for d, _ in choice.domains]}")
    domains = tuple(d.id for d, count in sorted(choice.domains, key=lambda dc: dc[0].order)
                    if count)
    noun = fleet.shape.domain_noun
    span = "the minimum" if len(domains) <= min_domains else f"minimum {min_domains}"
    listed = ", ".join(domains[:MAX_LISTED]) + (
        f" and {len(domains) - MAX_LISTED} more" if len(domains) > MAX_LISTED else "")
    reason = (f"{request.workers} workers x {request.accelerators} on {len(domains)} "
              f"{noun}{'s' if len(domains) != 1 else ''} ({span}): {listed}")
    return Placement(True, reason, tuple(ranks), domains, min_domains)


MAX_LISTED = 16  # domains a placement's reason names (status.placement.domains has all)


def _nodes_in_domain(fleet: Fleet, domain: Domain, count: int, accelerators: int,
                     eligible: frozenset[str] | None = None) -> list[tuple[Node, int]]:
    """Which nodes of a domain take `count` workers, in slot order: partly used nodes
    first (they are fragments already), then an aligned slice of free nodes. A domain the
    gang fills takes every node with room (most of a large gang's domains: no slice to
    choose; the list is kept until the domain changes)."""
    if eligible is None and count == domain_capacity(domain, accelerators):
        filled = domain.fill_cache.get(accelerators)
        if filled is None:
            filled = domain.fill_cache[accelerators] = [
                (node, n) for node in domain.nodes if (n := workers_on(node, accelerators))]
        return filled
    return sorted(_some_nodes(fleet, domain, count, accelerators, eligible),
                  key=lambda nn: nn[0].slot)


def _some_nodes(fleet: Fleet, domain: Domain, count: int, accelerators: int,
                eligible: frozenset[str] | None) -> list[tuple[Node, int]]:
    picked: list[tuple[Node, int]] = []
    remaining = count
    for node in domain.nodes:
        if remaining and node.usable and node.used > 0 and \
                (n := workers_on(node, accelerators, eligible)):
            take = min(n, remaining)
            picked.append((node, take))
            remaining -= take
    if not remaining:
        return picked
    # the nominal size, or (a worker larger than it, on larger nodes) what nodes hold
    per_node = fleet.shape.accelerators_per_node // accelerators or \
        fleet.most_workers(accelerators)[0] or 1
    free_nodes = [n.usable and n.used == 0 and workers_on(n, accelerators, eligible) > 0
                  for n in domain.nodes]
    needed = math.ceil(remaining / per_node)
    start = slice_start(free_nodes, needed, [n.lemon for n in domain.nodes])
    chosen = [domain.nodes[i] for i in range(start, len(domain.nodes)) if free_nodes[i]]
    if start < 0 or len(chosen) < needed:  # fragmented: any free nodes, lowest slots
        chosen = [n for n, free in zip(domain.nodes, free_nodes, strict=True) if free]
    # each node takes what it really holds: a node larger than the group's perNode (mixed
    # instance sizes) takes more than per_node workers, and the count must come out exact
    for node in chosen:
        if not remaining:
            break
        take = min(workers_on(node, accelerators, eligible), remaining)
        picked.append((node, take))
        remaining -= take
    return picked


def slice_start(free: Sequence[bool], needed: int, lemons: Sequence[float] = ()) -> int:
    """First slot of the slice a gang of `needed` nodes takes in one domain, or -1.

    Power-of-two domains: buddy allocation — the aligned block of the next power of two
    whose buddy is most used (fill fragments first, keep big blocks intact). Other sizes:
    the tightest run of free slots that fits. Among equals, the slice whose nodes have the
    cleanest incident history (LEMONS, per slot), then the leftmost.
    """
    size = len(free)

    def history(start: int) -> float:
        return sum(lemons[start:start + needed]) if lemons else 0.0
    if needed > size:
        return -1
    if size & (size - 1) == 0:
        block = 1 << (needed - 1).bit_length()
        best: tuple[int, float, int] | None = None
        for start in range(0, size, block):
            if all(free[start:start + needed]):
                buddy = (start // (2 * block)) * (2 * block)
                free_around = sum(free[buddy:buddy + 2 * block]) if 2 * block <= size else size
                if best is None or (free_around, history(start), start) < best:
                    best = (free_around, history(start), start)
        if best is not None:
            return best[2]
    runs: list[tuple[int, int]] = []  # (length, start)
    run_start: int | None = None
    for i, ok in enumerate([*free, False]):
        if ok and run_start is None:
            run_start = i
        elif not ok and run_start is not None:
            runs.append((i - run_start, run_start))
            run_start = None
    # in the tightest run that fits, the cleanest window of NEEDED slots
    fitting = [(length, min(range(run, run + length - needed + 1),
                            key=lambda s: (history(s), s))) for length, run in runs
               if length >= needed]
    return min(fitting, key=lambda lw: (lw[0], history(lw[1]), lw[1]))[1] if fitting else -1


def explain_shortage(fleet: Fleet, request: Request, min_domains: int) -> str:
    """Why the gang does not fit: what it needs, and what each domain is doing instead."""
    shape = fleet.shape
    noun = shape.domain_noun
    free_whole, degraded = 0, []
    # domains fully and partly used, and the owners of the first NAMED of each (a message
    # names three: on a 1M-accelerator fleet every domain's pods would cost 100 ms)
    full, partial, partial_room = 0, 0, 0
    full_owners: set[str] = set()
    partial_owners: set[str] = set()
    for domain in fleet.ordered_domains():
        bad = unhealthy(domain)
        if bad or len(domain.nodes) < shape.nodes_per_domain:
            missing = shape.nodes_per_domain - len(domain.nodes)
            degraded.append(", ".join(bad + ([f"{missing} node(s) missing"] if missing > 0
                                              else [])))
        elif is_pristine(domain):
            free_whole += 1
        elif (room := domain_capacity(domain, request.accelerators)) == 0:
            full += 1
            if full <= NAMED:
                full_owners |= domain.owners()
        else:
            partial += 1
            partial_room += room
            if partial <= NAMED:
                partial_owners |= domain.owners()
    total_domains = len(fleet.domains)
    if request.unit == "domain" and request.policy == "required":
        spares = (f", {shape.spares_per_domain} more held as spare"
                  if shape.spares_per_domain else "")
        usable = shape.nodes_per_domain - shape.spares_per_domain
        need = (f"needs {min_domains} whole {noun}{'s' if min_domains != 1 else ''} "
                f"({usable} nodes x {shape.accelerators_per_node} "
                f"{shape.accelerator_resource}{spares}) for {request.workers} workers x "
                f"{request.accelerators}")
    elif request.unit == "block":
        need = (f"needs {request.workers} workers x {request.accelerators} inside one network "
                "block")
    else:
        need = f"needs {request.workers} workers x {request.accelerators} free"
    free_workers = sum(domain_capacity(d, request.accelerators, request.eligible)
                       for d in fleet.domains.values())
    parts = [f"{free_whole} free"]
    if degraded:
        parts.append(f"{len(degraded)} degraded ({'; '.join(degraded[:3])}"
                     f"{'; ...' if len(degraded) > 3 else ''})")
    if full:
        parts.append(f"{full} fully used by {_owners(full_owners)}")
    if partial:
        parts.append(f"{partial} partially used by {_owners(partial_owners)} "
                     f"(room for {partial_room} there)")
    foreign, held = foreign_usage(fleet)
    if foreign:
        parts.append(f"pods outside the operator hold devices ({'; '.join(foreign)}"
                     f"{f'; and {held - len(foreign)} more' if held > len(foreign) else ''})")
    limits = ""
    if request.eligible is not None:
        limits = (f"; the pod fits only {len(request.eligible)} of the group's "
                  f"{len(fleet.nodes)} nodes" + (f" ({request.ineligible})"
                                                 if request.ineligible else ""))
    return (f"{need}; of {total_domains} {noun}s: {', '.join(parts)}; room for "
            f"{free_workers} such workers in all{limits}")


def foreign_usage(fleet: Fleet, shown: int = 3) -> tuple[list[str], int]:
    """'node X: 8 of 16 held by pod ns/p' for the first SHOWN pods (by node name) the
    operator did not place (a user's plain pod, a Job's, a DaemonSet's) that hold devices
    on the group's nodes, and how many there are: found by owner, so that the cost is that
    of the foreign pods, not of the fleet."""
    found = [(node, key, accelerators)
             for owner, keys in fleet.by_owner.items() if is_foreign(owner)
             for key in keys for node, accelerators, _ in (fleet.pods[key],)
             if accelerators and node in fleet.nodes]
    return ([f"node {node}: {accelerators} of {fleet.nodes[node].capacity} held by pod {key}"
             for node, key, accelerators in heapq.nsmallest(shown, found)], len(found))


NAMED = 64  # used domains whose owners an explanation gathers


def _owners(owners: set[str]) -> str:
    names = sorted(owners)
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def commit(fleet: Fleet, placement: Placement, request: Request, owner: str) -> None:
    """Record a placement's usage in the fleet (what bound pods will do for real)."""
    fleet.hold(placement.ranks, request.accelerators, owner)


def room_for(fleet: Fleet, request: Request, limit: int) -> int:
    """How many more gangs of REQUEST the fleet can host now (at most LIMIT): placed one
    after another on a scratch reservation that is released afterwards."""
    owner = "scratch/room-for"
    count = 0
    try:
        while count < limit:
            placed = place(fleet, request)
            if not placed.ok:
                break
            fleet.hold(placed.ranks, request.accelerators, owner, f"{owner}#{count}")
            count += 1
    finally:
        fleet.release_owner(owner)
    return count
