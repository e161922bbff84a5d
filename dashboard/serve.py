"""The web server: Daphne with its own flags, tuned for large upload chunks.

    python -m dashboard.serve -b 0.0.0.0 -p 8080 dashboard.asgi:application

Two of Daphne's defaults cost upload throughput (benchmarks/bench_upload.py):
- Twisted reads a socket 64 KiB at a time; 1 MiB reads halve the per-byte overhead.
- Daphne hands a request body to the application in 8 KiB messages; one upload chunk
  of 8 MiB became 1,024 trips through the event loop. 1 MiB messages make it 8.
Neither raises memory use per request: Twisted keeps bodies over 100 kB in a temporary file.

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

from daphne.cli import CommandLineInterface
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


class DashboardServer(Server):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("request_buffer_size", BODY_MESSAGE_SIZE)
        super().__init__(*args, **kwargs)

    def run(self) -> None:
        from twisted.internet import reactor

        # run() builds the websocket factory, then starts the reactor: swap its protocol in.
        reactor.callWhenRunning(self._bound_websockets)  # type: ignore[attr-defined]
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
