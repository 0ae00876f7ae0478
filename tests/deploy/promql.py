"""Just enough PromQL reading to check a query against the metrics the code exports.

Not a parser: it finds metric selectors, their label matchers, the labels of
``by``/``without`` clauses and the series under ``rate``/``increase``, which is
all a name check needs. Every problem comes back as one readable line.
"""

from __future__ import annotations

import re

from sluice.registry import WORKER_STATES
from tests.deploy.code_facts import Metric

# Label values the code defines, so a query cannot ask for a state no worker has.
KNOWN_VALUES = {"state": set(WORKER_STATES)}

IDENT = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
            "unless", "offset", "inf", "nan"}  # fmt: skip
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_SELECTOR = re.compile(rf"({IDENT})\s*\{{([^}}]*)\}}")  # run on string-free text only
_MATCHER = re.compile(rf'({IDENT})\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)")
_RANGE_FN = re.compile(rf"\b(rate|irate|increase)\s*\(\s*({IDENT})")
_HIST_Q = re.compile(rf"histogram_quantile\s*\(\s*[0-9.]+\s*,.*?\b({IDENT}_bucket)\b")


def _masked(expr: str) -> tuple[str, list[str]]:
    """``expr`` with each string literal replaced by ``"<i>"`` (braces inside strings,
    such as a route template's ``{model}``, would fool the patterns below)."""
    strings: list[str] = []

    def keep(m: re.Match[str]) -> str:
        strings.append(m.group(0)[1:-1])
        return f'"{len(strings) - 1}"'

    return _STRING.sub(keep, expr), strings


def _selectors(expr: str) -> list[tuple[str, list[tuple[str, str]]]]:
    """(metric, [(label, value), ...]) for each ``metric{...}`` selector."""
    text, strings = _masked(expr)
    out = []
    for m in _SELECTOR.finditer(text):
        pairs = [(label, strings[int(i)]) for label, _, i in _MATCHER.findall(m.group(2))]
        out.append((m.group(1), pairs))
    return out


def metric_names(expr: str) -> set[str]:
    """Series names an expression selects."""
    text, _ = _masked(expr)
    text = _GROUPING.sub(" ", text)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = _STRING.sub(" ", text)
    names = set()
    for m in re.finditer(rf"(?<![\w$]){IDENT}", text):
        rest = text[m.end() :].lstrip()
        word = m.group(0)
        if rest.startswith("(") or word.lower() in KEYWORDS or word[0].isdigit():
            continue
        names.add(word)
    return names


def problems(expr: str, series: dict[str, Metric], routes: frozenset[str]) -> list[str]:
    """What is wrong with ``expr`` given ``series`` (sample name -> family)."""
    out: list[str] = []
    names = metric_names(expr)
    if not names:
        out.append("selects no metric")
    unknown = sorted(n for n in names if n not in series)
    out += [f"{n}: not exported by the code" for n in unknown]
    known = [series[n] for n in names if n in series]
    labels = set().union(*(m.labels for m in known)) | {"le"} if known else {"le"}
    for name, pairs in _selectors(expr):
        for label, value in pairs:
            if name in series and label not in series[name].labels | {"le"}:
                out.append(f"{name} has no label {label!r}")
            if label == "route" and value not in routes:
                out.append(f"route {value!r} is not a gateway route")
            if label in KNOWN_VALUES and value not in KNOWN_VALUES[label]:
                out.append(f"{label}={value!r}: not one of {sorted(KNOWN_VALUES[label])}")
    for group in _GROUPING.findall(expr):
        for label in (x.strip() for x in group.split(",") if x.strip()):
            if label not in labels:
                out.append(f"by/without label {label!r}: none of {sorted(names)} has it")
    return out + _type_problems(expr, series)


def _type_problems(expr: str, series: dict[str, Metric]) -> list[str]:
    """rate() over a gauge, histogram_quantile() over something not a histogram."""
    out = []
    for fn, name in _RANGE_FN.findall(expr):
        fam = series.get(name)
        if fam is not None and fam.type == "gauge":
            out.append(f"{fn}() over gauge {name}")
    for name in _HIST_Q.findall(expr):
        fam = series.get(name)
        if fam is not None and fam.type != "histogram":
            out.append(f"histogram_quantile over {name}, a {fam.type}")
    return out
