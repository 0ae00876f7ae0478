"""``sluice up`` with examples/sluice.yaml, untouched, as a new user gets it (one
stack for the module, and the suite's one stack with MiniLM: test_up.py runs the
synthetic models only): the banner's curl works, MiniLM's results land in every
bucket by its tokenizer's count, a bulk file runs on it through ``sluice bulk
submit``, the ``openai`` client embeds through ``/v1/embeddings``; and last (it
leaves a backlog behind), under a backlog that scales MiniLM to its most workers, the
workers' CPU threads never add up to more than the machine's cores (two workers
of torch's default two threads on two cores served less than one worker,
docs/adr/0125), and ``sluice up`` says how it divided the machine."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest
import yaml
from typer.testing import CliRunner

from sluice.cli import app
from sluice.client import Client
from sluice.config import load_config
from sluice.cores import cores_per_worker, machine_cores
from tests.conftest import EXAMPLE_CONFIG
from tests.kit.http import HTTP
from tests.kit.upstack import Up, launch, shut_down
from tests.waits import wait_until

pytestmark = [pytest.mark.system]


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Up]:
    stack = launch(yaml.safe_load(EXAMPLE_CONFIG.read_text()), tmp_path_factory.mktemp("up"))
    yield stack
    shut_down(stack)


def test_banner_gives_a_curl_that_works(example: Up) -> None:
    (line,) = [ln for ln in example.printed if ln.strip().startswith("curl ")]
    words = shlex.split(line)
    assert f"{example.gateway}/v1/models/minilm/predict" in words
    body = json.loads(words[words.index("-d") + 1])
    r = HTTP.post(f"{example.gateway}/v1/models/minilm/predict", json=body, timeout=60)
    assert r.status_code == 200
    assert len(r.json()["result"]["embedding"]) == 384


@pytest.mark.parametrize(("words", "bucket"), [(4, "32"), (60, "128"), (250, "512")])
def test_result_in_every_bucket(example: Up, words: int, bucket: str) -> None:
    with Client(example.gateway) as c:
        job = c.predict("minilm", " ".join(["word"] * words))
    assert job["status"] == "succeeded" and job["bucket"] == bucket
    vec = job["result"]["embedding"]
    assert len(vec) == 384 and abs(sum(v * v for v in vec) - 1.0) < 1e-3


def test_bulk_file_on_the_bundled_model(example: Up, tmp_path: Path) -> None:
    """``sluice bulk submit`` (the command line's own app, in this process)."""
    texts = [f"sentence number {i} about queues" for i in range(40)]
    src = tmp_path / "in.jsonl"
    src.write_text(
        "".join(json.dumps({"input": t, "custom_id": str(i)}) + "\n" for i, t in enumerate(texts))
    )
    out = tmp_path / "out.jsonl"
    args = ["bulk", "submit", str(src), "--model", "minilm", "--url", example.gateway]
    run = CliRunner().invoke(app, [*args, "-o", str(out)])
    if run.exception is not None and not isinstance(run.exception, SystemExit):
        raise run.exception
    assert run.exit_code == 0, run.stderr[-2000:]
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [o["custom_id"] for o in lines] == [str(i) for i in range(40)]
    assert all(len(o["result"]["embedding"]) == 384 for o in lines)


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))  # MiniLM's vectors are unit length


def test_the_openai_client_embeds_with_minilm(example: Up) -> None:
    # Closed at the end: a pooled connection left open fails the suite at exit.
    with openai.OpenAI(base_url=f"{example.gateway}/v1", api_key="unused", timeout=60) as client:
        check_embeddings(client, example)


def check_embeddings(client: openai.OpenAI, example: Up) -> None:
    texts = ["A man is eating food.", "A man is eating bread.", "The new movie is awesome."]
    got = client.embeddings.create(model="minilm", input=texts)  # base64, decoded by the client
    floats = client.embeddings.create(model="minilm", input=texts, encoding_format="float")
    vectors = [d.embedding for d in floats.data]
    assert [len(v) for v in vectors] == [384] * 3
    assert all(abs(cosine(v, v) - 1) < 1e-4 for v in vectors)
    for a, b in zip(got.data, floats.data, strict=True):
        assert a.embedding == pytest.approx(b.embedding, abs=1e-6)  # float32 of the same
    assert cosine(vectors[0], vectors[1]) > cosine(vectors[0], vectors[2]) + 0.3
    costs = HTTP.post(
        f"{example.gateway}/v1/models/minilm/jobs/batch", json={"inputs": texts}, timeout=30
    ).json()["jobs"]
    assert got.usage.prompt_tokens == sum(j["cost"] for j in costs)  # the tokenizer's count
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="text-embedding-3-small", input="x")
    with pytest.raises(openai.BadRequestError, match="dimensions"):
        client.embeddings.create(model="minilm", input="x", dimensions=128)


def test_the_example_stack_never_oversubscribes_the_cores(example: Up) -> None:
    cfg = load_config(EXAMPLE_CONFIG)
    cores = machine_cores()
    per = cores_per_worker(cfg.models["minilm"], cores)
    most = min(cfg.models["minilm"].autoscaling.max_replicas, cores // per)
    assert any(line.startswith(f"cores: {cores} CPU cores") for line in example.printed)
    texts = [" ".join(["token"] * (8 + i % 40)) for i in range(256)]
    for _ in range(24):  # ~6,000 jobs: minutes of work for one worker, so it scales up
        r = HTTP.post(
            f"{example.gateway}/v1/models/minilm/jobs/batch", json={"inputs": texts}, timeout=30
        )
        assert r.status_code == 202, r.text

    held: list[int] = []

    def threads_at_most_cores_until_scaled() -> bool:
        ready = [w for w in example.workers("minilm") if w.state == "ready"]
        threads = [int(w.extra.get("threads", 0)) for w in ready]
        held.append(sum(threads))
        assert sum(threads) <= cores, threads  # at every look, not only at the end
        assert all(t == per for t in threads), threads
        return len(ready) >= most

    wait_until(threads_at_most_cores_until_scaled, 240, f"{most} MiniLM workers", every_s=0.2)
    assert max(held) == most * per <= cores
