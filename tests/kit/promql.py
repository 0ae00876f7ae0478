"""Check a PromQL query against the metrics the code exports.

Queries are parsed by ``promql-parser`` (a port of Prometheus' own parser), so a
syntax error fails too. On the syntax tree we check: every selected series is
exported; every label a selector, ``by``/``without`` or ``on``/``ignoring``
names exists on the metrics involved; ``rate``-like functions never take a
gauge; ``histogram_quantile`` takes a histogram's buckets; route labels name a
real gateway route; worker states are ones the registry defines, and a label
the code only ever fills with literals (a webhook delivery's ``outcome``) is
compared (``=``, ``!=``) with one of those.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import promql_parser as pp

from sluice.registry import WORKER_STATES
from tests.kit.code_facts import Metric, literal_label_values

# Label values the code defines, so a query cannot ask for a state no worker has.
KNOWN_VALUES = {"state": set(WORKER_STATES)}
# Grafana's range variables, replaced by a duration so the query parses.
GRAFANA_RANGES = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}
RANGE_FUNCTIONS = {"rate", "irate", "increase", "delta", "deriv"}
COUNTER_ONLY = {"rate", "irate", "increase"}


@dataclass
class Query:
    selectors: list[tuple[str, list[tuple[str, str]]]] = field(default_factory=list)
    # (series, label, value) of every = and != matcher (regex matchers are not compared)
    exact: list[tuple[str, str, str]] = field(default_factory=list)
    grouping_labels: set[str] = field(default_factory=set)
    range_args: list[tuple[str, str]] = field(default_factory=list)  # (function, series)
    quantile_args: list[str] = field(default_factory=list)


def _selector_names(node: Any) -> list[str]:
    names: list[str] = []

    def visit(n: Any) -> None:
        if isinstance(n, pp.VectorSelector) and n.name:
            names.append(n.name)

    pp.walk(node, visit)
    return names


def read(expr: str) -> Query:
    """The parts of ``expr`` the checks need; raises ValueError on a syntax error."""
    for var, duration in GRAFANA_RANGES.items():
        expr = expr.replace(var, duration)
    q = Query()

    def visit(n: Any) -> None:
        if isinstance(n, pp.VectorSelector) and n.name:
            pairs = [(m.name, m.value) for m in n.matchers.matchers if m.name != "__name__"]
            q.selectors.append((n.name, pairs))
            q.exact += [
                (n.name, m.name, m.value)
                for m in n.matchers.matchers
                if m.name != "__name__" and m.op in (pp.MatchOp.Equal, pp.MatchOp.NotEqual)
            ]
        elif isinstance(n, pp.AggregateExpr) and n.modifier is not None:
            q.grouping_labels.update(n.modifier.labels)
        elif isinstance(n, pp.BinaryExpr) and n.modifier is not None:
            if n.modifier.matching is not None:
                q.grouping_labels.update(n.modifier.matching.labels)
            q.grouping_labels.update(n.modifier.group_labels or [])
        elif isinstance(n, pp.Call) and n.func.name in RANGE_FUNCTIONS:
            q.range_args += [(n.func.name, s) for s in _selector_names(n.args[0])]
        elif isinstance(n, pp.Call) and n.func.name == "histogram_quantile":
            q.quantile_args += _selector_names(n.args[1])

    pp.walk(pp.parse(expr), visit)
    return q


def metric_names(expr: str) -> set[str]:
    """Series names an expression selects."""
    return {name for name, _ in read(expr).selectors}


def problems(expr: str, series: dict[str, Metric], routes: frozenset[str]) -> list[str]:
    """What is wrong with ``expr`` given ``series`` (sample name -> family)."""
    try:
        q = read(expr)
    except ValueError as e:
        return [f"does not parse: {e}"]
    names = {name for name, _ in q.selectors}
    out = [] if names else ["selects no metric"]
    out += [f"{n}: not exported by the code" for n in sorted(names - set(series))]
    known = [series[n] for n in names if n in series]
    labels = set().union(*(m.labels for m in known)) | {"le"}
    for name, pairs in q.selectors:
        for label, value in pairs:
            if name in series and label not in series[name].labels | {"le"}:
                out.append(f"{name} has no label {label!r}")
            if label == "route" and value not in routes:
                out.append(f"route {value!r} is not a gateway route")
            if label in KNOWN_VALUES and value not in KNOWN_VALUES[label]:
                out.append(f"{label}={value!r}: not one of {sorted(KNOWN_VALUES[label])}")
    literal = literal_label_values()
    for name, label, value in q.exact:
        allowed = literal.get((series[name].name, label)) if name in series else None
        if allowed is not None and value not in allowed:
            out.append(f"{name}{{{label}={value!r}}}: the code only sets {sorted(allowed)}")
    for label in sorted(q.grouping_labels - labels):
        out.append(f"grouping label {label!r}: none of {sorted(names)} has it")
    return out + _type_problems(q, series)


def _type_problems(q: Query, series: dict[str, Metric]) -> list[str]:
    """rate() over a gauge, histogram_quantile() over something not a histogram's buckets."""
    out = []
    for fn, name in q.range_args:
        fam = series.get(name)
        if fam is not None and fn in COUNTER_ONLY and fam.type == "gauge":
            out.append(f"{fn}() over gauge {name}")
    for name in q.quantile_args:
        fam = series.get(name)
        if fam is not None and (fam.type != "histogram" or not name.endswith("_bucket")):
            out.append(f"histogram_quantile over {name}, not a histogram's buckets")
    return out
