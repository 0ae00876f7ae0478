"""The kubernetes backend against a local stub of the API endpoints it calls."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from autoscaler.backends.kubernetes import DELETION_COST, BackendError, KubernetesBackend
from sluice.config import parse_config
from sluice.registry import WorkerInfo

SCALE = "/apis/apps/v1/namespaces/serving/deployments/minilm-workers/scale"
PODS = "/api/v1/namespaces/serving/pods"


class StubApi:
    """Deployment scale + pods, and a log of every request (method, path, body)."""

    def __init__(self) -> None:
        self.replicas = 3
        self.pods: dict[str, dict[str, str]] = {"pod-a": {}, "pod-b": {}, "pod-c": {}}
        self.requests: list[tuple[str, str, Any]] = []
        self.fail_scale = False

    def scale_doc(self) -> dict[str, Any]:
        return {"apiVersion": "autoscaling/v1", "kind": "Scale",
                "metadata": {"name": "minilm-workers", "namespace": "serving"},
                "spec": {"replicas": self.replicas},
                "status": {"replicas": self.replicas, "selector": "app=minilm"}}  # fmt: skip

    def pod_doc(self, name: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "serving",
                             "annotations": dict(self.pods[name])}}  # fmt: skip


def _handler(api: StubApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            return None

        def _reply(self, code: int, doc: dict[str, Any]) -> None:
            raw = json.dumps(doc).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_GET(self) -> None:  # noqa: N802
            path, _, query = self.path.partition("?")
            api.requests.append(("GET", path, query))
            if path == SCALE:
                return self._reply(200, api.scale_doc())
            if path == PODS:
                items = [api.pod_doc(n) for n in api.pods]
                return self._reply(200, {"apiVersion": "v1", "kind": "PodList",
                                         "metadata": {}, "items": items})  # fmt: skip
            return self._reply(404, {"kind": "Status", "code": 404, "reason": "NotFound"})

        def do_PATCH(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            api.requests.append(("PATCH", self.path, body))
            if self.path == SCALE:
                if api.fail_scale:
                    return self._reply(403, {"kind": "Status", "code": 403,
                                             "reason": "Forbidden"})  # fmt: skip
                api.replicas = body["spec"]["replicas"]
                return self._reply(200, api.scale_doc())
            name = self.path.rsplit("/", 1)[-1]
            api.pods[name].update(body["metadata"]["annotations"])
            return self._reply(200, api.pod_doc(name))

    return Handler


@pytest.fixture
def stub() -> Iterator[tuple[StubApi, str]]:
    api = StubApi()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(api))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield api, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _backend(url: str) -> KubernetesBackend:
    from kubernetes import client

    conf = client.Configuration()
    conf.host = url
    cfg = parse_config({
        "models": {"minilm": {"handler": "synthetic",
                              "autoscaling": {"deployment": "minilm-workers"}}},
        "autoscaler": {"backend": "kubernetes", "namespace": "serving"},
    })  # fmt: skip
    return KubernetesBackend(cfg, client.ApiClient(conf))


def _worker(host: str, state: str = "ready", busy: bool = False, jobs: int = 0) -> WorkerInfo:
    return WorkerInfo(id=host, model="minilm", host=host, pid=1, device="cpu", buckets=["32"],
                      state=state, started_at=0.0, busy=busy, jobs=jobs)  # fmt: skip


def test_reads_replicas_and_scales_up_without_touching_pods(stub: tuple[StubApi, str]) -> None:
    api, url = stub
    be = _backend(url)
    assert be.current("minilm") == 3
    be.scale("minilm", 5, [])
    assert api.replicas == 5
    assert ("PATCH", SCALE, {"spec": {"replicas": 5}}) in api.requests
    assert not any(m == "PATCH" and p.startswith(PODS) for m, p, _ in api.requests)


def test_scale_down_marks_idle_pods_cheaper_than_busy_ones(stub: tuple[StubApi, str]) -> None:
    api, url = stub
    be = _backend(url)
    workers = [_worker("pod-a", busy=True, jobs=50), _worker("pod-b", jobs=7)]  # pod-c: none
    be.scale("minilm", 1, workers)
    assert api.replicas == 1
    costs = {n: int(a[DELETION_COST]) for n, a in api.pods.items()}
    # No heartbeat (pod-c) goes first, then the idle one, the busy one last.
    assert costs["pod-c"] < costs["pod-b"] < costs["pod-a"]
    pod_list = [q for m, p, q in api.requests if m == "GET" and p == PODS]
    assert pod_list and "labelSelector=app%3Dminilm" in pod_list[0]  # the scale's selector
    # The annotations went in before the replica count dropped.
    order = [(m, p) for m, p, _ in api.requests if m == "PATCH"]
    assert order[-1] == ("PATCH", SCALE) and all(p != SCALE for _, p in order[:-1])
    # Unchanged costs are not patched again.
    n_patches = len(order)
    be.scale("minilm", 0, workers)
    assert len([1 for m, _, _ in api.requests if m == "PATCH"]) == n_patches + 1


def test_api_errors_become_backend_errors(stub: tuple[StubApi, str]) -> None:
    api, url = stub
    api.fail_scale = True
    be = _backend(url)
    with pytest.raises(BackendError, match="Forbidden"):
        be.scale("minilm", 4, [])
    assert api.replicas == 3
    be.deployments["minilm"] = "missing"
    with pytest.raises(BackendError, match="read scale"):
        be.current("minilm")
