"""The Grafana dashboard and the KEDA query name only metrics the code exports."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.kit.code_facts import DEPLOY, Metric, gateway_routes, sample_names
from tests.kit.deploy import find
from tests.kit.promql import metric_names, problems

DASHBOARD = DEPLOY / "grafana" / "dashboards" / "sluice.json"


def _dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())


def _exprs(dash: dict[str, Any]) -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in dash["panels"] for t in p.get("targets", [])]


@pytest.fixture(scope="module")
def series() -> dict[str, Metric]:
    s = sample_names()
    # The code must export something, or every check below passes vacuously.
    assert {m.type for m in s.values()} >= {"counter", "gauge", "histogram"}
    return s


def test_dashboard_queries_name_exported_metrics(series: dict[str, Metric]) -> None:
    dash = _dashboard()
    exprs = _exprs(dash)
    assert len(exprs) >= 12
    bad = [
        f"{title}: {expr}: {p}"
        for title, expr in exprs
        for p in problems(expr, series, gateway_routes())
    ]
    assert bad == []


def test_model_variable_uses_an_exported_label(series: dict[str, Metric]) -> None:
    var = next(v for v in _dashboard()["templating"]["list"] if v["name"] == "model")
    query = var["query"]["query"]  # label_values(METRIC, LABEL)
    metric, label = (x.strip() for x in query.removeprefix("label_values(")[:-1].split(","))
    assert metric in series and label in series[metric].labels


def test_panels_are_well_formed() -> None:
    dash = _dashboard()
    assert dash["uid"] and dash["schemaVersion"] >= 36
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for p in dash["panels"]:
        assert p["datasource"]["uid"] == "${datasource}", p["title"]
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, p["title"]


def test_the_checker_catches_a_wrong_name(series: dict[str, Metric]) -> None:
    """Guards the guard: a misspelt metric, a gauge under rate(), a missing label."""
    routes = gateway_routes()
    gauge = next(n for n, m in series.items() if m.type == "gauge")
    assert problems("sum(rate(sluice_no_such_metric_total[5m]))", series, routes)
    assert problems(f"rate({gauge}[5m])", series, routes)
    assert problems(f"sum by (no_such_label) ({gauge})", series, routes)
    hist = next(m.name for m in series.values() if "route" in m.labels and m.type == "histogram")
    assert problems(f'rate({hist}_bucket{{route="/v1/no/such/route"}}[5m])', series, routes)
    assert metric_names('max by (bucket) (sluice_queue_cost{model="m"})') == {"sluice_queue_cost"}
    assert problems("sum(rate(sluice_worker_jobs_total[5m])", series, routes)  # unbalanced
    counter = next(n for n, m in series.items() if m.type == "counter" and n.endswith("_total"))
    assert problems(f"histogram_quantile(0.9, rate({counter}[5m]))", series, routes)


def test_keda_query_names_exported_metrics(
    rendered: dict[str, list[Any]], series: dict[str, Metric]
) -> None:
    (so,) = find(rendered["keda"], "ScaledObject")
    queries = [t["metadata"]["query"] for t in so["spec"]["triggers"] if t["type"] == "prometheus"]
    assert queries
    for q in queries:
        assert problems(q, series, gateway_routes()) == []
