"""The web server: Daphne with its own flags, tuned for large upload chunks.

    python -m dashboard.serve -b 0.0.0.0 -p 8080 dashboard.asgi:application

Two of Daphne's defaults cost upload throughput (benchmarks/bench_upload.py):
- Twisted reads a socket 64 KiB at a time; 1 MiB reads halve the per-byte overhead.
- Daphne hands a request body to the application in 8 KiB messages; one upload chunk
  of 8 MiB became 1,024 trips through the event loop. 1 MiB messages make it 8.
Neither raises memory use per request: Twisted keeps bodies over 100 kB in a temporary file.

Upload chunks (``common.request_limits.is_chunk``) are not buffered at all: Daphne would
hand a body over only once all of it is in its temporary file, so a 16 MiB chunk's hashing
and writing waited for its receipt, and its bytes were written and read once more on the
way. For a chunk the application starts as soon as the headers are in, and the body goes to
it in messages of BODY_MESSAGE_SIZE as the bytes arrive; it is hashed and written while the
rest still arrives. The socket is no longer read while more than BODY_QUEUE_LIMIT bytes
wait for the application, so a slow disk bounds memory per chunk, not the chunk's size. An
application that answers before the whole body is in gets its answer sent, and the
connection is then closed (the rest of the body cannot be told from a next request); the
chunk path reads the body to its end before answering, so its errors keep the connection.
Since a streamed chunk holds a worker thread, the upload's lock and a database connection
until its body is in, a client that sends no byte for UPLOAD_CHUNK_IDLE_S seconds (a laptop
gone to sleep, a dead link that TCP has not noticed) is disconnected: the application sees
``http.disconnect`` and cuts the partial chunk off, as when the client closes.

A request body over the limit of ``common.request_limits.body_limit`` is refused with
413 as soon as its Content-Length arrives (or, without one, once that many bytes came),
before Daphne queues any of it for the application.

A third change bounds memory towards slow websocket clients: ASGI has no backpressure, so
Daphne writes every event into the TCP connection's buffer however far behind its client
is. Here each websocket connection tells, through Twisted's producer API, when its send
buffer is over the read size; a client that stays behind by WEBSOCKET_MAX_BACKLOG bytes
more is disconnected (the page reconnects and resyncs over HTTP, see static/js/live.js).

Several processes: one Daphne is one Python process, bound by its GIL (50 users on the
model pages: 41-51 requests/s on one, about twice that on two). With ``--workers N``
(default WEB_WORKERS, else one more than the cores this process may run on) the first
process binds N listening sockets on the address with SO_REUSEPORT, starts one Daphne on
each (``--fd``), restarts one that
dies (on the same socket, which the front keeps open), and stops them all on SIGTERM or
SIGINT. One socket per worker matters: with one shared socket, whichever Daphne woke first
accepted a whole batch of connections, and browsers keep theirs open, so one worker served
45 of 58 connections while the other idled (measured with ``ss``; p95 with 1 s think time
fell from ~400 to ~200 ms once the kernel spread them by hash). Each keeps everything above. Websockets work across them through the Channels
Redis layer; nothing a request needs lives in one process's memory alone.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from functools import partial
from io import BytesIO
from typing import Any

from daphne import server as daphne_server
from daphne.cli import CommandLineInterface
from daphne.http_protocol import HTTPFactory, WebRequest
from daphne.server import Server
from daphne.ws_protocol import WebSocketProtocol
from twisted.internet import tcp
from twisted.internet.interfaces import IPushProducer
from zope.interface import implementer

from common.env import env_int
from common.memory import tune_malloc

READ_SIZE = 1024 * 1024
BODY_MESSAGE_SIZE = 1024 * 1024
BODY_QUEUE_LIMIT = 4 * BODY_MESSAGE_SIZE  # of a streamed body, received and not yet taken
CHUNK_IDLE_S = env_int("UPLOAD_CHUNK_IDLE_S", 60, minimum=5)
WEBSOCKET_MAX_BACKLOG = env_int("WEBSOCKET_MAX_BACKLOG", 4 * 1024 * 1024, minimum=64 * 1024)
# One more process than cores: a Daphne runs its sync views one at a time on one thread, so
# while a view waits on Triton or the database its core idles; the spare process fills those
# waits (50 users: 2 Daphnes 160 requests/s, 3 Daphnes 175, on 2 cores; BENCHMARKS.md).
WEB_WORKERS = env_int("WEB_WORKERS", len(os.sched_getaffinity(0)) + 1, minimum=1)
MAX_WORKERS = 64
RESTART_PAUSE_S = 1.0
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


class StreamedBodyQueue(asyncio.Queue[dict[str, Any]]):
    """The application's input queue for a request whose body is streamed: the body goes in
    through ``put_body`` as it arrives, and taking a body message tells the request, which
    reads the socket again once the application has caught up. Daphne's ``process`` queues
    the body it buffered, which for a streamed request is none: that message is dropped."""

    def __init__(self, request: BoundedWebRequest) -> None:
        super().__init__()
        self.request = request

    def put_nowait(self, item: dict[str, Any]) -> None:
        if item.get("type") != "http.request":  # http.disconnect
            super().put_nowait(item)

    def put_body(self, body: bytes, more: bool) -> None:
        super().put_nowait({"type": "http.request", "body": body, "more_body": more})

    def get_nowait(self) -> dict[str, Any]:  # asyncio.Queue.get ends here too
        item = super().get_nowait()
        if item.get("type") == "http.request":
            self.request.body_taken(len(item["body"]))
        return item


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
    streamed = False  # the body goes to the application as it arrives
    body_done = False
    paused = False
    queued = 0  # bytes of a streamed body queued and not yet taken
    last_byte = 0.0  # time.monotonic() of the last body byte of a streamed body

    def gotLength(self, length: int | None) -> None:
        # The application has set Django up by now (body_limit reads its settings).
        from common.request_limits import body_limit, is_chunk

        channel: Any = self.channel
        method = getattr(channel, "_command", b"").decode("latin-1")
        path = getattr(channel, "_path", b"").split(b"?", 1)[0].decode("latin-1")
        content_type = (self.requestHeaders.getRawHeaders(b"content-type") or [b""])[0]
        self.limit = body_limit(method, path, content_type.decode("latin-1"))
        oversized = length is not None and length > self.limit
        self.content_type = content_type.decode("latin-1")
        if oversized:
            super().gotLength(0)
            self._refuse(length)
            self._transport().loseConnection()
        elif (
            length  # a body to stream, of a known length
            and is_chunk(method, path)
            and not self.requestHeaders.hasHeader(b"upgrade")
        ):
            self._stream()
        else:
            super().gotLength(length)

    def _stream(self) -> None:
        """Start the application now, before the body, which is handed over as it arrives."""
        channel: Any = self.channel
        self.streamed = True
        self.last_byte = time.monotonic()
        self._held: list[bytes] = []
        self._held_size = 0
        self.content = BytesIO()  # what Daphne's process reads as the body so far: nothing
        # What Twisted's requestReceived would set once the body is in.
        self.method, self.uri, self.clientproto = channel._command, channel._path, channel._version
        self.path = self.uri.split(b"?", 1)[0]
        self.args: dict[bytes, list[bytes]] = {}
        self.process()  # checks the headers, builds the scope and starts the application

    def _hold(self, data: bytes) -> None:
        self.last_byte = time.monotonic()
        if self.finished or self.application_queue is None:
            return  # answered already (an error): the rest is dropped, the connection closes
        self._held.append(data)
        self._held_size += len(data)
        if self._held_size >= BODY_MESSAGE_SIZE:
            self._pass_on(more=True)

    def _pass_on(self, more: bool) -> None:
        body = self._held[0] if len(self._held) == 1 else b"".join(self._held)
        self._held, self._held_size = [], 0
        self.queued += len(body)
        self.application_queue.put_body(body, more)  # type: ignore[union-attr]
        if more and not self.paused and self.queued > BODY_QUEUE_LIMIT:
            self.paused = True
            self._transport().pauseProducing()

    def body_taken(self, size: int) -> None:
        self.queued -= size
        if self.paused and self.queued <= BODY_QUEUE_LIMIT // 2:
            self.paused = False
            self.last_byte = time.monotonic()  # the client was waiting on us, not idle
            if self.channel is not None and self._transport() is not None:
                self._transport().resumeProducing()

    def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:
        if not self.streamed:
            super().requestReceived(command, path, version)
            return
        self.body_done = True  # the application runs already: the last message says so
        if not self.finished and self.application_queue is not None:
            self._pass_on(more=False)

    def check_timeouts(self) -> None:  # Daphne calls it every 2 s
        if (
            self.streamed
            and not self.body_done
            and not self.paused
            and not self.finished
            and self.channel is not None
            and time.monotonic() - self.last_byte > CHUNK_IDLE_S
        ):
            log.warning(
                "upload chunk from %s: no byte for %d s, disconnected",
                self.client_addr,
                CHUNK_IDLE_S,
            )
            self._transport().abortConnection()  # the application gets http.disconnect
            return
        super().check_timeouts()

    def handle_reply(self, message: dict[str, Any]) -> None:
        if (
            self.streamed
            and not self.body_done
            and message.get("type") == "http.response.start"
            and self.channel is not None
        ):
            # Answered before the whole body came: the rest of it would be read as the next
            # request, so the connection closes once the answer is out, and what still comes
            # is buffered by Twisted as it does while a request is handled, not parsed.
            channel: Any = self.channel
            channel.persistent = False
            channel._handlingRequest = True
            self.responseHeaders.setRawHeaders(b"connection", [b"close"])
        super().handle_reply(message)

    def handleContentChunk(self, data: bytes) -> None:
        self.received += len(data)
        if self.refused:
            if self.received > 2 * self.limit:
                self._transport().loseConnection()
            return
        if self.received > self.limit:
            self._refuse(None)
            return
        if self.streamed:
            self._hold(data)
        else:
            super().handleContentChunk(data)

    def _transport(self) -> Any:
        return self.channel.transport  # type: ignore[union-attr]

    def _refuse(self, length: int | None) -> None:
        from common.request_limits import too_large_body

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

    def create_application(self, protocol: Any, scope: dict[str, Any]) -> Any:
        if not getattr(protocol, "streamed", False):
            return super().create_application(protocol, scope)
        # Daphne's own, with the queue of a streamed body.
        if protocol not in self.connections:
            return None
        assert "application_instance" not in self.connections[protocol]
        queue = StreamedBodyQueue(protocol)
        scope.setdefault("asgi", {"version": "3.0"})
        instance = self.application(
            scope=scope, receive=queue.get, send=partial(self.handle_reply, protocol)
        )
        self.connections[protocol]["application_instance"] = asyncio.ensure_future(
            instance, loop=asyncio.get_event_loop()
        )
        return queue

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


def serve_one(argv: list[str]) -> None:
    """One Daphne, with the changes above, on Daphne's own command line."""
    tune_malloc()
    # A class attribute Twisted documents as the read size of a connection.
    tcp.Connection.bufferSize = READ_SIZE
    DashboardCommandLine().run(argv)


def _front_arguments(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    """``--workers`` and the address (``-b``/``-p``) the front binds; the rest is Daphne's."""
    front = argparse.ArgumentParser(add_help=False)
    front.add_argument("--workers", type=int, default=WEB_WORKERS)
    front.add_argument("-b", "--bind", default="127.0.0.1")
    front.add_argument("-p", "--port", type=int, default=8000)
    options, rest = front.parse_known_args(argv)
    if not 1 <= options.workers <= MAX_WORKERS:
        raise SystemExit(f"--workers (WEB_WORKERS): 1 to {MAX_WORKERS}, got {options.workers}")
    return options, rest


def listening_socket(host: str, port: int, reuse_port: bool = False) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:  # only processes of this user may join the port (Linux checks the UID)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host.strip("[]"), port))
    sock.listen(1024)
    sock.set_inheritable(True)
    return sock


class Workers:
    """N Daphnes, each on its own listening socket of one port, each restarted when it dies,
    all stopped on SIGTERM/SIGINT (what the supervisor, Docker or Ctrl-C send)."""

    def __init__(self, socks: list[socket.socket], daphne_args: list[str]) -> None:
        self.socks = socks
        self.count = len(socks)
        self.daphne_args = daphne_args
        self.procs: dict[int, subprocess.Popen] = {}
        self.stopping = False

    def start(self, index: int) -> None:
        fd = self.socks[index].fileno()
        self.procs[index] = subprocess.Popen(
            [sys.executable, "-m", "dashboard.serve", "--worker", "--fd", str(fd),
             *self.daphne_args],
            pass_fds=(fd,),
            env={**os.environ, "WEB_WORKER_INDEX": str(index)},
        )  # fmt: skip

    def stop(self, *_: object) -> None:
        self.stopping = True
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        for index in range(self.count):
            self.start(index)
        log.info("web: %d Daphne workers, one socket each on one port", self.count)
        while not self.stopping:
            time.sleep(0.5)
            for index, proc in list(self.procs.items()):
                if proc.poll() is not None and not self.stopping:
                    log.error("web worker %d exited with %s: restarting it", index, proc.returncode)
                    time.sleep(RESTART_PAUSE_S)
                    self.start(index)
        deadline = time.monotonic() + 20
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return 0


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if "--worker" in args:  # one of the front's Daphnes
        serve_one([a for a in args if a != "--worker"])
        return
    options, daphne_args = _front_arguments(args)
    if options.workers == 1 or any(a in daphne_args for a in ("--fd", "-u", "-e")):
        serve_one(["-b", options.bind, "-p", str(options.port), *daphne_args])
        return
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    socks = [
        listening_socket(options.bind, options.port, reuse_port=True)
        for _ in range(options.workers)
    ]
    raise SystemExit(Workers(socks, daphne_args).run())


if __name__ == "__main__":
    main()
