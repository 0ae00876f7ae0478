"""The embedding handler agrees with sentence-transformers, whatever shares the batch."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import redis

from sluice.config import parse_config
from sluice.cost import bundled_model_dir
from sluice.jobs import JobStatus
from sluice.queue import QueueClient
from tests.kit.workers import MODEL, Running, cosines, mixed_texts, submit
from workers.handlers import HandlerContext, make_handler

pytestmark = [pytest.mark.system, pytest.mark.redis]


@pytest.fixture(scope="module")
def reference() -> Callable[[list[str]], np.ndarray]:
    st = pytest.importorskip("sentence_transformers")
    model = st.SentenceTransformer(str(bundled_model_dir()), device="cpu")
    return lambda texts: model.encode(texts, batch_size=1, normalize_embeddings=True)


def test_worker_embeddings_match_sentence_transformers(
    r: redis.Redis,
    start_worker: Callable[..., Running],
    reference: Callable[[list[str]], np.ndarray],
) -> None:
    cfg = parse_config(
        {
            "models": {
                MODEL: {
                    "handler": "embedding",
                    "cost": {"method": "tokenizer", "truncate": True},
                    "batching": {"max_batch": 8, "max_batch_tokens": 4096},
                }
            }
        }
    )
    qc = QueueClient(r, dict(cfg.models))
    texts = mixed_texts(24)
    ids = submit(qc, cfg, texts)
    assert start_worker(cfg, burst=True).join(timeout_s=120) == 0
    recs = [qc.get(i) for i in ids]
    assert all(x.status == JobStatus.SUCCEEDED for x in recs)
    got = np.array([x.result["embedding"] for x in recs])
    assert got.shape == (24, 384)
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    assert cosines(got, reference(texts)).min() >= 0.9999


def test_one_mixed_length_batch_matches_too(reference: Callable[[list[str]], np.ndarray]) -> None:
    cfg = parse_config({"models": {MODEL: {"handler": "embedding"}}})
    handler = make_handler(HandlerContext(MODEL, cfg.model(MODEL)))
    handler.load()
    texts = mixed_texts(16, seed=11)  # 2 to 290 words in one batch, padded to the longest
    batch = handler.collate(texts, [1] * len(texts))
    assert batch.padded_tokens > 2 * batch.real_tokens  # much padding, on purpose
    got = np.array([x["embedding"] for x in handler.postprocess(handler.infer(batch), batch)])
    assert cosines(got, reference(texts)).min() >= 0.9999
