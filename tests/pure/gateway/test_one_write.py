"""A hot answer's head and body in one socket write (gateway.front.one_write, ADR
0176): the same bytes, in the same order, with uvicorn's response state as after
two writes; anything but uvicorn's httptools cycle is sent as before."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from starlette.background import BackgroundTask
from starlette.types import Message
from uvicorn.protocols.http.flow_control import FlowControl
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from gateway.front import one_write
from gateway.responses import Json

SCOPE: dict[str, Any] = {"type": "http", "method": "POST", "path": "/v1/models/m/predict"}


class Transport:
    """What the cycle writes, one entry per write, and whether it closed."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        assert not self.closed
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


def cycle(transport: Transport, keep_alive: bool) -> tuple[RequestResponseCycle, list[int]]:
    done: list[int] = []
    log = logging.getLogger("test")
    c = RequestResponseCycle(
        scope=dict(SCOPE),  # type: ignore[arg-type]
        transport=transport,  # type: ignore[arg-type]
        flow=FlowControl(transport),  # type: ignore[arg-type]
        logger=log,
        access_logger=log,
        access_log=False,
        default_headers=[(b"server", b"uvicorn")],
        message_event=asyncio.Event(),
        expect_100_continue=False,
        keep_alive=keep_alive,
        on_response=lambda: done.append(len(transport.writes)),
    )
    return c, done


def _send(c: RequestResponseCycle) -> Any:
    return c.send  # typed for uvicorn's own messages; an ASGI send all the same


async def _receive() -> Message:
    return {"type": "http.disconnect"}


def _response(**kw: Any) -> Json:
    return Json({"id": "j1", "result": [0.5] * 384}, headers={"Location": "/v1/jobs/j1"}, **kw)


@pytest.mark.parametrize("keep_alive", [True, False])
async def test_the_head_and_body_go_out_in_one_write_as_two_writes_would(keep_alive: bool) -> None:
    two, one = Transport(), Transport()
    c2, done2 = cycle(two, keep_alive)
    await _response()(dict(SCOPE), _receive, _send(c2))
    c1, done1 = cycle(one, keep_alive)
    await one_write(_response(), dict(SCOPE), _receive, _send(c1))
    assert len(two.writes) == 2 and one.writes == [b"".join(two.writes)]
    assert c1.transport is one  # given back
    assert (c1.response_complete, c1.keep_alive) == (c2.response_complete, c2.keep_alive)
    assert one.closed is two.closed is (not keep_alive)
    assert (done1, done2) == ([1], [2])  # the answer written when uvicorn calls it done


async def test_a_background_task_runs_after_the_answer_is_written() -> None:
    t = Transport()
    c, _ = cycle(t, True)
    seen: list[int] = []
    await one_write(_response(background=BackgroundTask(lambda: seen.append(len(t.writes)))),
                    dict(SCOPE), _receive, _send(c))  # fmt: skip
    assert seen == [1] and len(t.writes) == 1


async def test_another_send_is_called_as_before() -> None:
    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    await one_write(_response(), dict(SCOPE), _receive, send)
    assert [m["type"] for m in sent] == ["http.response.start", "http.response.body"]
