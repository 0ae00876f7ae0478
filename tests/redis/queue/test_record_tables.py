"""The record layouts generated into Lua (sluice/records.py) on a real server: a
declared field reads as its name, a misspelt one stops the script."""

from __future__ import annotations

import pytest
import redis

from sluice.records import lua_constants

pytestmark = pytest.mark.redis


def test_a_declared_field_is_its_name_and_a_misspelt_one_raises(r: redis.Redis) -> None:
    src = lua_constants()
    assert r.eval(src + "return {JOB.status, DELIVERY.jttl, BULK.rq_job, RANK.bulk}", 0) == [
        "status",
        "jttl",
        "rq_job",
        3,
    ]
    with pytest.raises(redis.ResponseError, match="JOB: no stauts"):
        r.eval(src + "return redis.call('HGET', 'x', JOB.stauts)", 0)
