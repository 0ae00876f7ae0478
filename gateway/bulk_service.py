"""What the bulk routes do: store an upload, queue its coordinator, read, cancel.

A generative model's upload is refused (422): its lines would reach the queue
unadmitted. The upload is stored as lines (nothing is parsed here: each line is parsed and
estimated when its coordinator feeds it, and fails alone). Queueing the first
coordinator slice on RQ is best effort: if it fails, the bulk job is already in
its model's active set and a ``sluice bulk worker``'s reaper starts it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from gateway.state import GatewayState
from sluice.bulk.lines import custom_id_of, output_line, split_upload
from sluice.bulk.ops import BulkState, new_bulk_id
from sluice.errors import BulkUnavailable, InputTooLarge, InvalidInput, SluiceError
from sluice.jobs import Webhook
from sluice.redact import redact

log = logging.getLogger("sluice.gateway")
OUTPUT_CHUNK = 1000  # output lines per Redis round trip while streaming


async def read_upload(chunks: AsyncIterator[bytes], limit: int) -> bytes:
    """The whole body, refused (413) as soon as it passes ``limit``."""
    parts, seen = [], 0
    async for part in chunks:
        seen += len(part)
        if seen > limit:
            raise InputTooLarge(
                f"bulk file is over the limit of {limit} bytes (bulk.max_file_bytes)"
            )
        parts.append(part)
    return b"".join(parts)


async def submit(
    st: GatewayState, model: str, body: bytes, owner: str | None, webhook: Webhook | None = None
) -> dict[str, Any]:
    if st.model(model).generate is not None:  # 404 for an unknown model first
        # A bulk line is fed to the queue raw, never tokenized nor admitted, and a
        # generative worker claims no bulk batch: refused, not accepted to fail.
        raise InvalidInput(
            f"model {model!r} is generative: bulk uploads are not served for it; "
            f"submit its jobs through POST /v1/models/{model}/jobs or the OpenAI routes"
        )
    if st.bulk_refused:
        raise BulkUnavailable(st.bulk_refused)
    lines = await asyncio.to_thread(split_upload, body, st.gw.max_body_bytes)
    if not body.strip():
        raise InvalidInput("the bulk file is empty: one JSON object a line, each with an 'input'")
    limit = st.cfg.bulk.max_lines
    if len(lines) > limit:
        raise InputTooLarge(
            f"bulk file has {len(lines)} lines, the limit is {limit} (bulk.max_lines)"
        )
    bulk_id = new_bulk_id(model)
    now_ms = int(time.time() * 1000)
    grace_ms = int(st.cfg.bulk.lease_s * 1000)
    ttl = st.cfg.webhooks.record_ttl_s
    create = st.bulk.create(model, bulk_id, lines, owner, now_ms, grace_ms, webhook, ttl)
    await st.call(st.queue.run(create))
    st.metrics.bulk_submitted.labels(model).inc()
    if st.bulk_enqueue is not None:
        await asyncio.to_thread(_enqueue, st.bulk_enqueue, bulk_id)
    rec = await get(st, bulk_id, owner)
    return view(rec)


def _enqueue(enqueue: Callable[[str], Any], bulk_id: str) -> None:
    try:
        enqueue(bulk_id)
    except Exception as e:  # noqa: BLE001 - the reaper starts it: accepted is never lost
        log.warning(
            "bulk %s: could not queue its coordinator on RQ (%s); a bulk worker's "
            "reaper will start it",
            bulk_id,
            redact(str(e)),
        )


async def get(st: GatewayState, bulk_id: str, owner: str | None) -> BulkState:
    return await st.call(st.queue.run(st.bulk.get(bulk_id, owner)))


async def cancel(st: GatewayState, bulk_id: str, owner: str | None) -> str:
    return await st.call(st.queue.run(st.bulk.cancel(bulk_id, owner or "")))


def view(b: BulkState) -> dict[str, Any]:
    """What GET /v1/bulk/{id} answers: state, counts, rate and ETA."""
    return b.view()


async def output(st: GatewayState, b: BulkState) -> AsyncIterator[bytes]:
    """The output file, one line per input line in input order; lines a cancelled or
    failed bulk job never ran say so."""
    for start in range(0, b.total, OUTPUT_CHUNK):
        stop = min(b.total, start + OUTPUT_CHUNK)
        try:
            chunk = st.bulk.output_chunk(b.id, start, stop, with_input=b.state != "completed")
            outs, ins = await st.call(st.queue.run(chunk))
        except SluiceError as e:
            # Headers are sent: a truncated file (no final line) is all that can say so.
            log.warning("bulk %s: output cut at line %d: %s", b.id, start + 1, e)
            return
        lines = []
        for i, out in enumerate(outs):
            if out is None:
                text = ins[i] if i < len(ins) else ""
                err = {"type": b.state, "message": f"not run to the end: bulk job {b.state}"}
                out = output_line(start + i + 1, custom_id_of(text), b.state, error=err)
            lines.append(out)
        yield ("\n".join(lines) + "\n").encode()
