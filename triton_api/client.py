"""The synchronous Triton client: every control, metadata, statistics and metrics call that
the pages, the API, the CLI, the poller and the search make.

Every call goes through `TritonClient`: it sets timeouts, keeps one gRPC client for all
threads (tritonclient's HTTP client is gevent-based and not thread-safe; the gRPC one is),
and turns every failure into `TritonError` whose message a user can read: Triton's own
reason text verbatim where Triton gives one, "Triton unreachable at URL" when nothing
answers.

Quirks documented once, here:
- `load_model(config=...)` takes the override as a JSON string of ModelConfig; with
  `files=` the config override is mandatory and file keys are "file:<version>/<name>".
- A load that outlasts the client timeout is still running inside Triton. Sending it
  again would queue a second load, so `load` polls the repository index instead until
  the model leaves LOADING.
- Triton exposes no "control mode" field. In NONE and POLL mode any load/unload answers
  "explicit model load / unload is not allowed if polling is enabled"; in EXPLICIT mode
  unloading a model that does not exist succeeds silently. `control_mode` probes that.

It reads no settings: its addresses, key and timeouts are its constructor's arguments, and
what it remembers per page view is up to the `Memo` it is given (the dashboard's glue,
``registry.triton_clients``, passes both).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import threading
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit, urlunsplit

import grpc
import numpy as np
import tritonclient.grpc as grpcclient
from google.protobuf import json_format
from tritonclient.utils import InferenceServerException

from .connection import Endpoint, key_headers
from .prometheus import MetricSample, parse_prometheus

POLLING_REFUSAL = "explicit model load / unload is not allowed if polling is enabled"
RESTRICTED_REFUSAL = "This protocol is restricted"
PROBE_MODEL = "__dashboard_control_mode_probe__"
# Triton's repository-index states; "not loaded" is ours, for folders Triton never loaded.
STATES = ("READY", "UNAVAILABLE", "LOADING", "UNLOADING")
T = TypeVar("T")
# How long a live server's facts (live, ready, version, extensions, control mode) are kept.
SERVER_FACTS_TTL_S = 3.0
# gRPC backs off up to 120 s between reconnects by default; a dashboard must notice a
# restarted Triton within seconds.
CHANNEL_ARGS = [
    ("grpc.initial_reconnect_backoff_ms", 250),
    ("grpc.min_reconnect_backoff_ms", 250),
    ("grpc.max_reconnect_backoff_ms", 2000),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
]


class Memo(Protocol):
    """Keeps ``compute()``'s answer under ``key`` for as long as its owner decides (the
    dashboard: one reading request), or asks anew each time."""

    def __call__(self, key: Hashable, compute: Callable[[], T], /) -> T: ...


def ask_every_time(key: Hashable, compute: Callable[[], T]) -> T:
    """The `Memo` that remembers nothing (a client used outside a page view)."""
    return compute()


class TritonError(Exception):
    """Any failure talking to Triton, with a message fit to show a user."""

    def __init__(self, message: str, *, unreachable: bool = False, status: str | None = None):
        super().__init__(message)
        self.message = message
        self.unreachable = unreachable
        self.status = status

    def __str__(self) -> str:
        return self.message


@dataclass
class Inferred:
    """One inference request's answer: each output's array and Triton datatype, and the
    round trip as the client saw it."""

    outputs: dict[str, np.ndarray]
    datatypes: dict[str, str]
    elapsed_ns: int
    model_version: str


@dataclass
class ModelState:
    name: str
    version: str
    state: str
    reason: str = ""


@dataclass
class ServerInfo:
    live: bool
    ready: bool
    version: str
    extensions: list[str] = field(default_factory=list)
    control_mode: str = "unknown"  # "explicit", "none/poll" or "unknown"

    @property
    def explicit(self) -> bool:
        return self.control_mode == "explicit"


def _tensors(inputs: Sequence[tuple[str, str, np.ndarray]]) -> list[grpcclient.InferInput]:
    """(name, Triton datatype, array) as the request's input tensors."""
    made = []
    for name, datatype, array in inputs:
        tensor = grpcclient.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array)
        made.append(tensor)
    return made


def _close(client: grpcclient.InferenceServerClient) -> None:
    with contextlib.suppress(Exception):  # already closed or half torn down
        client.close()
    # Its __del__ calls close() again, which fails once grpc is torn down.
    client.close = lambda: None  # type: ignore[method-assign]


class TritonClient:
    def __init__(
        self,
        grpc_url: str,
        metrics_url: str,
        timeout_s: float = 5.0,
        load_timeout_s: float = 120.0,
        api_key: tuple[str, str] | None = None,
        *,
        key_hint: str = "",
        memo: Memo = ask_every_time,
    ) -> None:
        self.grpc_url = grpc_url
        self.key_hint = key_hint
        self.memo = memo
        # Sent on every call: Triton checks it on the restricted ones.
        self.headers = key_headers("grpc", api_key) or None
        self.metrics_url = metrics_url
        self.timeout_s = timeout_s
        self.load_timeout_s = load_timeout_s
        # One gRPC client (one channel) for every thread of the process: gRPC channels are
        # thread-safe, and Django runs each request's sync code in a thread of its own, so
        # a client per thread was a client (and ~45 KiB) per request, never freed.
        self._shared: grpcclient.InferenceServerClient | None = None
        self._lock = threading.Lock()
        self.opened = 0  # clients made over the process's life (a new one after a failure)
        self._facts: tuple[float, ServerInfo] | None = None  # (when, what): server_info
        # Try's channels, one per pair of size limits (reused: a new channel's connection
        # would cost each request a few milliseconds).
        self._bounded: dict[tuple[int, int], grpcclient.InferenceServerClient] = {}
        _live.add(self)

    def close(self) -> None:
        with self._lock:
            client, self._shared = self._shared, None
            bounded, self._bounded = list(self._bounded.values()), {}
        for one in [client, *bounded]:
            if one is not None:
                _close(one)

    # --- plumbing ----------------------------------------------------------------------------

    def _client(self) -> grpcclient.InferenceServerClient:
        client = self._shared
        if client is None:
            with self._lock:
                if self._shared is None:
                    self._shared = grpcclient.InferenceServerClient(
                        self.grpc_url, channel_args=CHANNEL_ARGS
                    )
                    self.opened += 1
                client = self._shared
        return client

    def _once(self, question: str, ask: Callable[[], T]) -> T:
        """``ask()`` once per reading request, its TritonError included (a page whose
        Triton is down waits out one timeout, not one per question)."""

        def outcome() -> T | TritonError:
            try:
                return ask()
            except TritonError as exc:
                return exc

        answer = self.memo(("triton", question, self.grpc_url), outcome)
        if isinstance(answer, TritonError):
            raise answer
        return answer

    def _call(self, method: str, *args: Any, timeout: float | None = None, **kwargs: Any) -> Any:
        client = self._client()
        try:
            return getattr(client, method)(
                *args, headers=self.headers, client_timeout=timeout or self.timeout_s, **kwargs
            )
        except InferenceServerException as exc:
            error = self._translate(exc)
        except grpc.RpcError:  # not always wrapped by tritonclient
            error = TritonError(f"Triton unreachable at {self.grpc_url}", unreachable=True)
        if error.unreachable:
            # A fresh channel next time: recovery must not wait out gRPC's reconnect backoff.
            self._drop_client(client)
            self._facts = None
        raise error

    def _drop_client(self, client: grpcclient.InferenceServerClient) -> None:
        """Forget ``client`` (the one a failed call used) unless another thread already
        replaced it; calls still on it end as they would have: Triton is unreachable."""
        with self._lock:
            if self._shared is not client:
                return
            self._shared = None
        _close(client)

    def _translate(self, exc: InferenceServerException) -> TritonError:
        status = exc.status() or ""
        message = exc.message() or str(exc)
        # Triton itself answers UNAVAILABLE for load/unload outside explicit mode: that is
        # an answer, not a connection failure.
        if RESTRICTED_REFUSAL in message:
            where = self.key_hint or "TRITON_API_KEY (and TRITON_API_KEY_HEADER)"
            return TritonError(
                f"Triton refused the call: {message}. Set {where} to the key Triton's "
                "--grpc-restricted-protocol expects",
                status=status,
            )
        refused_by_triton = POLLING_REFUSAL in message
        if not refused_by_triton and (
            "UNAVAILABLE" in status or "failed to connect" in message.lower()
        ):
            return TritonError(
                f"Triton unreachable at {self.grpc_url}", unreachable=True, status=status
            )
        if "DEADLINE_EXCEEDED" in status:
            return TritonError(
                f"Triton at {self.grpc_url} did not answer within {self.timeout_s:g} s",
                unreachable=True,
                status=status,
            )
        return TritonError(message, status=status)

    # --- server ------------------------------------------------------------------------------

    def is_live(self) -> bool:
        return bool(self._call("is_server_live"))

    def is_ready(self) -> bool:
        return bool(self._call("is_server_ready"))

    def server_metadata(self) -> dict[str, Any]:
        return dict(self._call("get_server_metadata", as_json=True))

    def control_mode(self) -> str:
        try:
            self._call("unload_model", PROBE_MODEL)
        except TritonError as exc:
            if POLLING_REFUSAL in exc.message:
                return "none/poll"
            if exc.unreachable:
                raise
            return "unknown"
        return "explicit"

    def server_info(self) -> ServerInfo:
        """Liveness, readiness, version, extensions and control mode in one call (asked
        once per reading request)."""
        return self._once("server_info", self._recent_server_info)

    def _recent_server_info(self) -> ServerInfo:
        """The facts of a live server are kept SERVER_FACTS_TTL_S: every page and socket of
        every user asked them (four calls) on each view. Not a failure: that is asked anew."""
        kept = self._facts
        if kept is not None and time.monotonic() - kept[0] < SERVER_FACTS_TTL_S:
            return kept[1]
        info = self._server_info()
        self._facts = (time.monotonic(), info) if info.live else None
        return info

    def _server_info(self) -> ServerInfo:
        live = self.is_live()
        meta = self.server_metadata()
        return ServerInfo(
            live=live,
            ready=self.is_ready(),
            version=meta.get("version", ""),
            extensions=list(meta.get("extensions", [])),
            control_mode=self.control_mode(),
        )

    # --- repository --------------------------------------------------------------------------

    def repository_index(self) -> list[ModelState]:
        """Every model's versions and states (asked once per reading request)."""
        return list(self._once("index", self._repository_index))

    def _repository_index(self) -> list[ModelState]:
        index = self._call("get_model_repository_index", as_json=True)
        return [
            ModelState(
                name=m["name"],
                version=m.get("version", ""),
                state=m.get("state", ""),
                reason=m.get("reason", ""),
            )
            for m in index.get("models", [])
        ]

    def model_states(self, name: str) -> list[ModelState]:
        return [m for m in self.repository_index() if m.name == name]

    def load(
        self,
        name: str,
        *,
        config: dict[str, Any] | str | None = None,
        files: dict[str, bytes] | None = None,
    ) -> list[ModelState]:
        """Load (or reload) a model and return its version states once it settled.

        `config` overrides config.pbtxt for this load only (a dict or a JSON string).
        Raises TritonError with Triton's reason when the load fails.
        """
        config_json = json.dumps(config) if isinstance(config, dict) else config
        try:
            self._call("load_model", name, config=config_json, files=files, timeout=self.timeout_s)
        except TritonError as exc:
            if exc.status is None or "DEADLINE_EXCEEDED" not in exc.status:
                raise
            # Still loading inside Triton: wait for it rather than sending a second load.
            states = self.wait_until_settled(name)
            if not any(s.state == "READY" for s in states):
                failed = [s.reason for s in states if s.reason]
                reason = failed[0] if failed else f"model '{name}' did not load"
                raise TritonError(reason) from exc
            return states
        return self.model_states(name)

    def wait_until_settled(self, name: str) -> list[ModelState]:
        """Poll the repository index until no version of `name` is LOADING or UNLOADING."""
        deadline = time.monotonic() + self.load_timeout_s
        while True:
            states = self.model_states(name)
            if not any(s.state in ("LOADING", "UNLOADING") for s in states):
                return states
            if time.monotonic() > deadline:
                raise TritonError(
                    f"model '{name}' is still loading after {self.load_timeout_s:g} s"
                )
            time.sleep(0.25)

    def unload(self, name: str, *, unload_dependents: bool = False) -> list[ModelState]:
        self._call("unload_model", name, unload_dependents=unload_dependents)
        return self.wait_until_settled(name)

    # --- models ------------------------------------------------------------------------------

    def model_config(self, name: str, version: str = "") -> dict[str, Any]:
        response = self._call("get_model_config", name, model_version=version, as_json=True)
        return dict(response.get("config", {}))

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        return dict(self._call("get_model_metadata", name, model_version=version, as_json=True))

    def model_statistics(self, name: str = "", version: str = "") -> list[dict[str, Any]]:
        response = self._call("get_inference_statistics", model_name=name, model_version=version)
        data = json_format.MessageToDict(response, preserving_proto_field_name=True)
        return list(data.get("model_stats", []))

    # --- trace (Triton's trace extension) -------------------------------------------------

    def trace_settings(self, name: str = "") -> dict[str, list[str]]:
        """The trace settings of ``name`` (the global ones when empty), each a list of
        strings as Triton reports them (``trace_file``, ``trace_level``, ``trace_count``…)."""
        answer = self._call("get_trace_settings", model_name=name, as_json=True)
        return {k: list(v.get("value", [])) for k, v in answer.get("settings", {}).items()}

    def update_trace_settings(self, name: str, settings: dict[str, Any]) -> dict[str, list[str]]:
        """Change ``name``'s trace settings (Triton refuses a new file location over the
        network: the file is the server's own, from ``--trace-config``)."""
        answer = self._call(
            "update_trace_settings", model_name=name, settings=settings, as_json=True
        )
        return {k: list(v.get("value", [])) for k, v in answer.get("settings", {}).items()}

    # --- one inference request (Try a model) ---------------------------------------------

    def _bounded_client(
        self, max_request: int, max_response: int
    ) -> grpcclient.InferenceServerClient:
        """A channel with the caller's size limits (a stream's is its own: ``shared`` off)."""
        return grpcclient.InferenceServerClient(
            self.grpc_url,
            channel_args=[
                *CHANNEL_ARGS[:3],
                ("grpc.max_send_message_length", max_request),
                ("grpc.max_receive_message_length", max_response),
            ],
        )

    def _limited(self, max_request: int, max_response: int) -> grpcclient.InferenceServerClient:
        """The process's channel with these size limits, made on first use."""
        key = (max_request, max_response)
        with self._lock:
            client = self._bounded.get(key)
            if client is None:
                client = self._bounded[key] = self._bounded_client(max_request, max_response)
        return client

    def infer(
        self,
        name: str,
        inputs: Sequence[tuple[str, str, np.ndarray]],
        outputs: Sequence[str],
        *,
        version: str = "",
        sequence: tuple[int, bool, bool] | None = None,
        max_request_bytes: int,
        max_response_bytes: int,
        timeout_s: float,
    ) -> Inferred:
        """One request: ``inputs`` as (name, Triton datatype, array), the named ``outputs``
        back as arrays; ``sequence`` is (correlation id, start, end). On the process's channel
        with the caller's limits, so that a response above ``max_response_bytes`` is refused
        by gRPC as it arrives instead of being held whole."""
        client = self._limited(max_request_bytes, max_response_bytes)
        request = _tensors(inputs)
        wanted = [grpcclient.InferRequestedOutput(o) for o in outputs]
        correlation, start, end = sequence or (0, False, False)
        began = time.perf_counter_ns()
        error: TritonError | None
        try:
            result = client.infer(
                name, request, model_version=version, outputs=wanted,
                sequence_id=correlation, sequence_start=start, sequence_end=end,
                headers=self.headers, client_timeout=timeout_s,
            )  # fmt: skip
        except InferenceServerException as exc:
            if "RESOURCE_EXHAUSTED" in (exc.status() or ""):
                raise TritonError(
                    f"the response is larger than the limit of {max_response_bytes:,} "
                    f"bytes ({exc.message()})", status=exc.status(),
                ) from None  # fmt: skip
            error = self._translate(exc)
        except grpc.RpcError:
            error = TritonError(f"Triton unreachable at {self.grpc_url}", unreachable=True)
        else:
            error = None
        if error is not None:
            if error.unreachable:  # a fresh channel next time
                with self._lock:
                    self._bounded.pop((max_request_bytes, max_response_bytes), None)
                _close(client)
            raise error
        elapsed = time.perf_counter_ns() - began
        response = result.get_response()
        return Inferred(
            outputs={o.name: result.as_numpy(o.name) for o in response.outputs},
            datatypes={o.name: o.datatype for o in response.outputs},
            elapsed_ns=elapsed,
            model_version=response.model_version,
        )

    def stream_infer(
        self,
        name: str,
        inputs: Sequence[tuple[str, str, np.ndarray]],
        outputs: Sequence[str],
        *,
        on_response: Callable[[int, int, Inferred], None] | None = None,
        max_request_bytes: int,
        max_response_bytes: int,
        timeout_s: float,
    ) -> tuple[list[Inferred], int]:
        """One request to a decoupled model over a gRPC stream: each response as it came
        (``on_response(index, ns since sent, response)`` too, as it arrives), until Triton
        flags the final one; and the whole time. TritonError with Triton's text on an error,
        or when no final response came within ``timeout_s``."""
        client = self._bounded_client(max_request_bytes, max_response_bytes)
        got: list[Inferred] = []
        failure: list[str] = []
        done = threading.Event()
        began = time.perf_counter_ns()

        def arrived(result: Any, error: Any) -> None:
            if error is not None:
                failure.append(error.message() if hasattr(error, "message") else str(error))
                done.set()
                return
            response = result.get_response()
            final = response.parameters.get("triton_final_response")
            if response.outputs:
                answer = Inferred(
                    outputs={o.name: result.as_numpy(o.name) for o in response.outputs},
                    datatypes={o.name: o.datatype for o in response.outputs},
                    elapsed_ns=time.perf_counter_ns() - began,
                    model_version=response.model_version,
                )
                got.append(answer)
                if on_response is not None:
                    on_response(len(got) - 1, answer.elapsed_ns, answer)
            if final is not None and final.bool_param:
                done.set()

        try:
            request = _tensors(inputs)
            client.start_stream(callback=arrived, headers=self.headers)
            client.async_stream_infer(
                name, request, outputs=[grpcclient.InferRequestedOutput(o) for o in outputs],
                enable_empty_final_response=True,
            )  # fmt: skip
            if not done.wait(timeout_s):
                raise TritonError(
                    f"no final response from {name} within {timeout_s:g} s "
                    f"({len(got)} response{'s' if len(got) != 1 else ''} came)"
                )
            if failure:
                raise TritonError(failure[0])
            return got, time.perf_counter_ns() - began
        except InferenceServerException as exc:
            raise self._translate(exc) from None
        finally:
            with contextlib.suppress(Exception):
                client.stop_stream(cancel_requests=True)
            _close(client)

    # --- metrics (port 8002) -----------------------------------------------------------------

    def metrics(self) -> list[MetricSample]:
        return fetch_metrics(self.metrics_url, self.timeout_s)


METRICS_MAX_BYTES = 16 * 2**20  # Triton's page with hundreds of models is a few MiB


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A metrics page that redirects is an error, never followed (to another host, say)."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_metrics_opener = urllib.request.build_opener(_NoRedirects)


def _shown(url: str) -> str:
    """``url`` fit for a message: a password in it is replaced by ``**``, the user name
    kept (``http://user:**@host:8002/metrics``), as the dashboard shows every URL."""
    parts = urlsplit(url)
    userinfo, at, host = parts.netloc.rpartition("@")
    if not at or ":" not in userinfo:
        return url
    return urlunsplit(parts._replace(netloc=f"{userinfo.partition(':')[0]}:**@{host}"))


def fetch_metrics(url: str, timeout_s: float) -> list[MetricSample]:
    """Scrape a metrics page (the client's, or the load engine's through `aio.metrics`):
    at most METRICS_MAX_BYTES of it, and no redirect followed."""
    try:
        with _metrics_opener.open(url, timeout=timeout_s) as response:
            body = response.read(METRICS_MAX_BYTES + 1)
    except (urllib.error.URLError, OSError) as exc:
        raise TritonError(f"Triton metrics unreachable at {_shown(url)}", unreachable=True) from exc
    if len(body) > METRICS_MAX_BYTES:
        raise TritonError(
            f"Triton metrics at {_shown(url)} are over {METRICS_MAX_BYTES // 2**20} MiB: not read"
        )
    return parse_prometheus(body.decode("utf-8", errors="replace"))


def engine_metrics_url(server: Endpoint) -> str | None:
    """The metrics page a sweep samples GPU use from; None when none is configured."""
    return server.metrics_url or None


# The clients of this process, weakly: one nobody holds is collected, and closes its channel.
_live: weakref.WeakSet[TritonClient] = weakref.WeakSet()


def close_all() -> None:
    """Close the channels of every client of this process. At exit: tritonclient's __del__
    prints a traceback when it runs during interpreter shutdown. And before a tritonserver
    this process talked to is stopped: it waits ~5 s for each of its services (gRPC, HTTP)
    that still has a connection open (the tests' session teardown)."""
    for client in list(_live):
        client.close()


atexit.register(close_all)
