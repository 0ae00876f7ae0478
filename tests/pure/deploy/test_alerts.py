"""The alerting rules are well formed and name only metrics (and worker states)
the code exports."""

from __future__ import annotations

from typing import Any

import promql_parser as pp

from notifier.loop import NotifierMetrics
from tests.kit.code_facts import DEPLOY, gateway_routes, sample_names
from tests.kit.deploy import load_yaml
from tests.kit.promql import metric_names, problems, read

RULES = DEPLOY / "prometheus" / "alerts.yml"


def _rules() -> list[dict[str, Any]]:
    return [r for g in load_yaml(RULES)["groups"] for r in g["rules"]]


def test_rules_name_exported_metrics() -> None:
    series, routes = sample_names(), gateway_routes()
    rules = _rules()
    assert len(rules) >= 6
    bad = [f"{r['alert']}: {p}" for r in rules for p in problems(r["expr"], series, routes)]
    assert bad == []


def test_rules_are_well_formed() -> None:
    names = [r["alert"] for r in _rules()]
    assert len(names) == len(set(names))
    for r in _rules():
        assert set(r) <= {"alert", "expr", "for", "labels", "annotations"}, r["alert"]
        assert r["labels"]["severity"] in ("warning", "critical")
        assert r["annotations"]["summary"]


def test_the_checker_knows_worker_states() -> None:
    series, routes = sample_names(), gateway_routes()
    assert problems('max(sluice_workers{state="quarantined"})', series, routes) == []
    assert problems('max(sluice_workers{state="sleeping"})', series, routes)


def test_the_checker_knows_delivery_outcomes() -> None:
    """Read from the notifier's code: a webhook delivery ends delivered or dead."""
    series, routes = sample_names(), gateway_routes()
    dead = 'sum(increase(sluice_webhook_deliveries_total{outcome="dead"}[15m]))'
    assert problems(dead, series, routes) == []
    assert problems(dead.replace('"dead"', '"failed"'), series, routes)
    assert problems(dead.replace('outcome="dead"', 'outcome!="given_up"'), series, routes)


def test_webhook_notifier_is_watched() -> None:
    """The notifier's own series carry its alerts: none at all (no notifier runs),
    a backlog nobody claims, deliveries given up, and failing attempts."""
    families = {f.name for f in NotifierMetrics().registry.collect()}
    series = sample_names()
    ours = {n for n, m in series.items() if m.name in families}
    rules = [r for r in _rules() if metric_names(r["expr"]) & ours]
    assert len(rules) >= 4
    absent = [
        r
        for r in rules
        if isinstance(e := pp.parse(r["expr"]), pp.Call) and e.func.name == "absent"
    ]
    assert absent, "no rule fires when no notifier exports anything"
    # absent() without a `for` would fire on every Prometheus restart.
    assert all(r.get("for") for r in absent)
    selected = set().union(*(metric_names(r["expr"]) for r in rules))
    assert {"sluice_webhook_oldest_due_seconds", "sluice_webhook_attempts_total"} <= selected
    exact = [m for r in rules for m in read(r["expr"]).exact]
    assert ("sluice_webhook_deliveries_total", "outcome", "dead") in exact


def test_compose_prometheus_loads_the_rules() -> None:
    prom = load_yaml(DEPLOY / "prometheus" / "prometheus.yml")
    compose = load_yaml(DEPLOY / "compose.yaml")
    mounts = dict(v.split(":")[:2] for v in compose["services"]["prometheus"]["volumes"])
    (rule_file,) = prom["rule_files"]
    src = next(s for s, t in mounts.items() if t == rule_file)
    assert (DEPLOY / src).resolve() == RULES.resolve()
