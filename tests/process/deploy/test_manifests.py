"""Every rendered manifest validates against the Kubernetes schemas, and the
references between objects (selectors, named ports, Secrets, roles) resolve."""

from __future__ import annotations

import copy
from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from tests.kit.crd_schemas import BY_KIND, PROMETHEUS_TRIGGER_METADATA
from tests.kit.deploy import RENDERS, containers, find, one

# The oldest Kubernetes we claim (docs/deploy.md) and the newest schemas bundled.
K8S_VERSIONS = ("1.29.0", kubernetes_validate.latest_version())
WORKLOADS = ("Deployment", "StatefulSet")


def validate(obj: dict[str, Any], version: str) -> None:
    schema = BY_KIND.get((obj["apiVersion"], obj["kind"]))
    if schema is not None:
        jsonschema.validate(obj, schema)
    else:
        kubernetes_validate.validate(obj, version, strict=True)


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize("render", RENDERS)
def test_every_object_validates(rendered: dict[str, list[Any]], render: str, version: str) -> None:
    objs = rendered[render]
    assert len(objs) >= 12
    for obj in objs:
        try:
            validate(obj, version)
        except Exception as e:  # name the object: the validators do not
            raise AssertionError(f"{render}: {obj['kind']}/{obj['metadata']['name']}: {e}") from e


def test_validation_is_strict(rendered: dict[str, list[Any]]) -> None:
    """A misspelt field must fail: otherwise the check above proves nothing."""
    worker = copy.deepcopy(one(rendered["base"], "Deployment", "sluice-worker-minilm"))
    containers(worker)[0]["readinesProbe"] = containers(worker)[0].pop("readinessProbe")
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(worker, K8S_VERSIONS[-1])
    so = copy.deepcopy(one(rendered["keda"], "ScaledObject", "sluice-worker-minilm"))
    so["spec"]["maxReplicas"] = so["spec"].pop("maxReplicaCount")
    with pytest.raises(jsonschema.ValidationError):
        validate(so, K8S_VERSIONS[-1])


def _template_labels(obj: dict[str, Any]) -> dict[str, str]:
    return dict(obj["spec"]["template"]["metadata"].get("labels", {}))


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


@pytest.mark.parametrize("render", RENDERS)
def test_selectors_and_named_ports_resolve(rendered: dict[str, list[Any]], render: str) -> None:
    objs = rendered[render]
    workloads = [o for o in objs if o["kind"] in WORKLOADS]
    for w in workloads:
        assert _matches(w["spec"]["selector"]["matchLabels"], _template_labels(w))
        for c in containers(w):
            names = {p["name"] for p in c.get("ports", [])}
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                action = c.get(probe, {}).get("httpGet") or c.get(probe, {}).get("tcpSocket")
                if action and isinstance(action["port"], str):
                    assert action["port"] in names, f"{w['metadata']['name']}: {probe}"
    for svc in find(objs, "Service"):
        backends = [w for w in workloads if _matches(svc["spec"]["selector"], _template_labels(w))]
        assert backends, f"Service {svc['metadata']['name']} selects no workload"
        ports = {p["name"] for w in backends for c in containers(w) for p in c.get("ports", [])}
        for p in svc["spec"]["ports"]:
            assert p["targetPort"] in ports


def _workload_refs(w: dict[str, Any]) -> list[tuple[str, str]]:
    spec = w["spec"]["template"]["spec"]
    refs = [("Secret", r["secretRef"]["name"]) for c in containers(w) for r in c.get("envFrom", [])]
    refs += [
        ("ConfigMap", v["configMap"]["name"]) for v in spec.get("volumes", []) if "configMap" in v
    ]
    if "serviceAccountName" in spec:
        refs.append(("ServiceAccount", spec["serviceAccountName"]))
    return refs


@pytest.mark.parametrize("render", RENDERS)
def test_references_resolve(rendered: dict[str, list[Any]], render: str) -> None:
    objs = rendered[render]
    names = {(o["kind"], o["metadata"]["name"]) for o in objs}
    refs = [r for w in objs if w["kind"] in WORKLOADS for r in _workload_refs(w)]
    refs += [
        ("Deployment", o["spec"]["scaleTargetRef"]["name"])
        for o in objs
        if o["kind"] in ("HorizontalPodAutoscaler", "ScaledObject")
    ]
    for rb in find(objs, "RoleBinding"):
        refs.append(("Role", rb["roleRef"]["name"]))
        refs += [(s["kind"], s["name"]) for s in rb["subjects"]]
    assert refs and [r for r in refs if r not in names] == []
    for so in find(objs, "ScaledObject"):
        for trig in so["spec"]["triggers"]:
            if trig["type"] == "prometheus":
                assert PROMETHEUS_TRIGGER_METADATA <= set(trig["metadata"])
    for pdb in find(objs, "PodDisruptionBudget"):
        sel = pdb["spec"]["selector"]["matchLabels"]
        assert any(_matches(sel, _template_labels(w)) for w in objs if w["kind"] in WORKLOADS)


def test_example_overlay_swaps_redis_and_images(rendered: dict[str, list[Any]]) -> None:
    base, example = rendered["base"], rendered["example"]
    assert find(base, "StatefulSet", "sluice-redis") and not find(example, "StatefulSet")
    assert not find(example, "Service", "sluice-redis")
    images = {c["image"] for o in example if o["kind"] == "Deployment" for c in containers(o)}
    assert images and all(i.startswith("registry.example.com/") for i in images)
    assert {o["kind"] for o in example} >= {"ServiceMonitor", "PodMonitor"}


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A LabelSelector (matchLabels and matchExpressions) against ``labels``."""
    if not selector:
        return False
    ok = all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())
    for e in selector.get("matchExpressions", []):
        has, values = e["key"] in labels, e.get("values", [])
        ok = (
            ok
            and {
                "Exists": has,
                "DoesNotExist": not has,
                "In": has and labels[e["key"]] in values,
                "NotIn": not has or labels[e["key"]] not in values,
            }[e["operator"]]
        )
    return ok


def _named_ports(w: dict[str, Any]) -> dict[str, int]:
    return {p["name"]: int(p["containerPort"]) for c in containers(w) for p in c.get("ports", [])}


Scrape = tuple[str, int, str]  # (workload, port number, path)


def _pod_monitor_scrapes(objs: list[dict[str, Any]]) -> set[Scrape]:
    out = set()
    for pm in find(objs, "PodMonitor"):
        for w in (w for w in objs if w["kind"] in WORKLOADS):
            if not _selects(pm["spec"]["selector"], _template_labels(w)):
                continue
            for ep in pm["spec"]["podMetricsEndpoints"]:
                if (port := _named_ports(w).get(ep["port"])) is not None:
                    out.add((w["metadata"]["name"], port, ep["path"]))
    return out


def _service_monitor_scrapes(objs: list[dict[str, Any]]) -> set[Scrape]:
    out = set()
    for sm in find(objs, "ServiceMonitor"):
        services = [
            s
            for s in find(objs, "Service")
            if _selects(sm["spec"]["selector"], s["metadata"].get("labels", {}))
        ]
        for svc in services:
            targets = {p["name"]: p["targetPort"] for p in svc["spec"]["ports"]}
            for w in (w for w in objs if w["kind"] in WORKLOADS):
                if not _matches(svc["spec"]["selector"], _template_labels(w)):
                    continue
                for ep in sm["spec"]["endpoints"]:
                    if (port := _named_ports(w).get(targets.get(ep["port"], ""))) is not None:
                        out.add((w["metadata"]["name"], port, ep["path"]))
    return out


def test_operator_monitors_scrape_every_annotated_pod(rendered: dict[str, list[Any]]) -> None:
    """With the Prometheus Operator component, each workload the base marks for
    scraping (prometheus.io/* annotations) is scraped by a PodMonitor or a
    ServiceMonitor, on the annotated port and path: a new Deployment cannot be
    left out of one setup."""
    objs = rendered["example"]
    wanted = set()
    for w in (w for w in objs if w["kind"] in WORKLOADS):
        ann = w["spec"]["template"]["metadata"].get("annotations", {})
        if ann.get("prometheus.io/scrape") == "true":
            port, path = int(ann["prometheus.io/port"]), ann["prometheus.io/path"]
            wanted.add((w["metadata"]["name"], port, path))
    assert len(wanted) >= 4  # gateway, worker, autoscaler, notifier
    scraped = _pod_monitor_scrapes(objs) | _service_monitor_scrapes(objs)
    assert wanted - scraped == set()


def test_every_object_lands_in_one_namespace(rendered: dict[str, list[Any]]) -> None:
    for render, objs in rendered.items():
        spaces = {o["metadata"].get("namespace") for o in objs if o["kind"] != "Namespace"}
        assert spaces == {"sluice"}, render


def test_warm_pool_component_parks_every_worker_and_nothing_else(
    rendered: dict[str, list[Any]],
) -> None:
    """The warm-pool component (ADR 0128/0156) starts each model's worker pods
    ``--parked``, and changes nothing else in the base."""
    base, pooled = rendered["base"], rendered["warm-pool"]
    workers = [
        d for d in find(pooled, "Deployment") if "sluice.dev/model" in d["metadata"]["labels"]
    ]
    assert workers
    for w in workers:
        args = containers(w)[0]["args"]
        assert args[0] == "worker" and args[-1] == "--parked"
        containers(w)[0]["args"] = args[:-1]
    assert pooled == base
