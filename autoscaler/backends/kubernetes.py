"""Scale a model's worker Deployment through its scale subresource.

Before a scale-down, every pod of the Deployment gets a
``controller.kubernetes.io/pod-deletion-cost`` annotation from its worker's
heartbeat (matched by pod name = the worker's host name), so the ReplicaSet
removes starting and idle pods first and busy pods survive. A removed pod gets
SIGTERM, which is the worker's drain: it finishes what it holds, then exits.
"""

from __future__ import annotations

import logging
from typing import Any

from sluice.config import SluiceConfig
from sluice.errors import SluiceError
from sluice.registry import WorkerInfo

log = logging.getLogger("sluice.autoscaler")
DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"


class BackendError(SluiceError):
    type = "backend_error"


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


def api_clients(api_client: Any = None) -> tuple[Any, Any]:
    """AppsV1Api and CoreV1Api: in-cluster config if present, else the kubeconfig."""
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

    def __init__(self, cfg: SluiceConfig, api_client: Any = None) -> None:
        self.apps, self.core = api_clients(api_client)
        self.namespace = cfg.autoscaler.namespace
        self.deployments = {
            m: mc.autoscaling.deployment or f"sluice-worker-{m}" for m, mc in cfg.models.items()
        }
        self.selectors: dict[str, str] = {}

    def _call(self, what: str, fn: Any, *args: Any, **kw: Any) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            return fn(*args, **kw)
        except (ApiException, OSError) as e:
            reason = getattr(e, "reason", None) or str(e)
            raise BackendError(f"kubernetes: {what}: {reason}") from e
        except Exception as e:  # urllib3 errors surface under several names
            raise BackendError(f"kubernetes: {what}: {e}") from e

    def current(self, model: str) -> int:
        name = self.deployments[model]
        read = self.apps.read_namespaced_deployment_scale
        scale = self._call(f"read scale of {self.namespace}/{name}", read, name, self.namespace)
        if scale.status is not None and scale.status.selector:
            self.selectors[model] = scale.status.selector
        return int(scale.spec.replicas or 0)

    def scale(self, model: str, desired: int, workers: list[WorkerInfo]) -> None:
        name = self.deployments[model]
        current = self.current(model)
        if desired < current:
            self.mark_deletion_costs(model, workers)
        self._call(f"scale {self.namespace}/{name} to {desired}",
                   self.apps.patch_namespaced_deployment_scale, name, self.namespace,
                   {"spec": {"replicas": int(desired)}})  # fmt: skip
        log.info("kubernetes: %s/%s replicas %d -> %d", self.namespace, name, current, desired)

    def mark_deletion_costs(self, model: str, workers: list[WorkerInfo]) -> int:
        """Annotate each pod whose cost changed; returns how many were patched."""
        selector = self.selectors.get(model, f"app=sluice-worker-{model}")
        pods = self._call(f"list pods ({selector})", self.core.list_namespaced_pod,
                          self.namespace, label_selector=selector)  # fmt: skip
        by_host = {w.host: w for w in workers}
        patched = 0
        for pod in pods.items:
            pod_name = pod.metadata.name
            cost = str(deletion_cost(by_host.get(pod_name)))
            if (pod.metadata.annotations or {}).get(DELETION_COST) == cost:
                continue
            body = {"metadata": {"annotations": {DELETION_COST: cost}}}
            self._call(f"annotate pod {pod_name}", self.core.patch_namespaced_pod,
                       pod_name, self.namespace, body)  # fmt: skip
            patched += 1
        return patched

    def tick(self, now_s: float) -> None:
        return None

    def close(self) -> None:
        return None
