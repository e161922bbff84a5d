"""One reader of host:port (triton_api.address) and one set of connection settings
(triton_api.connection): the server's key reaches every client, the load engine's
control client and its transports included."""

from __future__ import annotations

import dataclasses
import json
import shutil
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import hpack
import numpy as np
import pytest

from devstack import services as svc
from profiler_app.engine import grpc_h2
from profiler_app.engine.loadgen import run_sweep
from profiler_app.engine.sequences import http_sequence_requests
from profiler_app.engine.worker_requests import (
    GRPC_METHOD,
    WorkerSpec,
    serialize_grpc,
    serialize_http,
)
from profiler_app.params import SweepParams
from registry.triton_clients import connection
from triton_api.address import join_host_port, split_host_port
from triton_api.aio import AioClient
from triton_api.client import TritonClient, TritonError
from triton_api.connection import Connection

ROOT = Path(__file__).resolve().parent.parent
KEY = ("dashboard-key", "s3cret")

# --- host:port ---------------------------------------------------------------------------------


def test_an_address_splits_into_host_and_port():
    assert split_host_port("triton:8001") == ("triton", 8001)
    assert split_host_port("10.0.0.7:8000") == ("10.0.0.7", 8000)
    assert split_host_port("[::1]:8001") == ("::1", 8001)
    assert split_host_port("[2001:db8::1]:65535") == ("2001:db8::1", 65535)
    assert join_host_port("::1", 8000) == "[::1]:8000"
    assert join_host_port("triton", 8000) == "triton:8000"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("triton", "has no port"),
        (":8001", "has no host"),
        ("triton:http", "has a bad port"),
        ("triton:0", "has a bad port"),
        ("triton:65536", "has a bad port"),
        ("triton:", "has a bad port"),
        ("::1:8001", "in brackets"),
    ],
)
def test_a_bad_address_is_refused_naming_it(text: str, reason: str):
    with pytest.raises(ValueError, match=reason) as caught:
        split_host_port(text)
    assert repr(text) in str(caught.value)


# --- the key ----------------------------------------------------------------------------------


def _server(**fields: Any) -> SimpleNamespace:
    base = dict(name="gpu1", grpc_url="gpu1:8001", http_url="gpu1:8000",
                metrics_url="http://gpu1:8002/metrics", api_key="s3cret",
                api_key_header="dashboard-key", from_env=False)  # fmt: skip
    return SimpleNamespace(**{**base, **fields})


def test_a_servers_connection_carries_its_key_and_timeout_per_protocol(settings):
    settings.TRITON_TIMEOUT_S = 2.5
    grpc = connection(_server(), "grpc")
    assert (grpc.url, grpc.timeout_s, grpc.key_hint) == (
        "gpu1:8001",
        2.5,
        "the key of the server 'gpu1'",
    )
    assert grpc.headers == {"triton-grpc-protocol-dashboard-key": "s3cret"}
    http = connection(_server(), "http")
    assert http.url == "gpu1:8000" and http.headers == {"dashboard-key": "s3cret"}
    assert connection(_server(api_key=""), "grpc").headers == {}
    assert connection(_server(from_env=True), "grpc").key_hint == ""


class _Recording(BaseHTTPRequestHandler):
    """Triton's HTTP endpoint for one model "m", as far as `AioClient.describe` asks."""

    seen: list[dict[str, str]]

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.seen.append({k.lower(): v for k, v in self.headers.items()})
        answers = {
            "/v2/health/live": {},
            "/v2/models/m/ready": {},
            "/v2/models/m": {"name": "m", "inputs": [], "outputs": []},
            "/v2/models/m/config": {"name": "m"},
        }
        body = json.dumps(answers.get(self.path, {})).encode()
        self.send_response(200 if self.path in answers else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def http_peer() -> Iterator[tuple[str, list[dict[str, str]]]]:
    seen: list[dict[str, str]] = []
    handler = type("Handler", (_Recording,), {"seen": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


async def test_the_engines_control_client_sends_the_key_over_http(http_peer):
    url, seen = http_peer
    control = AioClient(Connection(url, "http", KEY, 2.0))
    try:
        metadata, config = await control.describe("m", "")
    finally:
        await control.close()
    assert metadata["name"] == "m" and config["name"] == "m"
    assert len(seen) == 4 and all(h.get("dashboard-key") == "s3cret" for h in seen), seen


def test_the_engines_http_requests_carry_the_key_built_once():
    payloads = [[("IN", "INT32", np.zeros((1, 2), dtype=np.int32))]]
    spec = WorkerSpec(protocol="http", url="h:1", model="m", version="", payloads=payloads,
                      client="threads", headers=(("dashboard-key", "s3cret"),))  # fmt: skip
    assert all(h["dashboard-key"] == "s3cret" for _, h in serialize_http(spec))
    sequence = http_sequence_requests(payloads, spec.headers).build(0, b"7", True, False)
    assert sequence[1]["dashboard-key"] == "s3cret"
    plain = WorkerSpec(**{**spec.__dict__, "headers": ()})
    assert all("dashboard-key" not in h for _, h in serialize_http(plain))


def test_the_lean_grpc_client_puts_the_key_in_its_header_block():
    listener = socket.create_server(("127.0.0.1", 0))
    try:
        url = join_host_port("127.0.0.1", listener.getsockname()[1])
        conn = grpc_h2.UnaryConnection(url, GRPC_METHOD, 5.0, (("triton-grpc-protocol-k", "v"),))
        try:
            headers: dict[Any, Any] = dict(hpack.Decoder().decode(conn.header_block))
        finally:
            conn.close()
    finally:
        listener.close()
    assert headers["triton-grpc-protocol-k"] == "v" and headers[":authority"] == url


# --- against a Triton that restricts every protocol the engine uses ------------------------------


@pytest.mark.integration
async def test_a_keyed_triton_is_checked_and_loaded_only_with_its_key(tmp_path, settings):
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "examples" / "model_repository" / "add_sub", repo / "add_sub")
    ports = svc.TritonPorts(svc.free_port(), svc.free_port(), svc.free_port())
    # HTTP's health stays open: the fixture waits for /v2/health/live without a key.
    restricted = "metadata,model-config,statistics,inference"
    proc = svc.start_tritonserver(
        repo, Path(settings.VAR_DIR), ports, tmp_path / "t.log",
        extra_args=(f"--grpc-restricted-protocol=health,{restricted},model-repository:dashboard-key=s3cret",
                    f"--http-restricted-api={restricted}:dashboard-key=s3cret"),
    )  # fmt: skip
    grpc_url, http_url = f"127.0.0.1:{ports.grpc}", f"127.0.0.1:{ports.http}"
    metrics = f"http://127.0.0.1:{ports.metrics}/metrics"
    try:
        TritonClient(grpc_url, metrics, api_key=KEY).load("add_sub")
        for protocol, url in (("grpc", grpc_url), ("http", http_url)):
            bare = AioClient(Connection(url, protocol, None, 5.0))
            with pytest.raises(TritonError):
                await bare.describe("add_sub", "")
            await bare.close()
            keyed = AioClient(Connection(url, protocol, KEY, 5.0))
            metadata, _ = await keyed.describe("add_sub", "")
            await keyed.close()
            assert metadata["name"] == "add_sub"
        # The transports' requests without the key are refused: the restriction is real.
        payloads = [
            [(n, "FP32", np.zeros((1, 16), dtype=np.float32)) for n in ("INPUT0", "INPUT1")]
        ]
        spec = WorkerSpec(protocol="grpc", url=grpc_url, model="add_sub", version="",
                          payloads=payloads, client="threads")  # fmt: skip
        bare_h2 = grpc_h2.UnaryConnection(grpc_url, GRPC_METHOD)
        with pytest.raises(grpc_h2.GrpcCallError, match="restricted"):
            bare_h2.call(serialize_grpc(spec)[0])
        bare_h2.close()
        params = SweepParams(model="add_sub", start=1, end=1, measurement_window_ms=300,
                             stability_percentage=80, max_windows=3)  # fmt: skip
        for protocol, url, client in (("grpc", grpc_url, "threads"), ("grpc", grpc_url, "aio"),
                                      ("http", http_url, "threads"), ("http", http_url, "aio")):  # fmt: skip
            result = await run_sweep(
                dataclasses.replace(params, protocol=protocol, client=client),
                Connection(url, protocol, KEY, 5.0),
            )
            level = result.levels[0]
            assert level.errors == 0 and level.throughput > 0, (protocol, client)
            assert level.server is not None, (protocol, client)  # statistics read with the key
    finally:
        svc.stop(proc)
