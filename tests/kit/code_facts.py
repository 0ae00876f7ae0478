"""What the code actually uses, read from the code itself (never copied here).

The deploy checks compare these against the manifests, so a rename in
gateway/, workers/, autoscaler/ or sluice/ shows up as a failing check in
tests/*/deploy instead of a silently broken dashboard or probe.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import typer
from prometheus_client import CollectorRegistry

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
PACKAGES = ("sluice", "gateway", "workers", "autoscaler", "notifier", "bulkworker")
METRIC_PACKAGES = ("gateway", "workers", "autoscaler", "notifier", "bulkworker", "sluice")

SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
    "gauge": ("",),
    "info": ("_info",),
    "stateset": ("",),
    "enum": ("",),
}


@dataclass(frozen=True)
class Metric:
    name: str  # the family name (a counter's without _total)
    type: str
    labels: frozenset[str]

    def samples(self) -> set[str]:
        return {self.name + s for s in SUFFIXES.get(self.type, ("",))}


def _construct(cls: type) -> Any | None:
    """Build a metrics holder with the fewest arguments it takes (a model name if it needs one)."""
    for args in ((), ("m",)):
        try:
            return cls(*args)
        except TypeError:
            continue
    return None


def _labels_by_name(obj: Any) -> dict[str, frozenset[str]]:
    out: dict[str, frozenset[str]] = {}
    for value in vars(obj).values():
        name = getattr(value, "_name", None)
        labels = getattr(value, "_labelnames", None)
        if isinstance(name, str) and labels is not None:
            out[name] = frozenset(labels)
    return out


def _builds_registry(path: Path) -> bool:
    """The module calls ``CollectorRegistry(...)``: it keeps metrics of its own."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.id if isinstance(f, ast.Name) else getattr(f, "attr", None)
            if name == "CollectorRegistry":
                return True
    return False


def _metric_modules() -> list[str]:
    """Every ``*.metrics`` module, and any other module that builds its own
    CollectorRegistry (the webhook notifier keeps its metrics beside its loop)."""
    names = []
    for pkg in METRIC_PACKAGES:
        path = ROOT / pkg
        for info in pkgutil.walk_packages([str(path)], prefix=f"{pkg}."):
            if info.name.rsplit(".", 1)[-1] == "metrics":
                names.append(info.name)
                continue
            if info.ispkg:
                continue
            where = Path(getattr(info.module_finder, "path", ""))
            source = where / (info.name.rsplit(".", 1)[-1] + ".py")
            if source.is_file() and _builds_registry(source):
                names.append(info.name)
    return names


@cache
def _metric_holders() -> tuple[Any, ...]:
    """An instance of every class of the metrics modules that owns a ``registry``."""
    holders = []
    for modname in _metric_modules():
        module = importlib.import_module(modname)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != modname:
                continue
            obj = _construct(cls)
            if isinstance(getattr(obj, "registry", None), CollectorRegistry):
                holders.append(obj)
    return tuple(holders)


@cache
def exported_metrics() -> dict[str, Metric]:
    """Every metric family the metrics modules define, by family name.

    Each metrics module's classes are instantiated; whatever owns a
    ``registry`` (a CollectorRegistry) is collected, exactly as a scrape would.
    """
    found: dict[str, Metric] = {}
    for obj in _metric_holders():
        labels = _labels_by_name(obj)
        for family in obj.registry.collect():
            found[family.name] = Metric(
                family.name, family.type, labels.get(family.name, frozenset())
            )
    return found


@cache
def literal_label_values() -> dict[tuple[str, str], frozenset[str]]:
    """(family, label) -> the values the code gives that label, for the labels
    every ``.labels(...)`` call of the metric fills with a string literal
    (``m.deliveries.labels(c.model, "dead")``: outcome is "delivered" or "dead").

    A call is tied to its metric by the attribute it is made on, where one metric
    holder, and only one, has an attribute of that name; a label given a variable
    anywhere has no known values.
    """
    by_attr: dict[str, set[tuple[str, tuple[str, ...]]]] = {}
    for obj in _metric_holders():
        for attr, value in vars(obj).items():
            name, labels = getattr(value, "_name", None), getattr(value, "_labelnames", None)
            if isinstance(name, str) and labels is not None:
                by_attr.setdefault(attr, set()).add((name, tuple(labels)))
    values: dict[tuple[str, str], set[str] | None] = {}
    for path in _py_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "labels"
                and isinstance(node.func.value, ast.Attribute)
            ):
                continue
            owners = by_attr.get(node.func.value.attr, set())
            if len(owners) != 1:
                continue
            ((name, labels),) = owners
            given = dict(zip(labels, node.args, strict=False))
            given |= {k.arg: k.value for k in node.keywords if k.arg}
            for label, arg in given.items():
                key = (name, label)
                literal = isinstance(arg, ast.Constant) and isinstance(arg.value, str)
                if not literal:
                    values[key] = None
                elif key not in values:
                    values[key] = {arg.value}
                elif (known := values[key]) is not None:
                    known.add(arg.value)
    return {k: frozenset(v) for k, v in values.items() if v}


def sample_names() -> dict[str, Metric]:
    """Every series name a scrape can show (``x_total``, ``x_bucket``, ...) -> its family."""
    out: dict[str, Metric] = {}
    for m in exported_metrics().values():
        for s in m.samples():
            out[s] = m
    return out


def _py_files() -> list[Path]:
    return [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")]


@cache
def env_vars_read() -> frozenset[str]:
    """SLUICE_* names the code mentions (os.environ reads and typer envvar= constants)."""
    pattern = re.compile(r"^SLUICE_[A-Z0-9_]+$")
    names: set[str] = set()
    for path in _py_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if pattern.match(node.value):
                    names.add(node.value)
    return frozenset(names)


@cache
def cli_group() -> Any:
    """The ``sluice`` command as click sees it (typer vendors its own click)."""
    import sluice.cli

    return typer.main.get_command(sluice.cli.app)


def cli_command(path: tuple[str, ...]) -> Any | None:
    """``sluice <path...>`` (``("bulk", "worker")``) as a click command, or None."""
    cmd = cli_group()
    for word in path:
        cmd = getattr(cmd, "commands", {}).get(word)
        if cmd is None:
            return None
    return cmd


def cli_leaf_commands() -> frozenset[tuple[str, ...]]:
    """The path of every runnable ``sluice`` command (groups walked, not listed)."""
    out: set[tuple[str, ...]] = set()
    todo: list[tuple[tuple[str, ...], Any]] = [((), cli_group())]
    while todo:
        path, cmd = todo.pop()
        subs = getattr(cmd, "commands", None)
        if subs is None:
            out.add(path)
        else:
            todo += [((*path, name), sub) for name, sub in subs.items()]
    return frozenset(out)


def cli_options(path: tuple[str, ...]) -> dict[str, Any]:
    """``--flag`` -> parameter of ``sluice <path...>``."""
    cmd = cli_command(path)
    assert cmd is not None, f"sluice {' '.join(path)}: no such command"
    out: dict[str, Any] = {}
    for p in cmd.params:
        for opt in [*p.opts, *getattr(p, "secondary_opts", [])]:
            out[opt] = p
    return out


@cache
def gateway_routes() -> frozenset[str]:
    """Paths the gateway app serves (built without touching Redis)."""
    from gateway.app import create_app
    from sluice.config import parse_config

    cfg = parse_config({"models": {"m": {"handler": "synthetic"}}})
    app = create_app(cfg, "redis://127.0.0.1:1/0")
    # The OpenAPI document lists every included router's paths, whatever the
    # FastAPI version's internal route objects look like.
    return frozenset(app.openapi()["paths"])


# -- what the autoscaler's Kubernetes backend calls -----------------------------
_API_VERBS = {
    "read": "get",
    "list": "list",
    "patch": "patch",
    "replace": "update",
    "create": "create",
    "delete": "delete",
}
_KIND_PLURALS = {
    "deployment": "deployments",
    "pod": "pods",
    "stateful_set": "statefulsets",
    "replica_set": "replicasets",
    "config_map": "configmaps",
}
_CALL = re.compile(
    r"^(read|list|patch|replace|create|delete)_namespaced_([a-z_]+?)(_scale|_status)?$"
)


def _api_group(method: str) -> str:
    from kubernetes import client

    if hasattr(client.AppsV1Api, method):
        return "apps"
    if hasattr(client.CoreV1Api, method):
        return ""
    raise AssertionError(f"{method}: neither AppsV1Api nor CoreV1Api; extend tests/*/deploy")


@cache
def kubernetes_permissions() -> frozenset[tuple[str, str, str]]:
    """(api group, resource[/subresource], verb) for every namespaced API call the
    autoscaler's code makes (``read_namespaced_deployment_scale`` -> apps,
    deployments/scale, get)."""
    used: set[tuple[str, str, str]] = set()
    for path in (ROOT / "autoscaler").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Attribute):
                continue
            m = _CALL.match(node.attr)
            if not m:
                continue
            verb, kind, sub = m.group(1), m.group(2), m.group(3)
            if kind not in _KIND_PLURALS:
                raise AssertionError(f"{path}: {node.attr}: unknown kind; extend tests/*/deploy")
            resource = _KIND_PLURALS[kind] + (f"/{sub[1:]}" if sub else "")
            used.add((_api_group(node.attr), resource, _API_VERBS[verb]))
    return frozenset(used)


@cache
def worker_downward_env() -> dict[str, str]:
    """Env var -> pod field (``metadata.name``) the worker process reads about its pod.

    Read from the code: the worker names its pod in its heartbeat from
    ``sluice.config.POD_NAME_ENV``, and the autoscaler's backend matches on it.
    """
    from sluice.config import POD_NAME_ENV

    used = any(
        isinstance(node, ast.Name) and node.id == "POD_NAME_ENV"
        for path in (ROOT / "workers").rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
    )
    return {POD_NAME_ENV: "metadata.name"} if used else {}


def kubernetes_backend(cfg: Any) -> Any:
    """The autoscaler's Kubernetes backend for ``cfg`` (an API client that never connects)."""
    from kubernetes import client

    from autoscaler.backends.kubernetes import KubernetesBackend

    return KubernetesBackend(cfg, api_client=client.ApiClient())


def tool(name: str) -> str | None:
    """A binary installed by the dev extra (next to this Python), else on PATH."""
    import shutil

    return shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)


def metrics_bind_defaults() -> dict[str, object]:
    """``module.Class`` -> the default ``addr`` of its ``serve`` (where it has one)."""
    out: dict[str, object] = {}
    for modname in _metric_modules():
        module = importlib.import_module(modname)
        for name, cls in inspect.getmembers(module, inspect.isclass):
            serve = getattr(cls, "serve", None)
            if cls.__module__ != modname or serve is None:
                continue
            param = inspect.signature(serve).parameters.get("addr")
            if param is not None:
                out[f"{modname}.{name}"] = param.default
    return out
