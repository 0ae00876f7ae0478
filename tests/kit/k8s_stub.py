"""A strict stub of the Kubernetes API endpoints the autoscaler's backend calls.

It answers as a real API server does where the backend could get a call wrong:
no or a wrong bearer token is 401; a PATCH whose Content-Type is not a patch
type is 415, and one whose body does not decode as that type is 400; a write
carrying a stale ``metadata.resourceVersion`` is 409 Conflict. It models only
what the backend uses (merge and strategic-merge patches of maps and scalars,
JSON patch ``add``/``replace``); a server-side apply is refused with 415 rather
than silently ignored. No real API server runs in these tests.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

NAMESPACE = "serving"
DEPLOYMENT = "minilm-workers"
SCALE = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{DEPLOYMENT}/scale"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
TOKEN = "stub-token-123"
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"


@dataclass
class Request:
    method: str
    path: str
    query: str
    content_type: str
    authorization: str
    body: Any
    status: int = 0


@dataclass
class StubApi:
    """The Deployment's scale, its pods, and a log of every request."""

    replicas: int = 3
    version: int = 100  # the Deployment's resourceVersion (its scale shares it)
    pods: dict[str, dict[str, str]] = field(
        default_factory=lambda: {"pod-a": {}, "pod-b": {}, "pod-c": {}}
    )
    pod_versions: dict[str, int] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    fail_scale: bool = False
    # Another writer changes the Deployment right after each of the next N scale reads.
    interfere: int = 0

    def scale_doc(self) -> dict[str, Any]:
        return {
            "apiVersion": "autoscaling/v1",
            "kind": "Scale",
            "metadata": {
                "name": DEPLOYMENT,
                "namespace": NAMESPACE,
                "resourceVersion": str(self.version),
            },
            "spec": {"replicas": self.replicas},
            "status": {"replicas": self.replicas, "selector": "app=minilm"},
        }

    def pod_doc(self, name: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": NAMESPACE,
                "resourceVersion": str(self.pod_versions.get(name, 1)),
                "annotations": dict(self.pods[name]),
            },
        }

    def patches(self, path: str | None = None) -> list[Request]:
        return [
            q for q in self.requests if q.method == "PATCH" and (path is None or q.path == path)
        ]


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }


def merge_patch(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """RFC 7386 (and, for the maps and scalars the backend patches, strategic merge)."""
    out = dict(target)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge_patch(out[k], v)
        else:
            out[k] = v
    return out


def json_patch(target: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 ``add``/``replace`` only (``~1`` escapes ``/`` as in annotation keys)."""
    out = json.loads(json.dumps(target))
    for op in ops:
        if op.get("op") not in ("add", "replace"):
            raise ValueError(f"stub: op {op.get('op')!r} not modelled")
        *parents, leaf = [
            p.replace("~1", "/").replace("~0", "~") for p in op["path"].lstrip("/").split("/")
        ]
        node = out
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = op["value"]
    return out


def decode_patch(content_type: str, raw: bytes) -> tuple[int, str, Any]:
    """(0, "", patch) or the (status, reason, message) a real server answers."""
    ctype = content_type.split(";")[0].strip().lower()
    if ctype not in (JSON_PATCH, MERGE_PATCH, STRATEGIC_PATCH):
        return (
            415,
            "UnsupportedMediaType",
            (
                f"the body of the request was in an unknown format - accepted media types "
                f"include: {JSON_PATCH}, {MERGE_PATCH}, {STRATEGIC_PATCH}"
            ),
        )
    try:
        body = json.loads(raw)
    except ValueError as e:
        return 400, "BadRequest", str(e)
    want = list if ctype == JSON_PATCH else dict
    if not isinstance(body, want):
        shape = "object" if isinstance(body, dict) else type(body).__name__
        return 400, "BadRequest", f"json: cannot unmarshal {shape} into {ctype} patch"
    return 0, "", body


def apply_patch(content_type: str, doc: dict[str, Any], patch: Any) -> dict[str, Any]:
    if content_type.startswith(JSON_PATCH):
        return json_patch(doc, patch)
    return merge_patch(doc, patch)


def stale(doc: dict[str, Any], patched: dict[str, Any]) -> bool:
    """A resourceVersion in the patched object is a precondition on the stored one."""
    want = patched.get("metadata", {}).get("resourceVersion")
    return want is not None and want != doc["metadata"]["resourceVersion"]


class StubHandler(BaseHTTPRequestHandler):
    api: StubApi  # set per server by _handler
    req: Request  # this request's log entry (one handler per request)

    def log_message(self, *args: Any) -> None:
        return None

    def _reply(self, code: int, doc: dict[str, Any]) -> None:
        self.req.status = code
        raw = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _log(self, body: Any) -> Request:
        path, _, query = self.path.partition("?")
        req = Request(
            self.command,
            path,
            query,
            self.headers.get("Content-Type", ""),
            self.headers.get("Authorization", ""),
            body,
        )
        self.api.requests.append(req)
        self.req = req
        return req

    def _authorized(self) -> bool:
        if self.req.authorization == f"Bearer {TOKEN}":
            return True
        self._reply(401, status(401, "Unauthorized", "Unauthorized"))
        return False

    def do_GET(self) -> None:  # noqa: N802
        req = self._log(None)
        if not self._authorized():
            return
        if req.path == SCALE:
            doc = self.api.scale_doc()
            # Another writer (e.g. the Deployment controller writing its status) changes
            # the object after this read. Changed before the reply is sent: changed
            # after it, the client's patch could race ahead of the change and succeed.
            if self.api.interfere > 0:
                self.api.interfere -= 1
                self.api.version += 1
            return self._reply(200, doc)
        if req.path == PODS:
            items = [self.api.pod_doc(n) for n in self.api.pods]
            return self._reply(
                200, {"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": items}
            )
        self._reply(404, status(404, "NotFound", f"{req.path} not found"))

    def do_PATCH(self) -> None:  # noqa: N802
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        req = self._log(None)
        if not self._authorized():
            return
        code, reason, decoded = decode_patch(req.content_type, raw)
        req.body = decoded if not code else raw.decode(errors="replace")
        if code:
            return self._reply(code, status(code, reason, decoded))
        if req.path == SCALE:
            return self._patch_scale(req)
        name = req.path.rsplit("/", 1)[-1]
        if req.path != f"{PODS}/{name}" or name not in self.api.pods:
            return self._reply(404, status(404, "NotFound", f"{req.path} not found"))
        self._patch_pod(req, name)

    def _patch_scale(self, req: Request) -> None:
        if self.api.fail_scale:
            return self._reply(403, status(403, "Forbidden", "deployments/scale"))
        doc = self.api.scale_doc()
        new = apply_patch(req.content_type, doc, req.body)
        if stale(doc, new):
            return self._reply(
                409,
                status(
                    409,
                    "Conflict",
                    "the object has been "
                    "modified; please apply your changes to "
                    "the latest version and try again",
                ),
            )
        self.api.replicas = int(new["spec"]["replicas"])
        self.api.version += 1
        self._reply(200, self.api.scale_doc())

    def _patch_pod(self, req: Request, name: str) -> None:
        doc = self.api.pod_doc(name)
        new = apply_patch(req.content_type, doc, req.body)
        if stale(doc, new):
            return self._reply(409, status(409, "Conflict", "the object has been modified"))
        self.api.pods[name] = dict(new["metadata"].get("annotations") or {})
        self.api.pod_versions[name] = self.api.pod_versions.get(name, 1) + 1
        self._reply(200, self.api.pod_doc(name))


def _handler(api: StubApi) -> type[BaseHTTPRequestHandler]:
    return type("Handler", (StubHandler,), {"api": api})


@contextmanager
def serve(api: StubApi) -> Iterator[str]:
    """Run the stub on a free port; yields its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(api))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
