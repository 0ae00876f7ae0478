"""The kubernetes backend against a strict stub of the API endpoints it calls
(tests/kit/k8s_stub.py: 401 without the token, 415 for a wrong patch
type, 409 for a stale resourceVersion). No real API server runs here."""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from autoscaler.backends.kubernetes import (
    DELETION_COST,
    MERGE_PATCH,
    SCALE_ATTEMPTS,
    BackendError,
    ConflictError,
    KubernetesBackend,
)
from sluice.config import SluiceConfig, parse_config
from sluice.registry import WorkerInfo
from tests.factories import worker_info
from tests.kit.k8s_stub import (
    DEPLOYMENT,
    JSON_PATCH,
    NAMESPACE,
    PODS,
    SCALE,
    TOKEN,
    StubApi,
    serve,
)

Stub = tuple[StubApi, str]


@pytest.fixture
def stub() -> Iterator[Stub]:
    api = StubApi()
    with serve(api) as url:
        yield api, url


def _cfg(pool: int = 0) -> SluiceConfig:
    auto = {"deployment": DEPLOYMENT, "warm_pool": {"size": pool}}
    return parse_config(
        {
            "models": {"minilm": {"handler": "synthetic", "autoscaling": auto}},
            "autoscaler": {"backend": "kubernetes", "namespace": NAMESPACE},
        }
    )


def _backend(
    url: str, token: str | None = TOKEN, pool: int = 0, control: Any = None
) -> KubernetesBackend:
    from kubernetes import client

    conf = client.Configuration()
    conf.host = url
    if token is not None:
        conf.api_key = {"BearerToken": token}
        conf.api_key_prefix = {"BearerToken": "Bearer"}
    return KubernetesBackend(_cfg(pool), client.ApiClient(conf), control=control)


def _worker(
    name: str,
    state: str = "ready",
    busy: bool = False,
    jobs: int = 0,
    host: str | None = None,
    pod: str | None = None,
    parked: bool = False,
) -> WorkerInfo:
    return worker_info(
        id=name,
        model="minilm",
        host=host or name,
        state=state,
        busy=busy,
        jobs=jobs,
        pod_name=name if pod is None else pod,
        parked=parked,
    )


def _raw(
    url: str,
    method: str,
    path: str,
    body: Any = None,
    ctype: str = MERGE_PATCH,
    token: str | None = TOKEN,
) -> int:
    headers = {"Content-Type": ctype}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


# -- the stub refuses what a real API server refuses -----------------------------
def test_stub_refuses_bad_requests(stub: Stub) -> None:
    api, url = stub
    replicas = {"spec": {"replicas": 4}}
    assert _raw(url, "GET", SCALE, token=None) == 401
    assert _raw(url, "GET", SCALE, token="wrong") == 401
    assert _raw(url, "PATCH", SCALE, replicas, token=None) == 401
    assert _raw(url, "PATCH", SCALE, replicas, ctype="application/json") == 415
    assert _raw(url, "PATCH", SCALE, replicas, ctype="application/apply-patch+yaml") == 415
    # The client's default for a dict body: a JSON patch must be a list of operations.
    assert _raw(url, "PATCH", SCALE, replicas, ctype=JSON_PATCH) == 400
    stale = {"metadata": {"resourceVersion": str(api.version - 1)}, **replicas}
    assert _raw(url, "PATCH", SCALE, stale) == 409
    assert api.replicas == 3, "a refused request changed the object"
    fresh = {"metadata": {"resourceVersion": str(api.version)}, **replicas}
    assert _raw(url, "PATCH", SCALE, fresh) == 200 and api.replicas == 4
    op = [
        {
            "op": "add",
            "path": f"/metadata/annotations/{DELETION_COST.replace('/', '~1')}",
            "value": "5",
        }
    ]
    assert _raw(url, "PATCH", f"{PODS}/pod-a", op, ctype=JSON_PATCH) == 200
    assert api.pods["pod-a"] == {DELETION_COST: "5"}


# -- the backend against it ------------------------------------------------------
def test_scales_up_with_a_token_and_a_merge_patch(stub: Stub) -> None:
    api, url = stub
    be = _backend(url)
    assert be.current("minilm") == 3
    be.scale("minilm", 5, [])
    assert api.replicas == 5
    (patch,) = api.patches(SCALE)
    assert (patch.status, patch.content_type) == (200, MERGE_PATCH)
    assert patch.body["spec"] == {"replicas": 5}
    # Conditional on the scale it read.
    assert patch.body["metadata"]["resourceVersion"] == "100"
    assert all(q.authorization == f"Bearer {TOKEN}" for q in api.requests)
    assert len(api.patches()) == 1  # no pod is annotated on the way up


def test_scale_down_marks_idle_pods_cheaper_than_busy_ones(stub: Stub) -> None:
    api, url = stub
    be = _backend(url)
    workers = [_worker("pod-a", busy=True, jobs=50), _worker("pod-b", jobs=7)]  # pod-c: none
    be.scale("minilm", 1, workers)
    assert api.replicas == 1
    costs = {n: int(a[DELETION_COST]) for n, a in api.pods.items()}
    # No heartbeat (pod-c) goes first, then the idle one, the busy one last.
    assert costs["pod-c"] < costs["pod-b"] < costs["pod-a"]
    pod_list = [q.query for q in api.requests if q.method == "GET" and q.path == PODS]
    assert pod_list and "labelSelector=app%3Dminilm" in pod_list[0]  # the scale's selector
    assert {(q.status, q.content_type) for q in api.patches()} == {(200, MERGE_PATCH)}
    # The annotations went in before the replica count dropped.
    order = [q.path for q in api.patches()]
    assert order[-1] == SCALE and SCALE not in order[:-1]
    # Unchanged costs are not patched again.
    n_patches = len(order)
    be.scale("minilm", 0, workers)
    assert len(api.patches()) == n_patches + 1


@pytest.mark.parametrize("case", ["host_network", "long_pod_names"])
def test_pods_are_found_by_the_name_the_worker_publishes(stub: Stub, case: str) -> None:
    """hostNetwork: every worker's host name is the node's. A pod name over 63
    characters: the host name is cut to 63. Either way only the pod name matches."""
    api, url = stub
    if case == "host_network":
        names = [
            "sluice-worker-minilm-5d8f7-aaaaa",
            "sluice-worker-minilm-5d8f7-bbbbb",
            "sluice-worker-minilm-5d8f7-ccccc",
        ]
        hosts = ["gke-gpu-pool-node-1"] * 3
    else:
        stem = "sluice-worker-minilm-from-a-deployment-with-a-long-name-6c9f7b".ljust(64, "x")
        names = [f"{stem}-{s}" for s in ("aaaaa", "bbbbb", "ccccc")]
        hosts = [n[:63] for n in names]  # what the kubelet sets as the host name
        assert all(len(n) == 70 for n in names) and len(set(hosts)) == 1
    api.pods = {n: {} for n in names}
    busy, idle, starting = (
        _worker(names[0], busy=True, jobs=50, host=hosts[0]),
        _worker(names[1], jobs=7, host=hosts[1]),
        _worker(names[2], state="starting", host=hosts[2]),
    )
    _backend(url).scale("minilm", 1, [busy, idle, starting])
    costs = {n: int(api.pods[n][DELETION_COST]) for n in names}
    assert costs == {names[0]: 100_000, names[1]: 7, names[2]: -100}


def test_workers_without_a_pod_name_fall_back_to_the_host_name_and_say_so(
    stub: Stub, caplog: pytest.LogCaptureFixture
) -> None:
    api, url = stub
    be = _backend(url)
    workers = [_worker("pod-a", busy=True, pod=""), _worker("pod-b", jobs=3)]
    with caplog.at_level(logging.WARNING, "sluice.autoscaler"):
        be.mark_deletion_costs("minilm", workers)
        be.mark_deletion_costs("minilm", workers)
    assert api.pods["pod-a"][DELETION_COST] == "100000"  # matched by host name
    assert api.pods["pod-b"][DELETION_COST] == "3"
    warnings = [r.getMessage() for r in caplog.records if "host name" in r.getMessage()]
    assert len(warnings) == 1 and "SLUICE_POD_NAME" in warnings[0] and "pod-a" in warnings[0]


# -- 409: re-read and retry, bounded -------------------------------------------------
def test_a_conflict_is_re_read_and_retried(stub: Stub) -> None:
    api, url = stub
    api.interfere = 1  # the Deployment changes between the first read and its patch
    _backend(url).scale("minilm", 5, [])
    assert api.replicas == 5
    first, second = api.patches(SCALE)
    assert (first.status, second.status) == (409, 200)
    assert first.body["metadata"]["resourceVersion"] == "100"
    assert second.body["metadata"]["resourceVersion"] == "101"  # read again


def test_a_conflict_every_time_gives_up_after_the_bound(stub: Stub) -> None:
    api, url = stub
    api.interfere = 1000
    with pytest.raises(ConflictError, match="409"):
        _backend(url).scale("minilm", 5, [])
    assert api.replicas == 3
    assert [q.status for q in api.patches(SCALE)] == [409] * SCALE_ATTEMPTS


# -- errors and authentication ------------------------------------------------------
def test_api_errors_become_backend_errors(stub: Stub) -> None:
    api, url = stub
    api.fail_scale = True
    be = _backend(url)
    with pytest.raises(BackendError, match="Forbidden"):
        be.scale("minilm", 4, [])
    assert api.replicas == 3
    be.deployments["minilm"] = "missing"
    with pytest.raises(BackendError, match="read scale"):
        be.current("minilm")


def test_without_credentials_the_api_says_unauthorized(stub: Stub) -> None:
    api, url = stub
    with pytest.raises(BackendError, match="401"):
        _backend(url, token=None).current("minilm")
    assert [q.status for q in api.requests] == [401]


def _kubeconfig(path: Path, url: str, user: dict[str, Any]) -> Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "stub",
        "clusters": [{"name": "stub", "cluster": {"server": url}}],
        "users": [{"name": "sa", "user": user}],
        "contexts": [{"name": "stub", "context": {"cluster": "stub", "user": "sa"}}],
    }
    path.write_text(json.dumps(doc))
    return path


def test_the_backend_authenticates_with_the_token_its_config_names(
    stub: Stub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No api_client given: the backend loads its own config (here a kubeconfig; in a
    pod the service account's) and sends its bearer token on every call."""
    from kubernetes import client
    from kubernetes.config import kube_config

    api, url = stub
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)  # not in a pod
    kc = _kubeconfig(tmp_path / "kc", url, {"token": TOKEN})
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(kc))
    # Loading sets the client's process-wide default: undone after the test.
    monkeypatch.setattr(client.Configuration, "_default", None)
    be = KubernetesBackend(_cfg())
    be.scale("minilm", 1, [_worker("pod-a", busy=True)])
    assert api.replicas == 1 and api.pods["pod-a"][DELETION_COST] == "100000"
    assert {q.status for q in api.requests} == {200}
    assert all(q.authorization == f"Bearer {TOKEN}" for q in api.requests)


# -- the warm pool (ADR 0128): one Deployment, pods started --parked ----------------
def test_a_pool_runs_in_the_deployment_and_scale_ups_promote_parked_workers(stub: Stub) -> None:
    api, url = stub
    sent: list[tuple[str, str, str]] = []
    be = _backend(url, pool=1, control=lambda m, w, c: sent.append((m, w, c)))
    # The stub's Deployment runs 3 pods: 2 serving, 1 parked (the pool of 1).
    workers = [_worker("pod-a"), _worker("pod-b"), _worker("pod-c", "standby", parked=True)]
    be.observe("minilm", workers)
    assert be.current("minilm") == 2
    reads = sum(1 for q in api.requests if q.method == "GET" and q.path == SCALE)
    be.keep_pool("minilm", be.pools["minilm"])
    assert sent == []  # 2 serving as decided: nothing to promote
    # It uses the count current() just read: no second read of the scale per period.
    assert sum(1 for q in api.requests if q.method == "GET" and q.path == SCALE) == reads
    # Up to 3 serving: 3 + the pool of 1 = 4 replicas, and the parked one is promoted
    # at once (the new pod starts parked: it is the pool's refill).
    be.scale("minilm", 3, workers)
    assert api.replicas == 4
    assert sent == [("minilm", "pod-c", "promote")]
    # Its heartbeat still says parked for a beat: it is not promoted twice.
    be.keep_pool("minilm", be.pools["minilm"])
    assert len(sent) == 1
    # Once the refill parks and pod-c serves, a period promotes nothing more.
    be.observe("minilm", [*workers[:2], _worker("pod-c"), _worker("pod-d", "standby", parked=True)])
    be.keep_pool("minilm", be.pools["minilm"])
    assert len(sent) == 1 and be.current("minilm") == 3


def test_a_scale_down_keeps_parked_pods_over_idle_serving_ones(stub: Stub) -> None:
    api, url = stub
    be = _backend(url, pool=1, control=lambda *_: None)
    workers = [
        _worker("pod-a", busy=True, jobs=50),
        _worker("pod-b", jobs=7),
        _worker("pod-c", "standby", parked=True),
    ]
    be.observe("minilm", workers)
    be.scale("minilm", 1, workers)  # 1 serving + the pool of 1
    assert api.replicas == 2
    costs = {n: int(a[DELETION_COST]) for n, a in api.pods.items()}
    assert costs["pod-b"] < costs["pod-c"] < costs["pod-a"]  # idle serving goes, pool stays


def test_a_pool_without_parked_pods_says_how_to_start_them(
    stub: Stub, caplog: pytest.LogCaptureFixture
) -> None:
    _, url = stub
    be = _backend(url, pool=1, control=lambda *_: None)
    be.observe("minilm", [_worker("pod-a"), _worker("pod-b"), _worker("pod-c")])
    with caplog.at_level(logging.WARNING, logger="sluice.autoscaler"):
        be.keep_pool("minilm", be.pools["minilm"])
        be.keep_pool("minilm", be.pools["minilm"])
    warned = [r for r in caplog.records if "--parked" in r.getMessage()]
    assert len(warned) == 1
