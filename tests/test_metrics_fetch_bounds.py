"""A metrics answer is read with bounds (security review, item 8): at most METRICS_MAX_BYTES,
no redirect followed; and a server's gRPC address is a host and port, never another of
gRPC's targets such as unix:/path."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from common.env import parse_hostport
from registry.server_rules import check_hostport
from triton_api import client as triton_client
from triton_api.client import TritonError, fetch_metrics

PAGE = b'nv_inference_count{model="m",version="1"} 3\n'


class _Handler(BaseHTTPRequestHandler):
    asked: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.asked.append(self.path)
        if self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "/elsewhere")
            self.end_headers()
            return
        body = b"#" * (triton_client.METRICS_MAX_BYTES + 10) if self.path == "/huge" else PAGE
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def metrics_server() -> Iterator[str]:
    _Handler.asked = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_page_within_the_bound_is_read(metrics_server: str) -> None:
    samples = fetch_metrics(f"{metrics_server}/metrics", 5)
    assert [(s.name, s.value) for s in samples] == [("nv_inference_count", 3.0)]


def test_a_page_over_the_bound_is_refused_not_read_whole(metrics_server: str) -> None:
    with pytest.raises(TritonError, match="are over 16 MiB: not read"):
        fetch_metrics(f"{metrics_server}/huge", 5)


def test_a_redirect_is_not_followed(metrics_server: str) -> None:
    with pytest.raises(TritonError, match="unreachable"):
        fetch_metrics(f"{metrics_server}/redirect", 5)
    assert _Handler.asked == ["/redirect"]


def test_an_unreachable_page_is_named_without_its_password() -> None:
    with pytest.raises(TritonError, match="unreachable") as failed:
        fetch_metrics("http://scraper:s3cret@127.0.0.1:1/metrics", 5)
    assert "http://scraper:**@127.0.0.1:1/metrics" in str(failed.value)
    assert "s3cret" not in str(failed.value)


@pytest.mark.parametrize(
    "address",
    ["unix:/tmp/triton.sock:1", "unix:///tmp/triton.sock:1", "dns:///triton:8001",
     "ipv4:127.0.0.1:8001", "unix-abstract:x:1", "host/path:8001", "triton:８００１",
     "triton:0", "triton:65536", "-triton:8001"],
)  # fmt: skip
def test_a_grpc_address_other_than_host_and_port_is_refused(address: str) -> None:
    with pytest.raises(ValueError, match="host:port"):
        check_hostport(address)


@pytest.mark.parametrize(
    ("address", "kept"),
    [("triton-a:8001", "triton-a:8001"), ("http://10.0.0.5:8001/", "10.0.0.5:8001"),
     ("[::1]:8001", "[::1]:8001"), ("gpu1.example.org:8001", "gpu1.example.org:8001")],
)  # fmt: skip
def test_host_and_port_addresses_are_kept(address: str, kept: str) -> None:
    assert parse_hostport(address) == kept
