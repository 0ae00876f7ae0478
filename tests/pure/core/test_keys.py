"""Key layout: one hash tag per model, so one Redis Cluster slot per model."""

from __future__ import annotations

import inspect

import pytest
from redis.crc import key_slot

from sluice import keys

MODEL_KEY_FUNCS = [
    (name, fn)
    for name, fn in inspect.getmembers(keys, inspect.isfunction)
    if list(inspect.signature(fn).parameters)[:1] == ["model"] and not name.startswith("_")
]


def _call(fn, model: str, partition: int = 0) -> str:  # type: ignore[no-untyped-def]
    extra = {
        "partition": partition,
        "job_id": f"m.{partition}~1" if partition else "m.1",
        "bucket": "32",
        "key": "k",
        "worker_id": "w",
        "window_start_s": 10,
        "bulk_id": "m.bulk1",
    }
    params = list(inspect.signature(fn).parameters)[1:]
    return fn(model, *(extra[p] for p in params))


def test_every_model_key_function_is_covered() -> None:
    assert len(MODEL_KEY_FUNCS) >= 15


@pytest.mark.parametrize("model", ["minilm", "synthetic", "a", "x-y_9"])
def test_all_keys_of_one_model_share_one_cluster_slot(model: str) -> None:
    slots = {key_slot(_call(fn, model).encode()) for _, fn in MODEL_KEY_FUNCS}
    assert slots == {key_slot(f"{{{model}}}".encode())}


@pytest.mark.parametrize("model", ["minilm", "x-y_9"])
def test_a_partition_s_keys_share_its_own_slot(model: str) -> None:
    # every key a partition's scripts touch: those that take a partition (ADR 0159)
    per = [fn for _, fn in MODEL_KEY_FUNCS if "partition" in inspect.signature(fn).parameters]
    per += [keys.job_key, keys.delivery_key, keys.stream_key]
    slots = {key_slot(_call(fn, model, 2).encode()) for fn in per}
    assert slots == {key_slot(f"{{{model}~2}}".encode())}


def test_different_models_can_land_on_different_slots() -> None:
    slots = {key_slot(keys.queue_key(f"model{i}", "32").encode()) for i in range(20)}
    assert len(slots) > 1


def test_no_double_separators() -> None:
    for _, fn in MODEL_KEY_FUNCS:
        key = _call(fn, "m")
        assert "::" not in key and key.startswith("sluice:{m}:")
