"""A small asyncio TCP proxy with network faults ("toxics") for tests, loopback only.

Put it between a client and a server (the ingester and mosquitto, or the ingester and
PostgreSQL) and switch faults on and off from test code:

- `latency(ms, jitter_ms)`: delay every chunk forwarded in either direction;
- `blackhole()`: stop forwarding but keep sockets open (a half-open peer);
- `freeze()`: the same for the connections open now only; new ones work (a lost NAT entry);
- `reset()`: abort every open connection with an RST (SO_LINGER 0);
- `limit_data(n)`: close each new connection after n bytes upstream (cut mid-packet);
- `drop_after(n)`: silently discard everything after n bytes per connection;
- `heal()`: back to a plain pipe.

The proxy runs its own event loop in a daemon thread, so synchronous tests can drive it.
Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import random
import socket
import struct
import threading
from dataclasses import dataclass, field


@dataclass
class _Toxics:
    latency_s: float = 0.0
    jitter_s: float = 0.0
    blackhole: bool = False
    limit_bytes: int | None = None
    drop_after_bytes: int | None = None


@dataclass(eq=False)  # identity-hashed: kept in a set of open connections
class _Conn:
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter
    sent_up: int = 0
    sent_down: int = 0
    frozen: bool = False
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


class TcpProxy:
    """Forward 127.0.0.1:`port` to 127.0.0.1:`target_port`, with switchable faults."""

    def __init__(self, target_port: int, *, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.port = 0
        self.connections_total = 0
        self._toxics = _Toxics()
        self._conns: set[_Conn] = set()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="tcpproxy")

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> TcpProxy:
        """Listen on a free loopback port; returns self."""
        self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(self._listen(), self._loop)
        self.port = fut.result(timeout=10)
        return self

    def stop(self) -> None:
        """Close the listener and every connection, end the loop thread."""
        fut = asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop)
        fut.result(timeout=10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- toxics ---------------------------------------------------------------------------------
    def latency(self, ms: float, jitter_ms: float = 0.0) -> None:
        """Delay each forwarded chunk by ms ± jitter_ms."""
        self._toxics.latency_s, self._toxics.jitter_s = ms / 1000, jitter_ms / 1000

    def blackhole(self) -> None:
        """Stop forwarding in both directions; connections stay open."""
        self._toxics.blackhole = True

    def freeze(self) -> int:
        """Stop forwarding on the connections open now, in both directions, and keep them
        open (nor is a close passed on): new connections work. Returns how many were frozen."""
        conns = list(self._conns)
        for conn in conns:
            conn.frozen = True
        return len(conns)

    def limit_data(self, n: int) -> None:
        """Close connections once n bytes went upstream on them."""
        self._toxics.limit_bytes = n

    def drop_after(self, n: int) -> None:
        """Discard (without closing) everything after n bytes per direction per connection."""
        self._toxics.drop_after_bytes = n

    def heal(self) -> None:
        """Remove every toxic and thaw frozen connections."""
        self._toxics = _Toxics()
        for conn in list(self._conns):
            conn.frozen = False

    def reset(self) -> int:
        """Abort every open connection with an RST; returns how many were reset."""
        fut = asyncio.run_coroutine_threadsafe(self._reset_all(), self._loop)
        return fut.result(timeout=10)

    @property
    def open_connections(self) -> int:
        """Connections currently proxied."""
        return len(self._conns)

    # -- internals ------------------------------------------------------------------------------
    async def _listen(self) -> int:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        await self._reset_all()

    async def _reset_all(self) -> int:
        conns = list(self._conns)
        for conn in conns:
            for writer in (conn.client, conn.upstream):
                sock = writer.get_extra_info("socket")
                if sock is not None:
                    # Linger 0 turns close() into an RST: the peer sees ECONNRESET at once.
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                    struct.pack("ii", 1, 0))
                writer.transport.abort()
            for task in conn.tasks:
                task.cancel()
        self._conns.clear()
        return len(conns)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(*self.target), timeout=5)
        except (OSError, TimeoutError):
            writer.transport.abort()
            return
        self.connections_total += 1
        conn = _Conn(writer, up_writer)
        self._conns.add(conn)
        conn.tasks = [
            asyncio.ensure_future(self._pipe(conn, reader, up_writer, upstream=True)),
            asyncio.ensure_future(self._pipe(conn, up_reader, writer, upstream=False)),
        ]

    async def _pipe(self, conn: _Conn, reader: asyncio.StreamReader,
                    writer: asyncio.StreamWriter, *, upstream: bool) -> None:
        try:
            while True:
                data = await reader.read(65536)
                while conn.frozen:  # what came in waits, and so does an end of stream
                    await asyncio.sleep(0.05)
                if not data:
                    break
                tox = self._toxics
                while tox.blackhole and tox is self._toxics:
                    await asyncio.sleep(0.05)
                tox = self._toxics
                if tox.latency_s or tox.jitter_s:
                    delay = tox.latency_s + random.uniform(-tox.jitter_s, tox.jitter_s)  # noqa: S311
                    await asyncio.sleep(max(0.0, delay))
                sent = conn.sent_up if upstream else conn.sent_down
                if tox.drop_after_bytes is not None and sent + len(data) > tox.drop_after_bytes:
                    keep = max(0, tox.drop_after_bytes - sent)
                    data = data[:keep]
                if upstream and tox.limit_bytes is not None:
                    room = tox.limit_bytes - conn.sent_up
                    if room <= len(data):
                        writer.write(data[:max(0, room)])
                        await writer.drain()
                        break
                if data:
                    writer.write(data)
                    await writer.drain()
                if upstream:
                    conn.sent_up += len(data)
                else:
                    conn.sent_down += len(data)
        except (ConnectionError, asyncio.CancelledError, OSError):
            pass
        finally:
            # One side ended: end both, like a real connection drop.
            for w in (conn.client, conn.upstream):
                w.transport.abort()
            self._conns.discard(conn)
