"""The fleet as a picture: domains as boxes of nodes in slot order, each node marked with
the job on it (or free, spare, quarantined, NotReady, cordoned). Text for terminals, SVG
for files. Pure: it draws a Fleet model.
"""

from __future__ import annotations

from html import escape
from itertools import groupby

from goodput_operator.topology.model import Domain, Fleet, Node

CELL = 14  # text width of one node cell
LEMON_MARK = 0.5  # an incident score this high is marked (about one quarantine lately)
PER_ROW = 6  # node cells per text row (NVL72's 18 nodes take three rows)
MARKS = {"notready": "NotReady", "cordoned": "cordoned", "quarantined": "QUARANTINE",
         "misshaped": "mis-shaped"}


def occupant(node: Node) -> str:
    """The job(s) on a node, shortest readable form: `name` of tj/ns/name."""
    owners = sorted({owner for _, _, owner in node.pods.values()})
    return "+".join(owner.rsplit("/", 1)[-1] for owner in owners)


def label(node: Node) -> str:
    if node.state in MARKS:
        return MARKS[node.state]
    if node.pods:
        return occupant(node)
    return "spare" if node.spare else "."


def shorten(text: str, width: int) -> str:
    """TEXT in at most WIDTH characters, cut after a whole word (at - _ . /) with an
    ellipsis, never mid-word unless its first word alone is too long."""
    if len(text) <= width:
        return text
    cut = max((i for i, ch in enumerate(text[:width - 1]) if ch in "-_./+"), default=-1)
    return (text[:cut + 1] if cut > 0 else text[:width - 1]) + "…"


def render_text(fleet: Fleet, group: str) -> str:
    domains = fleet.ordered_domains()
    used = sum(1 for n in fleet.nodes.values() if n.pods)
    lines = [f"{group}: {len(domains)} {fleet.shape.domain_noun}s, {len(fleet.nodes)} nodes "
             f"({used} in use), {fleet.shape.accelerators_per_node} "
             f"{fleet.shape.accelerator_resource} per node"]
    for path, members in groupby(domains, key=lambda d: d.path):
        block = " / ".join(p for p in path if p) or "(no network levels)"
        lines.append(f"  network {block}")
        for domain in members:
            lines.extend(_box(domain, fleet.shape.domain_noun))
    lines.append("  legend: job name | . free | spare | NotReady | QUARANTINE | cordoned | "
                 "! quarantined lately (incident score >= 0.5, halving every "
                 f"{fleet.shape.lemon_half_life_days:g} days)")
    cut = sorted({name for n in fleet.nodes.values() if n.pods and n.state not in MARKS
                  for name in [label(n)] if shorten(name, CELL - 4) != name})
    if cut:
        lines.append(f"  jobs in full: {', '.join(cut)}")
    return "\n".join(lines)


def _box(domain: Domain, noun: str) -> list[str]:
    """A domain as a closed box, however long its title or its rows."""
    cells = [f"{n.slot:>2}{'!' if n.lemon >= LEMON_MARK else ' '}"
             f"{shorten(label(n), CELL - 4)}".ljust(CELL - 1) for n in domain.nodes]
    rows = [" ".join(cells[i:i + PER_ROW]) for i in range(0, len(cells), PER_ROW)] or [""]
    title = f" {noun} {domain.id} "
    inner = max(max(len(r) for r in rows) + 1, len(title) + 2)  # between the corners
    top = "  ┌─" + title + "─" * (inner - 1 - len(title)) + "┐"
    body = [f"  │ {row.ljust(inner - 1)}│" for row in rows]
    return [top, *body, "  └" + "─" * inner + "┘"]


def job_colors(jobs: list[str]) -> dict[str, str]:
    """A colour per job, spread by the golden angle over the hues no node state uses
    (yellow through green and cyan to blue: the states are red, orange, purple and grey),
    so that jobs differ from each other and from every state."""
    return {job: f"hsl({60 + (i * 137.5) % 180:.0f}, 65%, {58 + (i * 7) % 14}%)"
            for i, job in enumerate(sorted(jobs))}


STATE_COLORS = {"notready": "#d9534f", "quarantined": "#8e44ad", "cordoned": "#7f8c8d",
                "misshaped": "#e67e22"}


def render_svg(fleets: dict[str, Fleet]) -> str:
    """Every group's domains as rows of node squares, coloured by job; a legend below."""
    size, gap, pad = 58, 6, 16
    rows: list[str] = []
    jobs: set[str] = set()
    y = pad
    width = 0
    colors = job_colors(sorted({name for fleet in fleets.values()
                                for n in fleet.nodes.values()
                                for name in occupant(n).split("+") if name}))
    for group, fleet in sorted(fleets.items()):
        rows.append(f'<text x="{pad}" y="{y + 14}" class="group">{escape(group)} '
                    f'({escape(fleet.shape.domain_noun)}s)</text>')
        y += 26
        for domain in fleet.ordered_domains():
            x = pad
            rows.append(f'<g><title>{escape(domain.id)}</title><text x="{x}" y="{y + 28}" '
                        f'class="domain">{escape(shorten(domain.id, 24))}</text></g>')
            x += 170
            for node in domain.nodes:
                name = occupant(node)
                jobs.update(name.split("+") if name else [])
                fill = STATE_COLORS.get(node.state) or (colors[name.split("+")[0]] if name
                                                        else "#ffffff" if not node.spare
                                                        else "#eaf2f8")
                text = label(node)
                history = f" (incident score {node.lemon:.2g})" if node.lemon >= LEMON_MARK \
                    else ""
                rows.append(
                    f'<g><title>{escape(node.name)}: {escape(text)}{history}</title>'
                    f'<rect x="{x}" y="{y}" width="{size}" height="{size}" rx="5" '
                    f'fill="{fill}" stroke="#34495e"/>'
                    f'<text x="{x + size / 2}" y="{y + 17}" class="slot">{node.slot}</text>'
                    f'<text x="{x + size / 2}" y="{y + 34}" class="job">'
                    f"{escape(shorten(text, 9))}</text></g>")
                x += size + gap
            width = max(width, x)
            y += size + gap
        y += 14
    legend_y = y + 10
    legend = [f'<text x="{pad}" y="{legend_y}" class="group">legend</text>']
    entries = [(j, colors[j]) for j in sorted(jobs)] + [
        ("free", "#ffffff"), ("spare", "#eaf2f8"), ("NotReady", STATE_COLORS["notready"]),
        ("quarantined", STATE_COLORS["quarantined"]), ("cordoned", STATE_COLORS["cordoned"])]
    column = max(190, 30 + 7 * max(len(name) for name, _ in entries))  # full names
    for i, (name, fill) in enumerate(entries):
        lx, ly = pad + (i % 4) * column, legend_y + 14 + (i // 4) * 24
        legend.append(f'<rect x="{lx}" y="{ly}" width="16" height="16" fill="{fill}" '
                      f'stroke="#34495e"/><text x="{lx + 22}" y="{ly + 13}" class="legend">'
                      f'{escape(name)}</text>')
    height = legend_y + 24 + (len(entries) + 3) // 4 * 24 + pad
    width = max(width + pad, 4 * column + 2 * pad)
    style = ("<style>text{font-family:sans-serif} .group{font-size:15px;font-weight:bold} "
             ".domain{font-size:12px;fill:#2c3e50} .slot{font-size:10px;text-anchor:middle;"
             "fill:#2c3e50} .job{font-size:10px;text-anchor:middle;fill:#111} "
             ".legend{font-size:12px}</style>")
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}">{style}'
            f'<rect width="100%" height="100%" fill="#fbfcfc"/>{"".join(rows)}'
            f'{"".join(legend)}</svg>\n')
