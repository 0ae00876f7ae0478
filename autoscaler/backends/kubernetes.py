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

A warm pool (docs/adr/0128) lives in the same Deployment, whose workers start
``--parked``: the Deployment runs the serving replicas plus ``warm_pool.size``,
and every period the backend promotes parked workers (a Redis command) until the
serving ones number what was decided. A scale-down removes idle serving pods
first: parked pods cost more to delete than any idle serving one, so the pool
stays warm. A parked pod holds whatever its pod spec requests: on a GPU node, a GPU.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from autoscaler.backends.base import Control
from sluice.config import POD_NAME_ENV, SluiceConfig, WarmPoolConfig
from sluice.errors import SluiceError
from sluice.registry import PROMOTE, WorkerInfo

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


PARKED_COST = 50_000  # a warm-pool pod: kept before any idle serving pod, after busy ones


def deletion_cost(worker: WorkerInfo | None) -> int:
    """Lower goes first. No heartbeat (not started, or gone) and quarantined pods
    first, then starting, then idle ready pods (fewest jobs done first), then
    parked warm-pool pods, busy last."""
    if worker is None or worker.state == "quarantined":
        return -1000
    if worker.parked and worker.state in ("standby", "starting"):
        return PARKED_COST
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

    def __init__(
        self, cfg: SluiceConfig, api_client: Any = None, control: Control | None = None
    ) -> None:
        self.apps, self.core = api_clients(api_client)
        self.control = control  # promote commands; without it no pool is kept
        self.pools = {
            m: c.autoscaling.warm_pool.sized(c.autoscaling.warm_pool.start_size)
            for m, c in cfg.models.items()
        }
        self.workers: dict[str, list[WorkerInfo]] = {}
        self.promoted: dict[str, set[str]] = {}  # ids sent a promote, still seen parked
        self.serving: dict[str, int] = {}  # the latest serving count read or set
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
        self.workers[model] = list(workers)  # the pool's promotions; scale-down costs

    def _pool_size(self, model: str) -> int:
        return self.pools[model].start_size if self.control is not None else 0

    def current(self, model: str) -> int:
        """Serving replicas: the Deployment's, less the warm pool it also runs."""
        self.serving[model] = max(0, self._read_scale(model).replicas - self._pool_size(model))
        return self.serving[model]

    def cold_start_s(self, model: str) -> float | None:
        return None  # pods start out of sight: the workers' own measure stands

    def scale(self, model: str, desired: int, workers: list[WorkerInfo]) -> None:
        name = self.deployments[model]
        replicas = desired + self._pool_size(model)
        for attempt in range(1, SCALE_ATTEMPTS + 1):
            read = self._read_scale(model)
            if replicas < read.replicas:
                self.mark_deletion_costs(model, workers)
            try:
                self._patch_scale(name, replicas, read.resource_version)
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
                "kubernetes: %s/%s replicas %d -> %d", self.namespace, name, read.replicas, replicas
            )
            self.serving[model] = desired
            if replicas > read.replicas:
                self.promote(model, desired)
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
        """The pool's settings as of this period (a new size applies at the next scale),
        and the promotions that bring the serving workers up to the decided count."""
        self.pools[model] = pool
        if self._pool_size(model) > 0:
            # The count this period's current() read (or the last scale set): no re-read.
            want = self.serving.get(model)
            self.promote(model, self.current(model) if want is None else want)

    def pool_room(self, model: str) -> int | None:
        """No bound known here: a parked pod holds its requests from its start."""
        return None

    def promote(self, model: str, want: int) -> int:
        """Promote parked workers (warm ones first, then those still loading) until
        ``want`` workers serve or are starting to; how many were promoted."""
        if self.control is None:
            return 0
        live = self.workers.get(model, [])
        # Promoted, but its heartbeat may say parked for one more beat: serving already.
        sent = self.promoted.setdefault(model, set())
        sent &= {w.id for w in live if w.parked}
        serving = [w for w in live if w.state in ("starting", "ready") and not w.parked]
        parked = [w for w in live if w.parked and w.state in ("standby", "starting")]
        parked = sorted((w for w in parked if w.id not in sent), key=lambda w: w.state != "standby")
        if not parked and not sent and len(serving) > want and model not in self._warned_pool:
            self._warned_pool.add(model)
            log.warning(
                "kubernetes: %s keeps a warm pool but no worker is parked: start the worker "
                "Deployment's pods with --parked (docs/deploy.md)",
                model,
            )
        done = 0
        for w in parked[: max(0, want - len(serving) - len(sent))]:
            self.control(model, w.id, PROMOTE)
            sent.add(w.id)
            done += 1
            log.info("kubernetes: promoted %s worker %s (pod %s)", model, w.id, w.pod_name)
        return done

    def tick(self, now_s: float) -> None:
        return None

    def close(self) -> None:
        return None
