"""The Grafana dashboard's queries (templates/grafana/sglang-fleet.json), as PromQL that Prometheus itself accepts.

Grafana fills in its variables before a query leaves it; a test that sends a panel's query to Prometheus (or to
promtool) must do the same. panel_queries() lists every target of every panel, those inside a collapsed row
included; concrete() puts a value Prometheus accepts where Grafana would put the user's choice; metric_names()
says which metrics a query reads.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

# What each Grafana variable becomes: "All" for the dashboard's own variables (their allValue), and a window of
# a few scrapes (15 s apart by default, sglang_prometheus_scrape_interval) for the interval variables.
VALUES = {
    "model": ".*",
    "host": ".*",
    "__rate_interval": "1m",
    "__interval": "1m",
    "__range": "1h",
}
# $name, ${name} and ${name:format}: Grafana's three spellings of a variable.
_VARIABLE = re.compile(r"\$(?:\{(\w+)(?::\w+)?\}|(\w+))")

_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^}]*\}")
_RANGES = re.compile(r"\[[^\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
# A name not inside a number (1e3) nor after a dot (0.5): a metric, a function or a keyword.
_NAME = re.compile(r"(?<![\w.])[A-Za-z_:][\w:]*")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left",
             "group_right", "inf", "nan"}


def _panels(panels: list[dict]):
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))   # a collapsed row keeps its panels inside it


def panels(path: str | Path) -> list[dict]:
    """Every panel of the dashboard at ``path``, rows and the panels inside rows included."""
    return list(_panels(json.loads(Path(path).read_text(encoding="utf-8"))["panels"]))


def panel_queries(path: str | Path) -> list[tuple[str, str]]:
    """(panel title, PromQL expr) for every target of every panel of the dashboard at ``path``."""
    return [(panel["title"], target["expr"]) for panel in panels(path) for target in panel.get("targets", [])
            if target.get("expr")]


def concrete(expr: str) -> str:
    """``expr`` with Grafana's variables replaced by values Prometheus accepts; an unknown variable is an error,
    not a query sent with a '$' in it."""
    def value(found: re.Match) -> str:
        name = found.group(1) or found.group(2)
        if name not in VALUES:
            raise ValueError(f"unknown Grafana variable ${name} in {expr!r}")
        return VALUES[name]

    return _VARIABLE.sub(value, expr)


def metric_names(expr: str) -> set[str]:
    """The metrics ``expr`` reads: its names outside label matchers, strings, ranges and grouping clauses, less
    functions and aggregations (a name followed by '(') and PromQL's keywords."""
    text = _STRINGS.sub(" ", expr)
    text = _GROUPING.sub(" ", _RANGES.sub(" ", _MATCHERS.sub(" ", text)))
    return {found.group() for found in _NAME.finditer(text)
            if found.group().lower() not in _KEYWORDS and not text[found.end():].lstrip().startswith("(")}
