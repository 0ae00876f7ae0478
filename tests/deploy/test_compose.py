"""deploy/compose.yaml and the Prometheus scrape configs agree with the code."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

import pytest

from sluice.config import REDIS_URL_ENV, SluiceConfig, load_config
from tests.deploy import commands as cmd
from tests.deploy.code_facts import DEPLOY, env_vars_read
from tests.deploy.conftest import load_yaml

COMPOSE = DEPLOY / "compose.yaml"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return dict(load_yaml(COMPOSE))


def _service_config(svc: dict[str, Any]) -> SluiceConfig:
    """The config file a service reads: its --config path, through its bind mount."""
    path = cmd.config_path(svc["command"])
    for vol in svc["volumes"]:
        src, target = vol.split(":")[:2]
        if PurePosixPath(target) == path.parent:
            return load_config(COMPOSE.parent / src / path.name)
    raise AssertionError(f"no volume provides {path.parent}")


def _sluice_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n: s for n, s in compose["services"].items()
            if str(s.get("image", "")).split(":")[0] in ("sluice", "sluice-worker")}  # fmt: skip


def test_services_and_commands(compose: dict[str, Any]) -> None:
    services = _sluice_services(compose)
    assert {s["command"][0] for s in services.values()} == set(cmd.SUBCOMMANDS)
    for name, svc in services.items():
        cfg = _service_config(svc)
        assert cmd.command_problems(svc["command"], cfg) == [], name
        # A directory mount: a single-file bind mount never shows an edited file.
        target = next(v.split(":")[1] for v in svc["volumes"] if v.split(":")[1] == "/etc/sluice")
        assert PurePosixPath(target) == cmd.config_path(svc["command"]).parent


def test_redis_keeps_jobs(compose: dict[str, Any]) -> None:
    redis = compose["services"]["redis"]
    args = redis["command"]
    assert cmd.flag(args, "--appendonly") == "yes"
    assert cmd.flag(args, "--maxmemory-policy") == "noeviction"
    assert any(v.endswith(":/data") for v in redis["volumes"])
    assert "redis-data" in compose["volumes"]


def test_env_vars_are_read_by_the_code(compose: dict[str, Any]) -> None:
    read = env_vars_read()
    for name, svc in _sluice_services(compose).items():
        env = svc.get("environment", {})
        assert REDIS_URL_ENV in env, name
        assert set(env) <= read, name
        assert env[REDIS_URL_ENV].startswith("redis://redis:")
        assert svc["depends_on"]["redis"]["condition"] == "service_healthy"


def test_ports_gpu_and_drain(compose: dict[str, Any]) -> None:
    services = _sluice_services(compose)
    gw = next(s for s in services.values() if s["command"][0] == "gateway")
    cfg = _service_config(gw)
    published = [p.split(":")[-1] for p in gw["ports"]]
    assert published == [str(cmd.gateway_port(gw["command"], cfg))]
    worker = next(s for s in services.values() if s["command"][0] == "worker")
    wcfg = _service_config(worker)
    (device,) = worker["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]
    model = wcfg.model(cmd.flag(worker["command"], "--model") or "")
    grace_s = int(worker["stop_grace_period"].rstrip("s"))
    assert grace_s >= 2 * model.batching.lease_s


def test_prometheus_targets_are_the_configured_ports(compose: dict[str, Any]) -> None:
    services = _sluice_services(compose)
    expected = {n: cmd.served_port(s["command"], _service_config(s)) for n, s in services.items()}
    prom = load_yaml(DEPLOY / "prometheus" / "prometheus.yml")
    targets = {t for job in prom["scrape_configs"] for sc in job["static_configs"]
               for t in sc["targets"]}  # fmt: skip
    assert targets == {f"{n}:{p}" for n, p in expected.items()}
    auto = next(s for s in services.values() if s["command"][0] == "autoscaler")
    assert auto["healthcheck"]["test"][-1].endswith(f":{expected['autoscaler']}/metrics")


def test_kubernetes_scrape_job_reads_the_annotations() -> None:
    job = load_yaml(DEPLOY / "prometheus" / "kubernetes-pods.yml")["scrape_configs"][0]
    sources = {s for r in job["relabel_configs"] for s in r["source_labels"]}
    for key in ("scrape", "port", "path"):
        assert f"__meta_kubernetes_pod_annotation_prometheus_io_{key}" in sources


def test_grafana_provisioning_points_at_the_dashboard(compose: dict[str, Any]) -> None:
    grafana = compose["services"]["grafana"]
    mounts = dict(v.split(":")[:2] for v in grafana["volumes"])
    provider = load_yaml(DEPLOY / "grafana" / "provisioning" / "dashboards" / "sluice.yaml")
    path = provider["providers"][0]["options"]["path"]
    src = next(s for s, t in mounts.items() if t == path)
    assert (COMPOSE.parent / src / "sluice.json").is_file()
