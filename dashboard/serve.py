"""The web server: Daphne with its own flags, tuned for large upload chunks.

    python -m dashboard.serve -b 0.0.0.0 -p 8080 dashboard.asgi:application

Two of Daphne's defaults cost upload throughput (benchmarks/bench_upload.py):
- Twisted reads a socket 64 KiB at a time; 1 MiB reads halve the per-byte overhead.
- Daphne hands a request body to the application in 8 KiB messages; one upload chunk
  of 8 MiB became 1,024 trips through the event loop. 1 MiB messages make it 8.
Neither raises memory use per request: Twisted keeps bodies over 100 kB in a temporary file.

A request body over the limit of ``dashboard.request_limits.body_limit`` is refused with
413 as soon as its Content-Length arrives (or, without one, once that many bytes came),
before Daphne queues any of it for the application.

A third change bounds memory towards slow websocket clients: ASGI has no backpressure, so
Daphne writes every event into the TCP connection's buffer however far behind its client
is. Here each websocket connection tells, through Twisted's producer API, when its send
buffer is over the read size; a client that stays behind by WEBSOCKET_MAX_BACKLOG bytes
more is disconnected (the page reconnects and resyncs over HTTP, see static/js/live.js).
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from daphne import server as daphne_server
from daphne.cli import CommandLineInterface
from daphne.http_protocol import HTTPFactory, WebRequest
from daphne.server import Server
from daphne.ws_protocol import WebSocketProtocol
from twisted.internet import tcp
from twisted.internet.interfaces import IPushProducer
from zope.interface import implementer

from .env import env_int
from .memory import tune_malloc

READ_SIZE = 1024 * 1024
BODY_MESSAGE_SIZE = 1024 * 1024
WEBSOCKET_MAX_BACKLOG = env_int("WEBSOCKET_MAX_BACKLOG", 4 * 1024 * 1024, minimum=64 * 1024)
log = logging.getLogger("dashboard.serve")


@implementer(IPushProducer)
class SendBacklog:
    """Registered as the producer of a websocket's TCP transport: Twisted pauses it while
    the transport's unsent data is over its buffer size and resumes it once drained."""

    def __init__(self) -> None:
        self.paused = False
        self.queued = 0  # bytes handed to the transport since it paused

    def pauseProducing(self) -> None:
        self.paused = True

    def resumeProducing(self) -> None:
        self.paused = False
        self.queued = 0

    def stopProducing(self) -> None:
        self.paused = False


class BoundedWebSocketProtocol(WebSocketProtocol):
    backlog: SendBacklog | None = None

    def onOpen(self) -> None:
        transport = self.transport
        self.backlog = SendBacklog()
        # The HTTP channel that handed this connection over is still its producer.
        if getattr(transport, "producer", None) is not None:
            transport.unregisterProducer()
        transport.registerProducer(self.backlog, True)
        super().onOpen()

    def serverSend(self, content: str | bytes, binary: bool = False) -> None:
        backlog = self.backlog
        if backlog is not None and backlog.paused:
            backlog.queued += len(content)
            if backlog.queued > WEBSOCKET_MAX_BACKLOG:
                log.warning(
                    "websocket client %s stopped reading: disconnected with %d bytes unsent",
                    self.client_addr, backlog.queued,
                )  # fmt: skip
                backlog.paused = False
                self.backlog = None
                self.transport.abortConnection()
                return
        super().serverSend(content, binary)


class BoundedWebRequest(WebRequest):
    """Refuses an oversized body before it is buffered (Twisted calls gotLength with the
    declared length before the first body byte, then handleContentChunk per block).

    A declared length over the limit is answered at once and the connection closed: the
    body is never read. A body without one (chunked) that passes the limit is answered at
    once too, then read on and dropped up to one more limit's worth, so a client that
    ends it reads the 413 before the connection closes; one that keeps sending is cut off.
    """

    refused = False
    received = 0
    limit = 0
    content_type = ""

    def gotLength(self, length: int | None) -> None:
        # The application has set Django up by now (body_limit reads its settings).
        from .request_limits import body_limit

        channel: Any = self.channel
        method = getattr(channel, "_command", b"").decode("latin-1")
        path = getattr(channel, "_path", b"").split(b"?", 1)[0].decode("latin-1")
        content_type = (self.requestHeaders.getRawHeaders(b"content-type") or [b""])[0]
        self.limit = body_limit(method, path, content_type.decode("latin-1"))
        oversized = length is not None and length > self.limit
        super().gotLength(0 if oversized else length)
        self.content_type = content_type.decode("latin-1")
        if oversized:
            self._refuse(length)
            self._transport().loseConnection()

    def handleContentChunk(self, data: bytes) -> None:
        self.received += len(data)
        if self.refused:
            if self.received > 2 * self.limit:
                self._transport().loseConnection()
            return
        if self.received > self.limit:
            self._refuse(None)
            return
        super().handleContentChunk(data)

    def _transport(self) -> Any:
        return self.channel.transport  # type: ignore[union-attr]

    def _refuse(self, length: int | None) -> None:
        from .request_limits import too_large_body

        self.refused = True
        kind, body = too_large_body(length, self.limit, self.content_type)
        head = (
            b"HTTP/1.1 413 Payload Too Large\r\nContent-Type: " + kind + b"\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n"
        )
        self._transport().write(head + body)
        log.warning("request body over %d bytes refused from %s", self.limit, self.client_addr)

    def process(self) -> Any:
        if self.refused:  # the whole (dropped) body arrived: the 413 is out, close
            self._transport().loseConnection()
            return None
        return super().process()


class BoundedHTTPFactory(HTTPFactory):
    def buildProtocol(self, addr: Any) -> Any:
        protocol = super().buildProtocol(addr)
        protocol.requestFactory = BoundedWebRequest
        return protocol


class DashboardServer(Server):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("request_buffer_size", BODY_MESSAGE_SIZE)
        super().__init__(*args, **kwargs)

    def run(self) -> None:
        from twisted.internet import reactor

        # run() builds the websocket factory, then starts the reactor: swap its protocol in.
        reactor.callWhenRunning(self._bound_websockets)  # type: ignore[attr-defined]
        # run() also builds the HTTP factory from its module's name for it, before listening.
        daphne_server.HTTPFactory = BoundedHTTPFactory  # type: ignore[misc]
        super().run()

    def _bound_websockets(self) -> None:
        self.ws_factory.protocol = BoundedWebSocketProtocol


class DashboardCommandLine(CommandLineInterface):
    server_class = DashboardServer


def main(argv: list[str] | None = None) -> None:
    tune_malloc()
    # A class attribute Twisted documents as the read size of a connection.
    tcp.Connection.bufferSize = READ_SIZE
    DashboardCommandLine().run(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
