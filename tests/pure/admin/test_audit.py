"""The audit trail (sluice.audit) on fakeredis: what an entry holds, its order, its cap,
and the admin metrics that count the same actions."""

from __future__ import annotations

import asyncio
import logging

import fakeredis
import pytest
from fakeredis import aioredis as fake_aioredis

from gateway.metrics import GatewayMetrics
from sluice import audit, keys
from sluice.records import AUDIT_MAXLEN


def test_an_entry_says_who_did_what_to_how_many(caplog: pytest.LogCaptureFixture) -> None:
    r = fakeredis.FakeRedis()
    with caplog.at_level(logging.INFO, logger="sluice.audit"):
        audit.record(r, actor="ops", action="queue.purge", model="m", count=7, detail={"p": "low"})
    audit.record(r, actor="", action="dead_letters.redrive", model="n", count=2)
    newest, oldest = audit.read(r)
    assert (newest.actor, newest.action, newest.model, newest.count) == (
        "",
        "dead_letters.redrive",
        "n",
        2,
    )
    assert (oldest.actor, oldest.count, oldest.detail) == ("ops", 7, {"p": "low"})
    assert oldest.at_ms > 0 and oldest.id < newest.id
    assert [e.model for e in audit.read(r, model="m")] == ["m"]
    assert "queue.purge" in caplog.text and '"actor": "ops"' in caplog.text


def test_the_async_writer_writes_the_same_entry() -> None:
    r = fake_aioredis.FakeRedis(server=fakeredis.FakeServer(), decode_responses=True)

    async def go() -> list[audit.AuditEntry]:
        await audit.arecord(r, actor="a", action="retry", model="m", count=1, detail={"id": "x"})
        return await audit.aread(r, limit=5)

    (entry,) = asyncio.run(go())
    assert (entry.actor, entry.action, entry.count, entry.detail) == ("a", "retry", 1, {"id": "x"})


def test_the_stream_is_capped() -> None:
    r = fakeredis.FakeRedis()
    for i in range(AUDIT_MAXLEN + 300):
        audit.record(r, actor="a", action="x", model="m", count=i)
    assert int(r.xlen(keys.audit_key())) <= AUDIT_MAXLEN + 200  # MAXLEN ~: about the cap


def test_the_admin_metrics_count_actions_and_jobs() -> None:
    m = GatewayMetrics()
    m.count_admin("m", "queue.purge", 5)
    m.count_admin("m", "queue.purge", 0)
    text = m.render().decode()
    assert 'sluice_admin_actions_total{action="queue.purge",model="m"} 2.0' in text
    assert 'sluice_admin_jobs_total{action="queue.purge",model="m"} 5.0' in text
