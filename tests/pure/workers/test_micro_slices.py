"""A torch handler's ``params.micro_batch`` (ADR 0164, issue 31 section 3): a batch
runs as forward passes of that many rows, with the same answers, and a batch whose
jobs all ended stops between two passes."""

from __future__ import annotations

from typing import Any

import torch
from hypothesis import given
from hypothesis import strategies as st

from sluice.jobs import ClaimedJob
from tests.kit.workers import MODEL, mixed_texts, worker_config
from workers.execute import BatchRunner
from workers.handlers import HandlerContext
from workers.handlers.base import Collated
from workers.handlers.micro import slices
from workers.handlers.tiny import TinyHandler

torch.set_num_threads(1)


class Counting(TinyHandler):
    """The tiny model, counting its forward passes."""

    passes = 0

    def forward(self, batch: Collated) -> Any:
        self.passes += 1
        return super().forward(batch)


def tiny(**params: Any) -> Counting:
    h = Counting(HandlerContext(MODEL, worker_config(params=dict(params)).model(MODEL)))
    h.load()
    return h


def answers(h: TinyHandler, texts: list[str]) -> list[Any]:
    batch = h.collate(texts, [1] * len(texts))
    return h.postprocess(h.infer(batch), batch)


def test_micro_batches_give_the_same_answers_in_more_passes() -> None:
    texts = mixed_texts(8, seed=7)
    whole, sliced = tiny(), tiny(micro_batch=3)
    assert answers(sliced, texts) == answers(whole, texts)
    assert (whole.passes, sliced.passes) == (1, 3)


def test_a_batch_whose_jobs_all_ended_stops_between_micro_batches() -> None:
    h = tiny(micro_batch=2)
    asked: list[list[str]] = []

    def all_stopped(ids: list[str]) -> bool:
        asked.append(ids)
        return True  # the cancel arrived while the first pass ran

    jobs = [ClaimedJob(f"m.{i}", text, 1, 1, 0) for i, text in enumerate(mixed_texts(6))]
    res = BatchRunner(h, all_stopped=all_stopped).run(jobs)
    assert h.passes == 1  # two of six rows computed, then it stopped
    assert res.outcomes == [] and not res.failed


def test_a_slice_is_trimmed_to_its_own_longest_input() -> None:
    mask = torch.tensor([[1, 1, 0, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1]])
    data = {"input_ids": mask * 7, "attention_mask": mask}
    first, second = slices(Collated(data, 3, 15, 8), 2)
    assert first.data["attention_mask"].shape == (2, 2) and first.size == 2
    assert second.data["input_ids"].tolist() == [[7, 7, 7, 7, 7]]


@given(rows=st.integers(1, 40), size=st.integers(0, 12))
def test_slices_cover_every_row_once_in_order(rows: int, size: int) -> None:
    parts = slices(Collated(list(range(rows)), rows, rows, rows), size)
    assert [x for p in parts for x in p.data] == list(range(rows))
    assert all(p.size == len(p.data) for p in parts)
    assert all(p.size <= size for p in parts) or (len(parts) == 1 and (size == 0 or rows <= size))
