"""The alerting rules are well formed and name only metrics (and worker states)
the code exports."""

from __future__ import annotations

from typing import Any

from tests.deploy.code_facts import DEPLOY, gateway_routes, sample_names
from tests.deploy.conftest import load_yaml
from tests.deploy.promql import problems

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


def test_compose_prometheus_loads_the_rules() -> None:
    prom = load_yaml(DEPLOY / "prometheus" / "prometheus.yml")
    compose = load_yaml(DEPLOY / "compose.yaml")
    mounts = dict(v.split(":")[:2] for v in compose["services"]["prometheus"]["volumes"])
    (rule_file,) = prom["rule_files"]
    src = next(s for s, t in mounts.items() if t == rule_file)
    assert (DEPLOY / src).resolve() == RULES.resolve()
