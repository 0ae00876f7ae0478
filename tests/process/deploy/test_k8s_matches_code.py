"""The Kubernetes manifests use the ports, paths, flags, names, RBAC verbs and
environment variables the code actually uses (each read from the code)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from sluice.config import REDIS_URL_ENV, BulkConfig, SluiceConfig, WebhooksConfig
from tests.kit import deploy_commands as cmd
from tests.kit.code_facts import (
    env_vars_read,
    gateway_routes,
    kubernetes_backend,
    kubernetes_permissions,
    metrics_bind_defaults,
    worker_downward_env,
)
from tests.kit.deploy import K8S, RENDERS, config_in, containers, find, kustomize, one

EXTERNAL_ENV = {"HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HOME", "PYTHONUNBUFFERED"}


Obj = dict[str, Any]
Render = tuple[list[Obj], SluiceConfig]


def _image(c: Obj) -> str:
    """The image's name without registry or tag: ``sluice`` or ``sluice-worker``."""
    return str(c["image"]).rsplit("/", 1)[-1].split(":")[0]


def _sluice_containers(objs: list[Obj]) -> list[tuple[Obj, Obj]]:
    return [
        (d, c)
        for d in find(objs, "Deployment")
        for c in containers(d)
        if _image(c) in ("sluice", "sluice-worker")
    ]


def _by_role(objs: list[Obj], role: tuple[str, ...]) -> list[tuple[Obj, Obj]]:
    return [(d, c) for d, c in _sluice_containers(objs) if cmd.role(c["args"]) == role]


def _pod_annotations(d: dict[str, Any]) -> dict[str, str]:
    return dict(d["spec"]["template"]["metadata"].get("annotations", {}))


def _port(c: dict[str, Any], name: str) -> int:
    return next(int(p["containerPort"]) for p in c["ports"] if p["name"] == name)


@pytest.fixture(scope="module", params=RENDERS)
def render(request: pytest.FixtureRequest, rendered: dict[str, Any]) -> Render:
    objs = rendered[request.param]
    return objs, config_in(objs)


def test_every_sluice_command_is_real(render: Render) -> None:
    objs, cfg = render
    pairs = _sluice_containers(objs)
    assert {cmd.role(c["args"]) for _, c in pairs} == set(cmd.SUBCOMMANDS)
    for d, c in pairs:
        assert cmd.command_problems(c["args"], cfg) == [], d["metadata"]["name"]


def test_config_mounted_as_a_directory(render: Render) -> None:
    """A subPath mount never sees ConfigMap edits: the autoscaler could not reload."""
    objs, _ = render
    cm = one(objs, "ConfigMap", "sluice-config")
    for d, c in _sluice_containers(objs):
        path = cmd.config_path(c["args"])
        volumes = {v["name"]: v for v in d["spec"]["template"]["spec"]["volumes"]}
        mount = next(m for m in c["volumeMounts"] if m["mountPath"] == str(path.parent))
        assert "subPath" not in mount
        assert volumes[mount["name"]]["configMap"]["name"] == "sluice-config"
        assert path.name in cm["data"]


def test_gateway_port_and_probe_paths(render: Render) -> None:
    objs, cfg = render
    routes = gateway_routes()
    ((d, c),) = _by_role(objs, ("gateway",))
    port = cmd.gateway_port(c["args"], cfg)
    assert _port(c, "http") == port == int(_pod_annotations(d)["prometheus.io/port"])
    assert _pod_annotations(d)["prometheus.io/path"] in routes
    ready, live = c["readinessProbe"]["httpGet"]["path"], c["livenessProbe"]["httpGet"]["path"]
    assert {ready, live, c["startupProbe"]["httpGet"]["path"]} <= routes
    # Readiness checks Redis; liveness must not, or a Redis blip restarts every gateway.
    assert ready != live
    svc = one(objs, "Service", "sluice-gateway")
    assert svc["spec"]["ports"][0]["targetPort"] == "http"
    assert "--workers" in c["args"] and cmd.flag(c["args"], "--workers") == "1"


def test_worker_ports_probes_and_drain(render: Render) -> None:
    objs, cfg = render
    workers = _by_role(objs, ("worker",))
    assert workers
    for d, c in workers:
        model = cfg.model(cmd.flag(c["args"], "--model") or "")
        port = cmd.worker_metrics_port(c["args"], cfg)
        assert port > 0, "a worker pod needs a fixed metrics port (worker.metrics_port)"
        assert _port(c, "metrics") == port == int(_pod_annotations(d)["prometheus.io/port"])
        for probe in ("startupProbe", "readinessProbe"):
            assert c[probe]["exec"]["command"] == ["sluice-probe", "worker-ready", str(port)]
        start = c["startupProbe"]
        window_s = start["periodSeconds"] * start["failureThreshold"]
        assert window_s >= 2 * model.autoscaling.cold_start_s
        grace = d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        # The drain finishes the batch in hand; a batch runs under one lease (renewed),
        # so the grace period must outlast at least two of them.
        assert grace >= 2 * model.batching.lease_s
        assert c["lifecycle"]["preStop"]["exec"]["command"] == ["sluice-probe", "drain"]
        assert "nvidia.com/gpu" in c["resources"]["limits"]


def test_worker_pods_name_themselves(render: Render) -> None:
    """The autoscaler finds a worker's pod by the name in its heartbeat; the host
    name is not the pod name under hostNetwork or past 63 characters."""
    objs, _ = render
    wanted = worker_downward_env()
    assert wanted, "workers/ no longer reads its pod name: the reader is broken"
    workers = _by_role(objs, ("worker",))
    assert workers
    for d, c in workers:
        env = {e["name"]: e for e in c.get("env", [])}
        for name, field_path in wanted.items():
            where = f"{d['metadata']['name']}: {name} must come from {field_path}"
            source = env.get(name, {}).get("valueFrom", {}).get("fieldRef", {})
            assert source.get("fieldPath") == field_path, where


def test_worker_deployments_are_the_autoscaler_targets(render: Render) -> None:
    objs, cfg = render
    backend = kubernetes_backend(cfg)
    for d in find(objs, "Deployment"):
        assert d["metadata"]["namespace"] == backend.namespace
    for model, name in backend.deployments.items():
        d = one(objs, "Deployment", name)
        # The autoscaler owns the count: a re-apply must not reset it.
        assert "replicas" not in d["spec"]
        ((c,),) = [containers(d)]
        assert cmd.flag(c["args"], "--model") == model
        assert c["image"].rsplit("/", 1)[-1].startswith("sluice-worker")


def test_autoscaler_role_grants_exactly_what_the_backend_calls(
    render: Render,
) -> None:
    objs, _ = render
    used = kubernetes_permissions()
    assert used, "autoscaler/ makes no Kubernetes API call: the reader is broken"
    role = one(objs, "Role", "sluice-autoscaler")
    granted = {
        (g, r, v)
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }
    assert granted == set(used)
    binding = one(objs, "RoleBinding", "sluice-autoscaler")
    ((d, c),) = _by_role(objs, ("autoscaler",))
    sa = d["spec"]["template"]["spec"]["serviceAccountName"]
    ns = d["metadata"]["namespace"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": ns}]
    assert d["spec"]["replicas"] == 1 and d["spec"]["strategy"]["type"] == "Recreate"
    # The backend loads the in-cluster config: it needs the token; nothing else does.
    for other, _ in _sluice_containers(objs):
        mounted = other["spec"]["template"]["spec"].get("automountServiceAccountToken", True)
        assert mounted is (other is d), other["metadata"]["name"]


def test_autoscaler_backend_and_metrics_port(render: Render) -> None:
    objs, cfg = render
    ((d, c),) = _by_role(objs, ("autoscaler",))
    backend = cmd.flag(c["args"], "--backend") or cfg.autoscaler.backend
    keda = bool(find(objs, "ScaledObject"))
    # With KEDA scaling the workers, the Sluice autoscaler must only advise.
    assert backend == ("dry-run" if keda else "kubernetes")
    port = cmd.autoscaler_metrics_port(c["args"], cfg)
    assert port > 0 and _port(c, "metrics") == port
    assert int(_pod_annotations(d)["prometheus.io/port"]) == port
    assert c["livenessProbe"]["exec"]["command"][-1] == f"http://127.0.0.1:{port}/metrics"


def test_bulk_worker_runs_slim_and_drains_its_slice(render: Render) -> None:
    """The RQ bulk worker: the slim image, the gateway's Redis and config (the
    gateway enqueues on ``bulk.rq_queue``), and a grace period that holds the
    coordinator slice its warm shutdown finishes."""
    objs, cfg = render
    ((d, c),) = _by_role(objs, cmd.BULK_WORKER)
    assert _image(c) == "sluice", "the bulk worker needs no torch: the slim image"
    ((_, gw),) = _by_role(objs, ("gateway",))
    assert c["envFrom"] == gw["envFrom"]
    assert cmd.config_path(c["args"]) == cmd.config_path(gw["args"])
    assert cmd.flag(c["args"], "--redis-url") is None, "the URL is a secret: envFrom only"
    # A burst worker exits once the queue is empty; the Deployment would restart it forever.
    assert "--burst" not in c["args"]
    grace = d["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > cfg.bulk.slice_s
    # An overlay config without a bulk block runs the default slice.
    assert grace > BulkConfig().slice_s
    # It serves nothing: a port or a scrape annotation would be a target always down.
    assert "ports" not in c and "prometheus.io/scrape" not in _pod_annotations(d)


def test_notifier_metrics_probes_replicas_and_shutdown(render: Render) -> None:
    """``sluice notifier``: the slim image with the gateway's Redis and config, a
    fixed metrics port that Prometheus and the probes read, more than one replica
    (stateless, leased), a PDB, and a grace period above its in-flight wait."""
    objs, cfg = render
    ((d, c),) = _by_role(objs, cmd.NOTIFIER)
    assert _image(c) == "sluice", "the notifier needs no torch: the slim image"
    ((_, gw),) = _by_role(objs, ("gateway",))
    assert c["envFrom"] == gw["envFrom"]
    assert cmd.config_path(c["args"]) == cmd.config_path(gw["args"])
    assert cmd.flag(c["args"], "--redis-url") is None, "the URL is a secret: envFrom only"
    port = cmd.notifier_metrics_port(c["args"], cfg)
    assert port > 0, "a notifier pod needs a fixed metrics port (webhooks.metrics_port)"
    annotations = _pod_annotations(d)
    assert annotations["prometheus.io/scrape"] == "true"
    assert _port(c, "metrics") == port == int(annotations["prometheus.io/port"])
    # No health route of its own: the metrics server (its own thread) is the probe.
    for probe in ("livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"] == {"path": annotations["prometheus.io/path"], "port": "metrics"}
    spec = d["spec"]
    assert spec["replicas"] >= 2
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pdb = one(objs, "PodDisruptionBudget", d["metadata"]["name"])
    assert pdb["spec"]["selector"]["matchLabels"] == spec["selector"]["matchLabels"]
    assert pdb["spec"]["minAvailable"] < spec["replicas"], "a node drain must be able to evict one"
    # SIGTERM: it waits up to timeout_s + 1 s for the attempts in flight, then exits.
    grace = spec["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > cfg.webhooks.timeout_s + 1 and grace > WebhooksConfig().timeout_s + 1
    # Nothing inbound but the scrape: no Service selects it.
    labels = spec["template"]["metadata"]["labels"]
    for svc in find(objs, "Service"):
        sel = svc["spec"]["selector"]
        assert not all(labels.get(k) == v for k, v in sel.items()), svc["metadata"]["name"]


def _webhook_secret_refs(objs: list[Obj], env_name: str) -> dict[tuple[str, ...], Obj]:
    refs = {}
    for _, c in _sluice_containers(objs):
        env = {e["name"]: e for e in c.get("env", [])}
        if env_name in env:
            refs[cmd.role(c["args"])] = env[env_name]["valueFrom"]["secretKeyRef"]
    return refs


def test_webhook_secret_reaches_gateway_and_notifier_only(render: Render) -> None:
    """The gateway refuses webhooks while it sees no signing secret and the notifier
    signs with it: both read it, from one optional Secret key (a cluster without
    webhooks still starts); nothing else is given it."""
    objs, cfg = render
    env_name = cfg.webhooks.secret_env
    assert env_name and cfg.webhooks.secret_file is None
    refs = _webhook_secret_refs(objs, env_name)
    assert set(refs) == {("gateway",), cmd.NOTIFIER}
    gw, notifier = refs[("gateway",)], refs[cmd.NOTIFIER]
    assert gw == notifier and gw["optional"] is True and gw["key"]
    # Not shipped: the base holds no signing secret for anyone to reuse.
    assert not find(objs, "Secret", gw["name"])


def test_a_generated_webhook_secret_is_what_the_pods_read(tmp_path: Path) -> None:
    """An overlay that generates the Secret (hash-suffixed name) gets that name
    written into the gateway's and the notifier's env, as docs/deploy.md says."""
    base = one(kustomize(K8S / "base"), "Deployment", "sluice-notifier")
    ((c,),) = [containers(base)]
    (ref,) = [e["valueFrom"]["secretKeyRef"] for e in c["env"] if "valueFrom" in e]
    overlay = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        # Same namespace as the base, or kustomize leaves the references alone.
        "namespace": base["metadata"]["namespace"],
        "resources": [os.path.relpath(K8S / "base", tmp_path)],
        "secretGenerator": [{"name": ref["name"], "literals": [f"{ref['key']}=whsec_x"]}],
    }
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(overlay))
    objs = kustomize(tmp_path)
    (secret,) = [s for s in find(objs, "Secret") if s["metadata"]["name"].startswith(ref["name"])]
    assert secret["metadata"]["name"] != ref["name"], "a generated Secret has a hash suffix"
    refs = _webhook_secret_refs(objs, config_in(objs).webhooks.secret_env or "")
    assert {r["name"] for r in refs.values()} == {secret["metadata"]["name"]}
    assert set(refs) == {("gateway",), cmd.NOTIFIER}


def test_env_vars_are_the_ones_the_code_reads(render: Render) -> None:
    objs, cfg = render
    read = env_vars_read()
    secret = one(
        objs,
        "Secret",
        next(r["secretRef"]["name"] for _, c in _sluice_containers(objs) for r in c["envFrom"]),
    )
    assert set(secret.get("data", {})) | set(secret.get("stringData", {})) == {REDIS_URL_ENV}
    assert REDIS_URL_ENV in read and cfg.redis_url is None
    for _, c in _sluice_containers(objs):
        for e in c.get("env", []):
            assert e["name"] in read or e["name"] in EXTERNAL_ENV, e["name"]


def test_keda_matches_the_policy(rendered: dict[str, Any]) -> None:
    objs = rendered["keda"]
    cfg = config_in(objs)
    backend = kubernetes_backend(cfg)
    for so in find(objs, "ScaledObject"):
        model = next(
            m for m, n in backend.deployments.items() if n == so["spec"]["scaleTargetRef"]["name"]
        )
        policy = cfg.model(model).autoscaling
        assert so["spec"]["minReplicaCount"] == policy.min_replicas
        assert so["spec"]["maxReplicaCount"] == policy.max_replicas
        for t in so["spec"]["triggers"]:
            assert f'model="{model}"' in t["metadata"]["query"]


def test_metrics_endpoints_listen_beyond_loopback(render: Render) -> None:
    """Prometheus scrapes pod IPs: a loopback-only endpoint would be invisible."""
    _, cfg = render
    binds = metrics_bind_defaults()
    assert len(binds) >= 2  # the worker's and the autoscaler's
    assert {k: v for k, v in binds.items() if v not in ("0.0.0.0", "::", "")} == {}
    assert cfg.gateway.host == "0.0.0.0"
