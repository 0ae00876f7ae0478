"""The dead-letter actions' pure parts: which dead letters a filter takes, the page
cursor, the CLI's choice of dead letters, and the retry backoff's config bounds."""

from __future__ import annotations

import pytest
import typer

from sluice.admin import ops
from sluice.admin.dead_letters_cli import _selection
from sluice.config import RetryConfig
from sluice.errors import InvalidInput

DL = ops.DeadLetter(
    id="m.1",
    model="m",
    bucket="32",
    priority="normal",
    owner="alice",
    attempts=3,
    error={"type": "oom", "message": "x"},
    last_worker="w-1",
    enqueued_at_ms=1000,
    started_at_ms=1500,
    failed_at_ms=2000,
    run_ms=5.0,
)


@pytest.mark.parametrize(
    ("where", "takes"),
    [
        (ops.DeadLetterFilter(), True),
        (ops.DeadLetterFilter(error_type="oom"), True),
        (ops.DeadLetterFilter(error_type="timeout"), False),
        (ops.DeadLetterFilter(last_worker="w-1", bucket="32"), True),
        (ops.DeadLetterFilter(last_worker="w-1", bucket="128"), False),  # every field must match
        (ops.DeadLetterFilter(priority="normal", owner="alice"), True),
        (ops.DeadLetterFilter(owner="bob"), False),
        (ops.DeadLetterFilter(failed_after_ms=2000), True),  # from, inclusive
        (ops.DeadLetterFilter(failed_before_ms=2000), False),  # until, exclusive
        (ops.DeadLetterFilter(failed_after_ms=1000, failed_before_ms=3000), True),
    ],
)
def test_a_filter_takes_a_dead_letter_only_when_every_field_given_matches(
    where: ops.DeadLetterFilter, takes: bool
) -> None:
    assert where.matches(DL) is takes


@pytest.mark.parametrize("cursor", ["x", "12", "12:", ":m.1", "-1:m.1"])
def test_a_cursor_not_made_by_a_page_is_refused(cursor: str) -> None:
    with pytest.raises(InvalidInput):
        next(ops.page("m", 10, cursor))


def test_the_cli_needs_exactly_one_way_to_choose() -> None:
    assert _selection(["m.1"], False)[0] == {"ids": ["m.1"]}
    assert _selection(None, False, bucket="32", worker=None)[0] == {"filter": {"bucket": "32"}}
    assert _selection(None, True)[0] == {}
    for ids, every, where in (
        (None, False, {}),
        (["m.1"], True, {}),
        (None, True, {"bucket": "32"}),
    ):
        with pytest.raises(typer.Exit):
            _selection(ids, every, **where)


def test_the_backoff_cannot_start_above_its_cap() -> None:
    with pytest.raises(ValueError, match="backoff_ms"):
        RetryConfig(backoff_ms=5000, backoff_max_ms=1000)
    assert RetryConfig().backoff_ms == 500 and RetryConfig(backoff_ms=0).backoff_ms == 0
