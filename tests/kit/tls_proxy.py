"""A TLS-terminating TCP proxy for tests: the bundled redis-server 6.2 has no TLS.

Clients speak TLS (certificate from a trustme test CA, for 127.0.0.1 and
localhost) to the proxy, which forwards plain bytes to the real server.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import threading
from pathlib import Path

import trustme


class TlsProxy:
    def __init__(self, target_host: str, target_port: int, workdir: Path) -> None:
        self.target = (target_host, target_port)
        self.ca = trustme.CA()
        cert = self.ca.issue_cert("127.0.0.1", "localhost")
        self.ca_file = workdir / "ca.pem"
        self.ca.cert_pem.write_to_path(str(self.ca_file))
        self.ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        cert.configure_cert(self.ctx)
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> TlsProxy:
        self._thread.start()
        assert self._ready.wait(10), "TLS proxy did not start"
        return self

    def stop(self) -> None:
        async def shutdown() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._loop.stop()

        asyncio.run_coroutine_threadsafe(shutdown(), self._loop)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=self.ctx)
        )
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()
        server.close()
        self._loop.close()  # its self-pipe sockets are a ResourceWarning otherwise

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_w), _pipe(up_r, writer))


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    with contextlib.suppress(Exception):
        while data := await src.read(65536):
            dst.write(data)
            await dst.drain()
    with contextlib.suppress(Exception):
        dst.close()
