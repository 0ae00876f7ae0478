"""deploy/compose.yaml and the Prometheus scrape configs agree with the code."""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

import pytest

from sluice.config import REDIS_URL_ENV, BulkConfig, SluiceConfig, WebhooksConfig, load_config
from tests.kit import deploy_commands as cmd
from tests.kit.code_facts import DEPLOY, env_vars_read
from tests.kit.deploy import load_yaml

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
    return {
        n: s
        for n, s in compose["services"].items()
        if str(s.get("image", "")).split(":")[0] in ("sluice", "sluice-worker")
    }


def test_services_and_commands(compose: dict[str, Any]) -> None:
    services = _sluice_services(compose)
    assert {cmd.role(s["command"]) for s in services.values()} == set(cmd.SUBCOMMANDS)
    for name, svc in services.items():
        cfg = _service_config(svc)
        assert cmd.command_problems(svc["command"], cfg) == [], name
        # A directory mount: a single-file bind mount never shows an edited file.
        target = next(v.split(":")[1] for v in svc["volumes"] if v.split(":")[1] == "/etc/sluice")
        assert PurePosixPath(target) == cmd.config_path(svc["command"]).parent


def _by_role(services: dict[str, dict[str, Any]], role: tuple[str, ...]) -> dict[str, Any]:
    # The first: a second GPU's worker is a copy of the service (docs/deploy.md).
    return next(s for s in services.values() if cmd.role(s["command"]) == role)


def _seconds(duration: str) -> int:
    """A compose duration of whole seconds or minutes (``90s``, ``2m``)."""
    units = {"s": 1, "m": 60}
    return int(duration[:-1]) * units[duration[-1]]


def test_bulk_worker_runs_slim_and_drains_its_slice(compose: dict[str, Any]) -> None:
    services = _sluice_services(compose)
    bulk, gw = _by_role(services, cmd.BULK_WORKER), _by_role(services, ("gateway",))
    assert bulk["image"].split(":")[0] == "sluice", "the bulk worker needs no torch"
    assert bulk["image"] == gw["image"], "the slim image the gateway service builds"
    cfg = _service_config(bulk)
    assert cmd.config_path(bulk["command"]) == cmd.config_path(gw["command"])
    # The gateway's Redis (it enqueues the RQ jobs there); not its webhook secret.
    assert bulk["environment"][REDIS_URL_ENV] == gw["environment"][REDIS_URL_ENV]
    # A burst worker exits once the queue is empty: restart: would loop it.
    assert "--burst" not in bulk["command"]
    grace_s = _seconds(bulk["stop_grace_period"])
    assert grace_s > cfg.bulk.slice_s and grace_s > BulkConfig().slice_s
    assert "ports" not in bulk


def test_slim_services_do_not_inherit_the_gateway_healthcheck(compose: dict[str, Any]) -> None:
    """The slim image's HEALTHCHECK asks the gateway's port: any other command
    must bring its own check or turn it off, or it is reported unhealthy forever."""
    for name, svc in _sluice_services(compose).items():
        if svc["image"].split(":")[0] == "sluice" and cmd.role(svc["command"]) != ("gateway",):
            check = svc.get("healthcheck", {})
            assert check.get("disable") is True or "test" in check, name


def test_notifier_runs_slim_scraped_and_stops_in_time(compose: dict[str, Any]) -> None:
    """``sluice notifier``: the slim image, the gateway's Redis and config, a health
    check on its metrics port, and a stop grace above its in-flight wait."""
    services = _sluice_services(compose)
    notifier, gw = _by_role(services, cmd.NOTIFIER), _by_role(services, ("gateway",))
    assert notifier["image"] == gw["image"], "the slim image the gateway service builds"
    assert cmd.config_path(notifier["command"]) == cmd.config_path(gw["command"])
    assert notifier["environment"][REDIS_URL_ENV] == gw["environment"][REDIS_URL_ENV]
    cfg = _service_config(notifier)
    port = cmd.notifier_metrics_port(notifier["command"], cfg)
    assert port > 0, "webhooks.metrics_port: Prometheus and the health check read it"
    assert notifier["healthcheck"]["test"][1:] == [
        "sluice-probe",
        "url",
        f"http://127.0.0.1:{port}/metrics",
    ]
    # On SIGTERM it waits up to timeout_s + 1 s for the attempts in flight.
    grace_s = _seconds(notifier["stop_grace_period"])
    assert grace_s > cfg.webhooks.timeout_s + 1 and grace_s > WebhooksConfig().timeout_s + 1
    assert "ports" not in notifier, "nothing inbound: Prometheus reaches it on the network"


def test_webhook_secret_reaches_gateway_and_notifier_only(compose: dict[str, Any]) -> None:
    """The gateway refuses webhooks when it sees no secret, the notifier signs with
    it; nothing else needs it. Passed through from the host and optional (empty)."""
    services = _sluice_services(compose)
    with_secret = set()
    for name, svc in services.items():
        cfg = _service_config(svc)
        env_name = cfg.webhooks.secret_env
        assert env_name and cfg.webhooks.secret_file is None
        if env_name in svc["environment"]:
            assert svc["environment"][env_name] == f"${{{env_name}:-}}", name
            with_secret.add(cmd.role(svc["command"]))
    assert with_secret == {("gateway",), cmd.NOTIFIER}


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
    gw = _by_role(services, ("gateway",))
    cfg = _service_config(gw)
    published = [p.split(":")[-1] for p in gw["ports"]]
    assert published == [str(cmd.gateway_port(gw["command"], cfg))]
    worker = _by_role(services, ("worker",))
    wcfg = _service_config(worker)
    (device,) = worker["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]
    model = wcfg.model(cmd.flag(worker["command"], "--model") or "")
    grace_s = _seconds(worker["stop_grace_period"])
    assert grace_s >= 2 * model.batching.lease_s


def test_prometheus_targets_are_the_configured_ports(compose: dict[str, Any]) -> None:
    services = _sluice_services(compose)
    ports = {n: cmd.served_port(s["command"], _service_config(s)) for n, s in services.items()}
    expected = {n: p for n, p in ports.items() if p is not None}
    prom = load_yaml(DEPLOY / "prometheus" / "prometheus.yml")
    targets = {
        t for job in prom["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]
    }
    assert targets == {f"{n}:{p}" for n, p in expected.items()}
    auto = _by_role(services, ("autoscaler",))
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
