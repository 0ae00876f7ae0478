"""Scale a model's worker Deployment through its scale subresource.

Before a scale-down, every pod of the Deployment gets a
``controller.kubernetes.io/pod-deletion-cost`` annotation from its worker's
heartbeat, so the ReplicaSet removes starting and idle pods first and busy pods
survive. A worker names its pod in the heartbeat (``SLUICE_POD_NAME`` from the
downward API, docs/adr/0115); a worker without it is matched by host name. A
removed pod gets SIGTERM, which is the worker's drain: it finishes what it
holds, then exits.

Every write is a JSON merge patch with its content type named, rather than left
to the client's guess from the body's shape, and the scale patch carries the
resourceVersion it was decided on: a 409 Conflict re-reads and retries, at most
``SCALE_ATTEMPTS`` times (docs/adr/0116).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from sluice.config import POD_NAME_ENV, SluiceConfig, WarmPoolConfig
from sluice.errors import SluiceError
from sluice.registry import WorkerInfo

log = logging.getLogger("sluice.autoscaler")
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
MERGE_PATCH = "application/merge-patch+json"
SCALE_ATTEMPTS = 3  # read-decide-patch rounds before a conflicting writer wins this tick


class BackendError(SluiceError):
    type = "backend_error"


class ConflictError(BackendError):
    """409: the object changed since it was read (a stale resourceVersion)."""

    type = "conflict"


@dataclass(frozen=True)
class ScaleRead:
    replicas: int
    resource_version: str


def deletion_cost(worker: WorkerInfo | None) -> int:
    """Lower goes first. No heartbeat (not started, or gone) and quarantined pods
    first, then starting, then idle ready pods (fewest jobs done first), busy last."""
    if worker is None or worker.state == "quarantined":
        return -1000
    if worker.state == "starting":
        return -100
    if worker.busy or worker.state == "draining":
        return 100_000
    return min(worker.jobs, 10_000)


def workers_by_pod(workers: list[WorkerInfo]) -> tuple[dict[str, WorkerInfo], list[str]]:
    """Pod name -> its worker, and the ids of workers matched by host name instead.

    A worker that names its pod is matched on that alone. One that does not (no
    ``SLUICE_POD_NAME``) is matched by host name, which equals the pod name only
    for a pod name of at most 63 characters and without ``hostNetwork``.
    """
    by_pod = {w.pod_name: w for w in workers if w.pod_name}
    by_host = [w for w in workers if not w.pod_name]
    for w in by_host:
        by_pod.setdefault(w.host, w)
    return by_pod, [w.id for w in by_host]


def api_clients(api_client: Any = None) -> tuple[Any, Any]:
    """AppsV1Api and CoreV1Api: in-cluster config if present, else the kubeconfig.

    Either way the client sends the bearer token (or client certificate) they name;
    the in-cluster loader re-reads the rotating service account token.
    """
    from kubernetes import client, config

    if api_client is None:
        try:
            config.load_incluster_config()
        except config.ConfigException:
            config.load_kube_config()
        api_client = client.ApiClient()
    return client.AppsV1Api(api_client), client.CoreV1Api(api_client)


class KubernetesBackend:
    name = "kubernetes"

    def __init__(self, cfg: SluiceConfig, api_client: Any = None, control: Any = None) -> None:
        self.apps, self.core = api_clients(api_client)
        self._warned_pool: set[str] = set()
        self.namespace = cfg.autoscaler.namespace
        self.deployments = {
            m: mc.autoscaling.deployment or f"sluice-worker-{m}" for m, mc in cfg.models.items()
        }
        self.selectors: dict[str, str] = {}
        self._warned_host_match = False

    def _call(self, what: str, fn: Any, *args: Any, **kw: Any) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            return fn(*args, **kw)
        except ApiException as e:
            reason = f"{e.status} {e.reason}" if e.status else str(e)
            error = ConflictError if e.status == 409 else BackendError
            raise error(f"kubernetes: {what}: {reason}") from e
        except OSError as e:
            raise BackendError(f"kubernetes: {what}: {e}") from e
        except Exception as e:  # urllib3 errors surface under several names
            raise BackendError(f"kubernetes: {what}: {e}") from e

    def _read_scale(self, model: str) -> ScaleRead:
        name = self.deployments[model]
        read = self.apps.read_namespaced_deployment_scale
        scale = self._call(f"read scale of {self.namespace}/{name}", read, name, self.namespace)
        if scale.status is not None and scale.status.selector:
            self.selectors[model] = scale.status.selector
        return ScaleRead(int(scale.spec.replicas or 0), scale.metadata.resource_version or "")

    def observe(self, model: str, workers: list[WorkerInfo]) -> None:
        return None  # the Deployment's scale is the count; workers matter at scale-down

    def current(self, model: str) -> int:
        return self._read_scale(model).replicas

    def cold_start_s(self, model: str) -> float | None:
        return None  # pods start out of sight: the workers' own measure stands

    def scale(self, model: str, desired: int, workers: list[WorkerInfo]) -> None:
        name = self.deployments[model]
        for attempt in range(1, SCALE_ATTEMPTS + 1):
            read = self._read_scale(model)
            if desired < read.replicas:
                self.mark_deletion_costs(model, workers)
            try:
                self._patch_scale(name, desired, read.resource_version)
            except ConflictError as e:
                if attempt == SCALE_ATTEMPTS:
                    raise ConflictError(f"{e} ({attempt} attempts; next tick retries)") from e
                log.info(
                    "kubernetes: %s/%s changed while scaling; re-reading (%d/%d)",
                    self.namespace,
                    name,
                    attempt,
                    SCALE_ATTEMPTS,
                )
                continue
            log.info(
                "kubernetes: %s/%s replicas %d -> %d", self.namespace, name, read.replicas, desired
            )
            return

    def _patch_scale(self, name: str, desired: int, resource_version: str) -> None:
        # The resourceVersion makes the patch conditional: it applies only to the scale
        # the decision (and the deletion costs) was made on, else 409.
        body: dict[str, Any] = {"spec": {"replicas": int(desired)}}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        self._call(
            f"scale {self.namespace}/{name} to {desired}",
            self.apps.patch_namespaced_deployment_scale,
            name,
            self.namespace,
            body,
            _content_type=MERGE_PATCH,
        )

    def mark_deletion_costs(self, model: str, workers: list[WorkerInfo]) -> int:
        """Annotate each pod whose cost changed; returns how many were patched."""
        selector = self.selectors.get(model, f"app=sluice-worker-{model}")
        pods = self._call(
            f"list pods ({selector})",
            self.core.list_namespaced_pod,
            self.namespace,
            label_selector=selector,
        )
        by_pod, host_matched = workers_by_pod(workers)
        if host_matched:
            self._warn_host_match(host_matched)
        patched = 0
        for pod in pods.items:
            pod_name = pod.metadata.name
            cost = str(deletion_cost(by_pod.get(pod_name)))
            if (pod.metadata.annotations or {}).get(DELETION_COST) == cost:
                continue
            # Unconditional (no resourceVersion): a pod's version moves with every
            # status change, and the cost is rewritten before each scale-down anyway.
            body = {"metadata": {"annotations": {DELETION_COST: cost}}}
            self._call(
                f"annotate pod {pod_name}",
                self.core.patch_namespaced_pod,
                pod_name,
                self.namespace,
                body,
                _content_type=MERGE_PATCH,
            )
            patched += 1
        return patched

    def _warn_host_match(self, worker_ids: list[str]) -> None:
        if self._warned_host_match:
            return
        self._warned_host_match = True
        log.warning(
            "kubernetes: worker(s) %s publish no pod name; matching their pods by host "
            "name, which fails for hostNetwork pods and pod names over 63 characters. "
            "Set %s from metadata.name in the worker Deployment (docs/deploy.md).",
            ", ".join(worker_ids[:5]),
            POD_NAME_ENV,
        )

    def keep_pool(self, model: str, pool: WarmPoolConfig) -> None:
        """No warm pools on Kubernetes yet (docs/adr/0128): said once per model."""
        if pool.size > 0 and model not in self._warned_pool:
            self._warned_pool.add(model)
            log.warning(
                "kubernetes: %s: autoscaling.warm_pool is not kept by this backend yet; "
                "new replicas start cold (docs/autoscaling.md, Warm pools)",
                model,
            )

    def tick(self, now_s: float) -> None:
        return None

    def close(self) -> None:
        return None
