"""The placement as status records it: slices of consecutive ranks in one domain, each
slice's nodes as one hostlist ("trn2-us-0007-n[0-3]", as Slurm writes node lists), not one
entry per rank. An 8192-worker gang on Trn2 UltraServers is 2048 short slices (about 130 KB,
against 450 KB one entry per rank), well inside etcd's object limit, and a gang inside
NVLink racks of 18 nodes is a few hundred.

Names compress when consecutive ranks' nodes differ only in one number (trn2-us-0007-n0,
trn2-us-0007-n1; ip-10-0-1-23.ec2.internal, ip-10-0-1-57.ec2.internal); any other names
are listed as they are. Node names are DNS subdomains, so a list never holds "[", "]"
or "," of its own. Expanding is bounded: a record that would expand past MAX_RANKS (a
hand-edited or corrupt status) is an error, never a memory blow-up.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from goodput_operator.api.statuses import PlacementSliceDict
from goodput_operator.api.trainingjob import MAX_WORKERS

MAX_RANKS = MAX_WORKERS  # spec.workers' cap: no placement is longer
_TOKENS = re.compile(r"\d+|\D+")
_ITEM = re.compile(r"([^\[\],]*)\[([0-9,\-]+)\]([^\[\],]*)")

Obj = dict[str, Any]


def _tokens(name: str) -> list[str]:
    return _TOKENS.findall(name)


def _varying(a: list[str], b: list[str]) -> int | None:
    """The one token where names A and B differ, when it is a number of the same width in
    both (so that zero padding survives the round trip); else None."""
    if len(a) != len(b):
        return None
    diff = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
    if len(diff) != 1:
        return None
    i = diff[0]
    return i if a[i].isdigit() and b[i].isdigit() and len(a[i]) == len(b[i]) else None


def _ranges(numbers: Sequence[str]) -> str:
    """'0-3,7' for 0,1,2,3,7: runs that step by one become ranges; order is kept."""
    parts: list[str] = []
    start = 0
    for i in range(1, len(numbers) + 1):
        if i < len(numbers) and int(numbers[i]) == int(numbers[i - 1]) + 1:
            continue
        run = numbers[start:i]
        parts.append(run[0] if len(run) == 1 else f"{run[0]}-{run[-1]}")
        start = i
    return ",".join(parts)


def compress(names: Sequence[str]) -> str:
    """NAMES, in order, as a hostlist: 'n[0-3],login1'. expand() gives NAMES back."""
    items: list[str] = []
    i = 0
    while i < len(names):
        first = _tokens(names[i])
        j, where = i + 1, None
        while j < len(names):
            step = _varying(_tokens(names[j - 1]), _tokens(names[j]))
            if step is None or (where is not None and step != where):
                break
            where, j = step, j + 1
        if where is None:
            items.append(names[i])
        else:
            numbers = [_tokens(n)[where] for n in names[i:j]]
            items.append("".join(first[:where]) + f"[{_ranges(numbers)}]"
                         + "".join(first[where + 1:]))
        i = j
    return ",".join(items)


def _numbers(spec: str, budget: int) -> list[str]:
    """The numbers of a bracket ('0-3,7'), zero padding kept, at most BUDGET of them."""
    found: list[str] = []
    for part in spec.split(","):
        low, _, high = part.partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            raise ValueError(f"bad hostlist range {part!r}")
        top = int(high) if high else int(low)
        if top < int(low) or len(found) + top - int(low) + 1 > budget:
            raise ValueError(f"hostlist range {part!r} is reversed or too long")
        found.extend(str(n).zfill(len(low)) for n in range(int(low), top + 1))
    return found


def expand(text: str, budget: int = MAX_RANKS) -> list[str]:
    """The names of a hostlist, in order; ValueError when it is malformed or longer than
    BUDGET names."""
    names: list[str] = []
    position = 0
    while position < len(text):
        bracketed = _ITEM.match(text, position)
        if bracketed:
            prefix, spec, suffix = bracketed.groups()
            names.extend(f"{prefix}{n}{suffix}" for n in _numbers(spec, budget - len(names)))
            position = bracketed.end()
        else:
            end = text.find(",", position)
            end = len(text) if end < 0 else end
            name = text[position:end]
            if not name or "[" in name or "]" in name:
                raise ValueError(f"bad hostlist item {name!r}")
            names.append(name)
            position = end
        if len(names) > budget:
            raise ValueError(f"hostlist longer than {budget} names")
        if position < len(text):
            if text[position] != ",":
                raise ValueError(f"bad hostlist at {text[position:position + 20]!r}")
            position += 1
    return names


def to_slices(ranks: Iterable[Mapping[str, Any]]) -> list[PlacementSliceDict]:
    """Rank entries ({rank, node, domain}) as slices: consecutive ranks in one domain."""
    found: list[PlacementSliceDict] = []
    nodes: list[str] = []
    last: Mapping[str, Any] | None = None
    for rank in sorted(ranks, key=lambda r: int(r["rank"])):
        if last is None or rank["rank"] != last["rank"] + 1 or \
                rank.get("domain") != last.get("domain"):
            if found:
                found[-1]["nodes"] = compress(nodes)
            found.append({"firstRank": int(rank["rank"]), "domain": rank.get("domain"),
                          "nodes": ""})
            nodes = []
        nodes.append(rank["node"])
        last = rank
    if found:
        found[-1]["nodes"] = compress(nodes)
    return found


def ranks_of(placement: Mapping[str, Any] | None) -> list[Obj]:
    """A recorded placement's ranks ({rank, node, domain}), in rank order; ValueError when
    the record is malformed (the job's pass fails alone, with the reason logged)."""
    found: list[Obj] = []
    for piece in (placement or {}).get("slices") or []:
        first = int(piece["firstRank"])
        domain = piece.get("domain")
        names = expand(piece["nodes"], MAX_RANKS - len(found))
        found.extend({"rank": first + i, "node": node, "domain": domain}
                     for i, node in enumerate(names))
    return sorted(found, key=lambda r: r["rank"])


def node_of(placement: Mapping[str, Any] | None, rank: int) -> str | None:
    """The node a recorded placement gives RANK, or None: only the slice that holds it is
    expanded (a report asks this for one rank of a gang of thousands)."""
    slices = sorted((placement or {}).get("slices") or [], key=lambda s: int(s["firstRank"]))
    holder = None
    for piece in slices:
        if int(piece["firstRank"]) > rank:
            break
        holder = piece
    if holder is None:
        return None
    names = expand(holder["nodes"])
    at = rank - int(holder["firstRank"])
    return names[at] if at < len(names) else None


def nodes_of(placement: Mapping[str, Any] | None) -> list[str]:
    """The recorded placement's node of each rank, in rank order."""
    return [r["node"] for r in ranks_of(placement)]


def companions_of(placement: Mapping[str, Any] | None) -> dict[tuple[str, int], Obj]:
    """A recorded placement's companion pods ({set, index, node, domain}), by (set, index)."""
    return {(str(c.get("set")), int(c.get("index", 0))): c
            for c in (placement or {}).get("podSets") or []}
