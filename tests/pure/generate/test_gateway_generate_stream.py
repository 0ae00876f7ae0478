"""GET /v1/jobs/{id}/stream on fakeredis: SSE framing, resume after Last-Event-ID
or ?after=, 204 once all was seen, endings made from the record, and its errors."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from sluice.records import StreamEvent
from tests.waits import async_wait_until

pytestmark = pytest.mark.asyncio(loop_scope="function")


def events(body: str) -> list[dict[str, Any]]:
    """SSE events as {id, event, data} (comments and retry lines dropped)."""
    out = []
    for block in body.split("\n\n"):
        ev: dict[str, Any] = {}
        for line in block.splitlines():
            name, _, value = line.partition(": ")
            if name in ("id", "event"):
                ev[name] = value
            elif name == "data":
                ev["data"] = json.loads(value)
        if "event" in ev:
            out.append(ev)
    return out


async def submit(gen: Any, prompt: str = "hey") -> str:
    resp = await gen.client.post("/v1/models/g/jobs", json={"input": {"prompt": prompt}})
    assert resp.status_code == 202, resp.text
    return str(resp.json()["id"])


async def stream(gen: Any, job_id: str, **kw: Any) -> Any:
    return await gen.client.get(f"/v1/jobs/{job_id}/stream", **kw)


async def test_a_live_stream_sends_every_entry_with_its_id_then_ends(gen: Any) -> None:
    job_id = await submit(gen)
    worker = asyncio.create_task(gen.serve(["He", "l", "lo"]))
    resp = await stream(gen, job_id)
    await worker
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/event-stream")
    assert resp.text.startswith("retry: ")
    got = events(resp.text)
    assert [e["event"] for e in got] == ["start", "tokens", "tokens", "tokens", "end"]
    entries = await gen.redis.xrange(f"sluice:{{g}}:stream:{job_id}")
    assert [e["id"] for e in got] == [eid for eid, _ in entries]
    toks = [e["data"] for e in got if e["event"] == "tokens"]
    assert [t["index"] for t in toks] == [0, 2, 3]  # output offsets: "He" is two ids
    assert "".join(t["text"] for t in toks) == "Hello"
    assert toks[0]["token_ids"] == [ord("H"), ord("e")] and toks[0]["attempt"] == 1
    end = got[-1]["data"]
    assert end["result"]["text"] == "Hello" and end["result"]["finish_reason"] == "stop"


async def test_resume_after_last_event_id_or_after_sends_only_what_follows(gen: Any) -> None:
    job_id = await submit(gen)
    await gen.serve(["a", "b", "c"])
    full = events((await stream(gen, job_id)).text)
    second = full[1]["id"]
    resumed = events((await stream(gen, job_id, headers={"Last-Event-ID": second})).text)
    assert [e["id"] for e in resumed] == [e["id"] for e in full[2:]]
    by_query = events((await stream(gen, job_id, params={"after": second})).text)
    assert by_query == resumed


async def test_a_resume_after_the_final_event_is_204(gen: Any) -> None:
    job_id = await submit(gen)
    await gen.serve(["a"])
    last = events((await stream(gen, job_id)).text)[-1]["id"]
    resp = await stream(gen, job_id, headers={"Last-Event-ID": last})
    assert resp.status_code == 204


async def test_a_job_cancelled_in_the_queue_ends_with_an_error_made_from_its_record(
    gen: Any,
) -> None:
    job_id = await submit(gen)
    assert (await gen.client.delete(f"/v1/jobs/{job_id}")).status_code == 200
    resp = await stream(gen, job_id)
    got = events(resp.text)
    assert [(e["event"], e["id"]) for e in got] == [("error", "end")]
    assert got[0]["data"]["error"]["status"] == "cancelled"
    assert (await stream(gen, job_id, headers={"Last-Event-ID": "end"})).status_code == 204


async def test_a_job_cancelled_while_followed_ends_the_stream(gen: Any) -> None:
    job_id = await submit(gen)
    task = asyncio.create_task(stream(gen, job_id))
    await async_wait_until(lambda: gen.state.tokens.listeners == 1, what="a listener")
    await gen.client.delete(f"/v1/jobs/{job_id}")
    got = events((await task).text)
    assert got[-1]["event"] == "error" and gen.state.tokens.listeners == 0


async def test_an_idle_stream_sends_keep_alive_comments(gen: Any) -> None:
    gen.state.tokens.keepalive_s = 0.05
    job_id = await submit(gen)
    task = asyncio.create_task(stream(gen, job_id))
    await async_wait_until(lambda: gen.state.tokens.keepalives >= 2, what="2 keep-alives")
    await gen.serve(["x"])
    body = (await task).text
    assert ": keep-alive" in body and events(body)[-1]["event"] == "end"


async def test_a_restart_is_an_event_and_the_new_run_starts_at_index_0(gen: Any) -> None:
    job_id = await submit(gen)
    await gen.serve(["a", "b", "c"], restart_after=2)
    got = events((await stream(gen, job_id)).text)
    kinds = [e["event"] for e in got]
    assert kinds == ["start", "tokens", "tokens", "restart", "tokens", "tokens", "tokens", "end"]
    assert got[3]["data"]["attempt"] == 2 and got[4]["data"]["index"] == 0


async def test_stream_errors(gen: Any) -> None:
    assert (await stream(gen, "g.nope")).status_code == 404
    plain = await gen.client.post("/v1/models/m/jobs", json={"input": "a b"})
    resp = await stream(gen, plain.json()["id"])
    assert resp.status_code == 422 and "no token stream" in resp.json()["error"]["message"]
    job_id = await submit(gen)
    resp = await stream(gen, job_id, headers={"Last-Event-ID": "nonsense"})
    assert resp.status_code == 422


async def test_many_clients_of_one_job_share_one_reader(gen: Any) -> None:
    job_id = await submit(gen)
    clients = [asyncio.create_task(stream(gen, job_id)) for _ in range(5)]
    hub = gen.state.tokens

    def following() -> int:  # joined (hub.listeners) is before the reader has them
        reader = hub.readers.get("g")
        return sum(len(w.listeners) for w in reader.streams.values()) if reader else 0

    await async_wait_until(lambda: following() == 5, what="5 listeners on the reader")
    assert hub.listeners == 5 and len(hub.readers["g"].streams) == 1
    await gen.serve(["o", "k"])
    bodies = [events((await c).text) for c in clients]
    assert all(b == bodies[0] for b in bodies) and bodies[0][-1]["event"] == StreamEvent.END


async def test_a_shutdown_ends_open_streams_and_refuses_new_ones(gen: Any) -> None:
    job_id = await submit(gen)
    task = asyncio.create_task(stream(gen, job_id))
    await async_wait_until(lambda: gen.state.tokens.listeners == 1, what="a listener")
    assert gen.state.tokens.close() == 1
    gen.state.waiters.close()
    got = events((await task).text)
    assert all(e["event"] not in ("end", "error") for e in got)  # cut: the client resumes
    assert (await stream(gen, job_id)).status_code == 503
