"""Baseline placement engines, run on the same fleet model as ours.

- first-fit: nodes in name order, the first that have room (what a naive gang scheduler
  does);
- spread: each worker on the node with the most free accelerators (kube-scheduler's
  LeastAllocated scoring);
- bestfit: a Kueue TAS-style tree (block -> domain -> node): the tightest single domain
  that holds the gang, else the tightest block, whose domains are taken roomiest first
  with the last one swapped for the smallest that fits (Kueue's BestFit); inside a domain,
  nodes with the most free capacity first.
None of them knows about aligned slices or even splits, or prefers used domains over
whole ones. Every one places a leader pod (a companion pod set) after its workers, near
them, as ours does (but without holding room for it inside the gang); bestfit also takes
a gang in slices (capacity counted in whole slices, as Kueue TAS's podset slices).
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from collections import defaultdict
from collections.abc import Callable

from goodput_operator.topology.model import Domain, Fleet, Node, natural_key
from goodput_operator.topology.placement import (
    Placement,
    RankSlot,
    Request,
    domain_capacity,
    workers_on,
)
from goodput_operator.topology.podsets import companions_near

Engine = Callable[[Fleet, Request], Placement]


def _result(fleet: Fleet, request: Request, picks: list[tuple[Node, int]]) -> Placement:
    placed = sum(n for _, n in picks)
    per_node = fleet.shape.accelerators_per_node // request.accelerators
    usable_per_domain = fleet.shape.nodes_per_domain - fleet.shape.spares_per_domain
    min_domains = math.ceil(request.workers / max(per_node * usable_per_domain, 1))
    if placed < request.workers:
        return Placement(False, "does not fit", min_domains=min_domains)
    hosts = [node for node, count in picks for _ in range(count)]
    ranks = [RankSlot(i, n.name, n.domain, n.slot) for i, n in enumerate(hosts)]
    domains = tuple(dict.fromkeys(r.domain for r in ranks))
    return Placement(True, "placed", tuple(ranks), domains, min_domains)


class FirstFit:
    def __init__(self, fleet: Fleet) -> None:
        self.order = sorted(fleet.nodes.values(), key=lambda n: natural_key(n.name))

    def __call__(self, fleet: Fleet, request: Request) -> Placement:
        picks: list[tuple[Node, int]] = []
        remaining = request.workers
        for node in self.order:
            if (room := workers_on(node, request.accelerators)) > 0:
                take = min(room, remaining)
                picks.append((node, take))
                remaining -= take
                if not remaining:
                    break
        return _result(fleet, request, picks)


class Spread:
    def __init__(self, fleet: Fleet) -> None:
        self.rank = {n.name: natural_key(n.name) for n in fleet.nodes.values()}

    def __call__(self, fleet: Fleet, request: Request) -> Placement:
        heap = [(-n.free, self.rank[n.name], n.name) for n in fleet.nodes.values()
                if workers_on(n, request.accelerators) > 0]
        heapq.heapify(heap)
        taken: dict[str, int] = defaultdict(int)
        for _ in range(request.workers):
            if not heap:
                return _result(fleet, request, [])
            free, key, name = heapq.heappop(heap)
            taken[name] += 1
            left = -free - request.accelerators
            if left >= request.accelerators:
                heapq.heappush(heap, (-left, key, name))
        return _result(fleet, request, [(fleet.nodes[n], c) for n, c in taken.items()])


class BestFit:
    def __init__(self, fleet: Fleet) -> None:
        pass

    def __call__(self, fleet: Fleet, request: Request) -> Placement:
        size = max(1, request.slice)  # Kueue TAS's podset slices: capacity in whole slices
        units = request.workers // size
        caps = [(d, c // size) for d in fleet.ordered_domains()
                if (c := domain_capacity(d, request.accelerators)) >= size]
        fitting = [(d, c) for d, c in caps if c >= units]
        if fitting:
            domain, _ = min(fitting, key=lambda dc: (dc[1], dc[0].order))
            return _result(fleet, request, self._nodes(domain, request, request.workers))
        blocks: dict[tuple[str, ...], list[tuple[Domain, int]]] = defaultdict(list)
        for d, c in caps:
            blocks[d.path].append((d, c))
        block_caps = [(sum(c for _, c in members), path) for path, members in blocks.items()]
        fitting_blocks = [bc for bc in block_caps if bc[0] >= units]
        members = (blocks[min(fitting_blocks)[1]] if fitting_blocks else caps)
        chosen = self._domains(members, units)
        if chosen is None:
            return _result(fleet, request, [])
        picks: list[tuple[Node, int]] = []
        for domain, count in chosen:
            picks.extend(self._nodes(domain, request, count * size))
        return _result(fleet, request, picks)

    @staticmethod
    def _domains(members: list[tuple[Domain, int]],
                 workers: int) -> list[tuple[Domain, int]] | None:
        ranked = sorted(members, key=lambda dc: (-dc[1], dc[0].order))
        chosen: list[tuple[Domain, int]] = []
        remaining = workers
        for i, (domain, cap) in enumerate(ranked):
            if cap >= remaining:
                # BestFit: the smallest remaining domain that still holds the remainder
                last = min((dc for dc in ranked[i:] if dc[1] >= remaining),
                           key=lambda dc: (dc[1], dc[0].order))
                chosen.append((last[0], remaining))
                return chosen
            chosen.append((domain, cap))
            remaining -= cap
        return None

    @staticmethod
    def _nodes(domain: Domain, request: Request, count: int) -> list[tuple[Node, int]]:
        nodes = sorted((n for n in domain.nodes if workers_on(n, request.accelerators) > 0),
                       key=lambda n: (-n.free, n.slot))
        picks: list[tuple[Node, int]] = []
        for node in nodes:
            take = min(workers_on(node, request.accelerators), count)
            picks.append((node, take))
            count -= take
            if not count:
                break
        return picks


def with_companions(factory: Callable[[Fleet], Engine]) -> Callable[[Fleet], Engine]:
    """FACTORY's engine, placing a request's companion pods (a leader) the way ours does
    once the workers are placed (topology.podsets.companions_near: near them, best node
    first), but without ours' fallback of holding room for them inside the gang: what a
    scheduler that places a leader pod set after its workers does."""
    def build(fleet: Fleet) -> Engine:
        engine = factory(fleet)

        def run(fleet: Fleet, request: Request) -> Placement:
            workers = dataclasses.replace(request, companions=())
            placed = engine(fleet, workers)
            if not request.companions or not placed.ok:
                return placed
            slots = companions_near(fleet, placed, workers, request.companions)
            if isinstance(slots, str):
                return Placement(False, slots, min_domains=placed.min_domains)
            return dataclasses.replace(placed, companions=tuple(slots))
        return run
    return build


BASELINES: dict[str, Callable[[Fleet], Engine]] = {
    "first-fit": with_companions(FirstFit), "spread": with_companions(Spread),
    "bestfit-tas": with_companions(BestFit),
}
