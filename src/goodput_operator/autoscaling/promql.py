"""What a tenant's PromQL may make Prometheus read, bounded before the operator sends it.

A `PromQL` scaling metric is free text from a tenant that the operator sends, every few
seconds, to a Prometheus many teams share. Its length is bounded by the schema (4096
characters); its *cost* at Prometheus is bounded here (TENANCY.md, rule 5): how far back
it reads (every range selector, subquery range and offset, added up, so that nesting
cannot multiply its way past the bound) and how many times a subquery evaluates its inner
query. A query the bound cannot read (a duration written as an expression, a bracket that
does not close) is refused, never guessed at. The operator also sends Prometheus its own
deadline with every query (`prometheus.instant`), so a query inside the bounds still stops
being evaluated when the operator stops waiting for it.

Pure: a lexer that skips strings and comments, and a duration reader; no PromQL parser.
"""

from __future__ import annotations

import re

MAX_LOOKBACK_SECONDS = 3600.0
"""All of a query's ranges and offsets together: an hour of samples (the default queries
read one minute)."""
MAX_SUBQUERY_STEPS = 3600
"""Evaluations of the inner queries of all of a query's subqueries together (a
`[1h:1s]` subquery evaluates its inner query 3,600 times)."""
DEFAULT_SUBQUERY_STEP = 60.0
"""A subquery without a step uses Prometheus's global evaluation interval: 1 m unless the
admin changed it."""

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0,
          "y": 31536000.0}
_DURATION = re.compile(r"(?:\d+(?:ms|s|m|h|d|w|y))+")
_PART = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_OFFSET = re.compile(r"\boffset\s+(-?)\s*([0-9][0-9a-z.]*)", re.IGNORECASE)


class PromQLTooCostly(ValueError):
    """The query reads more than the operator lets one endpoint's metric read."""


def seconds(text: str) -> float:
    """A PromQL duration (`1h30m`, `500ms`, or a number of seconds) in seconds."""
    text = text.strip()
    if _NUMBER.fullmatch(text):
        return float(text)
    if not _DURATION.fullmatch(text):
        raise PromQLTooCostly(f"{text!r} is not a duration the operator can bound "
                              "(write it as e.g. 5m or 1h30m)")
    return sum(int(count) * _UNITS[unit] for count, unit in _PART.findall(text))


def code(query: str) -> str:
    """QUERY with its string literals and comments blanked out (their length kept), so
    that a `[` or `offset` inside a label value is not read as PromQL."""
    out: list[str] = []
    index, end = 0, len(query)
    while index < end:
        char = query[index]
        if char in "\"'`":
            close = index + 1
            while close < end and query[close] != char:
                close += 2 if char != "`" and query[close] == "\\" else 1
            out.append(" " * (min(close, end - 1) - index + 1))
            index = close + 1
        elif char == "#":
            newline = query.find("\n", index)
            stop = end if newline < 0 else newline
            out.append(" " * (stop - index))
            index = stop
        else:
            out.append(char)
            index += 1
    return "".join(out)


def _brackets(text: str) -> list[str]:
    """The insides of TEXT's `[...]` (range selectors and subqueries)."""
    found, start = [], text.find("[")
    while start >= 0:
        close = text.find("]", start)
        if close < 0:
            raise PromQLTooCostly("a '[' without its ']'")
        found.append(text[start + 1:close])
        start = text.find("[", close)
    return found


def check(query: str) -> None:
    """Raise PromQLTooCostly (its message names the bound) when QUERY may read more than
    MAX_LOOKBACK_SECONDS back or evaluate more than MAX_SUBQUERY_STEPS subquery steps."""
    text = code(query)
    lookback, steps = 0.0, 1.0
    for inside in _brackets(text):
        window, colon, step = inside.partition(":")
        lookback += seconds(window)
        if colon:
            every = seconds(step) if step.strip() else DEFAULT_SUBQUERY_STEP
            if every <= 0:
                raise PromQLTooCostly(f"subquery [{inside}] has no step")
            steps *= seconds(window) / every
    for _sign, duration in _OFFSET.findall(text):
        lookback += seconds(duration)
    if lookback > MAX_LOOKBACK_SECONDS:
        raise PromQLTooCostly(
            f"reads {lookback:g} s back in all (ranges and offsets added up); the "
            f"operator allows {MAX_LOOKBACK_SECONDS:g} s")
    if steps > MAX_SUBQUERY_STEPS:
        raise PromQLTooCostly(
            f"its subqueries evaluate {steps:g} steps; the operator allows "
            f"{MAX_SUBQUERY_STEPS}")
