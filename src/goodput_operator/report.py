"""`goodput report`: where every accelerator-hour of each UltraServerGroup went, from its
status.accounting (health/accounting.py), as a table, JSON or an SVG chart; with the
group's spec.pricePerAcceleratorHour, what each state, namespace and job cost.

Pure: it reads the objects as the API returns them and returns text.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

from goodput_operator.health.accounting import CAUSES
from goodput_operator.health.badput import IDLE, attributed

Obj = Mapping[str, Any]
ROWS = ["productive", "serving", "standby", *(f"badput/{c}" for c in CAUSES), "idle",
        "spare", "quarantined", "unavailable", "other", "unobserved"]  # STATES, CAUSES
COLORS = {"productive": "#1b7f3b", "serving": "#27ae60", "standby": "#85c1e9",
          "idle": "#d5d8dc", "spare": "#a9cce3", "quarantined": "#c0392b",
          "unavailable": "#7f8c8d", "other": "#f5cba7", "unobserved": "#ffffff",
          "badput/launch": "#f4d03f", "badput/detection": "#e67e22",
          "badput/replacement": "#d35400", "badput/restart": "#af601a",
          "badput/lostWork": "#922b21", "badput/checkpoint": "#b7950b"}


def rows(account: Obj) -> dict[str, float]:
    """ACCOUNT's accelerator-seconds by row (a state, or badput/<cause>)."""
    badput = account.get("badput") or {}
    return {row: float(badput.get(row[7:], 0) if row.startswith("badput/")
                       else account.get(row, 0)) for row in ROWS}


def summary(group: Obj, jobs: Sequence[Obj], now: float | None = None) -> dict[str, Any]:
    """One group's report: its rows, their sum against the whole, each namespace's, and
    with a price the costs, the group's jobs' included."""
    now = time.time() if now is None else now
    account = (group.get("status") or {}).get("accounting") or {}
    price = (group.get("spec") or {}).get("pricePerAcceleratorHour")
    found = rows(account)
    name = group["metadata"]["name"]
    result: dict[str, Any] = {
        "group": name, "since": account.get("since"), "asOf": account.get("asOf"),
        "acceleratorSeconds": float(account.get("acceleratorSeconds") or 0),
        "accounted": round(sum(found.values()), 3), "rows": found,
        "namespaces": list(account.get("namespaces") or []),
        "jobs": [job_held(j, now) for j in jobs
                 if (j.get("spec") or {}).get("ultraServerGroup") == name],
        "pricePerAcceleratorHour": price}
    if price is not None:
        result["cost"] = {row: cost(s, price) for row, s in found.items()}
        for entry in (*result["namespaces"], *result["jobs"]):
            entry["cost"] = cost(_held(entry), price)
    return result


def _held(entry: Obj) -> float:
    return float(entry.get("total", entry.get("acceleratorSeconds", 0)))


def cost(seconds: float, price: float) -> float:
    return round(seconds / 3600 * price, 2)


def job_held(job: Obj, now: float) -> dict[str, Any]:
    """What a TrainingJob held: its books' seconds while it held accelerators (not its
    queueing or suspension) times the accelerators it asks for."""
    spec, status = job.get("spec") or {}, job.get("status") or {}
    chips = int(spec.get("workers") or 0) * int(spec.get("acceleratorsPerWorker") or 0)
    spent = attributed(status, now)  # type: ignore[arg-type]
    held = sum(v for bucket, v in spent.items() if bucket not in IDLE)
    meta = job["metadata"]
    return {"job": f"{meta.get('namespace')}/{meta.get('name')}", "accelerators": chips,
            "acceleratorSeconds": round(held * chips, 3),
            "goodput": (status.get("goodput") or {}).get("ratio")}


def hours(seconds: float) -> str:
    """Accelerator-SECONDS as hours, with the digits that say something at any size (a
    demo's minutes and a fleet's months in one table)."""
    value = seconds / 3600
    return f"{value:,.0f}" if value >= 100 else f"{value:.2f}" if value >= 1 else \
        f"{value:.4f}"


def table(report: Mapping[str, Any]) -> str:
    """One group's report as text."""
    whole, price = report["acceleratorSeconds"], report["pricePerAcceleratorHour"]
    share = report["accounted"] / whole * 100 if whole else 100.0
    lines = [f"UltraServerGroup {report['group']}: {hours(whole)} accelerator-hours from "
             f"{report['since'] or '-'} to {report['asOf'] or '-'}; the states below "
             f"account for {share:.1f}% of them"
             + (f"; price {price}/accelerator-hour" if price is not None else "")]
    heading = f"  {'STATE':<22}{'ACC-HOURS':>12}{'SHARE':>8}" + (
        f"{'COST':>12}" if price is not None else "")
    lines.append(heading)
    for row, seconds in report["rows"].items():
        if seconds or not row.startswith("badput/"):
            lines.append(f"  {row:<22}{hours(seconds):>12}"
                         f"{(seconds / whole * 100 if whole else 0):>7.1f}%"
                         + (f"{report['cost'][row]:>12,.2f}" if price is not None else ""))
    if report["namespaces"]:
        lines.append(f"  {'NAMESPACE':<22}{'PRODUCTIVE':>12}{'SERVING':>10}{'STANDBY':>10}"
                     f"{'BADPUT':>10}{'TOTAL':>10}" + (f"{'COST':>12}" if price is not None
                                                         else ""))
        for entry in report["namespaces"]:
            lost = sum((entry.get("badput") or {}).values())
            lines.append(f"  {entry['namespace']:<22}{hours(entry.get('productive', 0)):>12}"
                         f"{hours(entry.get('serving', 0)):>10}"
                         f"{hours(entry.get('standby', 0)):>10}{hours(lost):>10}"
                         f"{hours(entry.get('total', 0)):>10}"
                         + (f"{entry['cost']:>12,.2f}" if price is not None else ""))
    if report["jobs"]:
        lines.append(f"  {'TRAININGJOB':<40}{'ACCELERATORS':>13}{'ACC-HOURS':>11}"
                     f"{'GOODPUT':>9}" + (f"{'COST':>12}" if price is not None else ""))
        for job in report["jobs"]:
            ratio = job["goodput"]
            lines.append(f"  {job['job']:<40}{job['accelerators']:>13}"
                         f"{hours(job['acceleratorSeconds']):>11}"
                         f"{(f'{ratio * 100:.1f}%' if ratio is not None else '-'):>9}"
                         + (f"{job['cost']:>12,.2f}" if price is not None else ""))
    return "\n".join(lines)


def as_json(reports: Sequence[Mapping[str, Any]]) -> str:
    return json.dumps({"groups": list(reports)}, indent=2)


BAR_W, BAR_H, LEFT, TOP, GAP = 520, 22, 150, 40, 14


def svg(reports: Sequence[Mapping[str, Any]]) -> str:
    """One stacked bar per group and per namespace in it: each state's share of the
    accelerator-hours, with a legend."""
    bars: list[tuple[str, dict[str, float]]] = []
    for report in reports:
        bars.append((f"{report['group']}", report["rows"]))
        for entry in report["namespaces"]:
            badput = entry.get("badput") or {}
            bars.append((f"  {entry['namespace']}", {
                "productive": entry.get("productive", 0), "serving": entry.get("serving", 0),
                "standby": entry.get("standby", 0),
                **{f"badput/{c}": float(badput.get(c, 0)) for c in CAUSES}}))
    used = [row for row in ROWS if any(values.get(row) for _, values in bars)]
    height = TOP + len(bars) * (BAR_H + GAP) + 20 * ((len(used) + 2) // 3) + 30
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{LEFT + BAR_W + 30}" '
           f'height="{height}" font-family="sans-serif" font-size="12">',
           '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="10" y="22" font-size="15">Where the accelerator-hours went (to '
           f'{escape(max((r["asOf"] or "" for r in reports), default=""))})</text>']
    y = TOP
    for label, values in bars:
        whole = sum(values.values()) or 1.0
        out.append(f'<text x="10" y="{y + 15}">{escape(label)}</text>')
        x = float(LEFT)
        for row in ROWS:
            width = values.get(row, 0.0) / whole * BAR_W
            if width > 0:
                out.append(f'<rect x="{x:.1f}" y="{y}" width="{width:.1f}" height="{BAR_H}" '
                           f'fill="{COLORS[row]}" stroke="#555" stroke-width="0.3">'
                           f'<title>{escape(row)}: {hours(values[row])} h</title></rect>')
                x += width
        out.append(f'<text x="{LEFT + BAR_W + 4}" y="{y + 15}">{hours(whole)} h</text>')
        y += BAR_H + GAP
    for i, row in enumerate(used):
        lx, ly = 10 + (i % 3) * 200, y + 10 + (i // 3) * 20
        out.append(f'<rect x="{lx}" y="{ly}" width="12" height="12" fill="{COLORS[row]}" '
                   f'stroke="#555" stroke-width="0.3"/><text x="{lx + 16}" y="{ly + 11}">'
                   f'{escape(row)}</text>')
    out.append("</svg>")
    return "\n".join(out)
