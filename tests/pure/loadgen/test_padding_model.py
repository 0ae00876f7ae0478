"""``sluice bench padding``'s model of the live queue (sluicebench/scripts/padding.py,
ADR 0170): its batches keep claim.lua's limits and hand out every text once, and
they pad more than the in-process limit's sorted batches, which is the gap the
benchmark measures. No model: lengths only, milliseconds."""

from __future__ import annotations

import random

from sluicebench.scripts.padding import QueueModel, live_batches, pass_ms, sorted_batches

BOUNDS, MAX_BATCH, MAX_TOKENS = [32, 128, 512], 64, 16384


def lengths(n: int) -> list[int]:
    rng = random.Random(3)  # the e2e workload's bands: 70% short, 25% medium, 5% long
    bands = [(7, 22), (42, 102), (202, 302)]
    # Capped at 256: MiniLM's max_seq_length truncates the longest.
    return [min(256, rng.randint(*rng.choices(bands, weights=[70, 25, 5])[0])) for _ in range(n)]


def padding(batches: list[list[int]], lens: list[int]) -> float:
    padded = sum(len(b) * max(lens[i] for i in b) for b in batches)
    return padded / sum(lens)


def test_live_batches_keep_the_claims_limits_and_pad_more_than_sorted_ones() -> None:
    lens = lengths(2000)
    model = QueueModel(BOUNDS, MAX_BATCH, MAX_TOKENS, lens)
    batches = live_batches(model, lens, clients=64, workers=2, ms=pass_ms)
    assert sorted(i for b in batches for i in b) == list(range(len(lens)))  # each once
    for b in batches:
        bucket = {model.bucket(i) for i in b}
        assert len(bucket) == 1  # one bucket per claim
        bound = bucket.pop()
        assert 1 <= len(b) <= MAX_BATCH
        assert len(b) == 1 or len(b) * max(lens[i] for i in b) <= MAX_TOKENS // bound * bound
    assert padding(batches, lens) > padding(sorted_batches(lens), lens) + 0.1


def test_a_pass_costs_its_tokens_unpadded_and_its_rows_times_longest_padded() -> None:
    assert pass_ms([10, 30], unpadded=True) < pass_ms([10, 30], unpadded=False)
    assert pass_ms([20, 20], unpadded=True) == pass_ms([20, 20], unpadded=False)
