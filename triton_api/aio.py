"""The load engine's control calls to Triton, on its event loop.

A sweep's coordinator asks Triton, between the windows it measures, whether the server and
model are ready, for the model's metadata and config, for its statistics and for the
metrics page; doing that on the loop (tritonclient's grpc.aio / http.aio clients, the
sync scrape in a thread) keeps the windows' timing and the callbacks free of blocking
calls. The requests that make the load are not here: the engine's own transports send
them (profiler_app/engine/load_workers.py, grpc_h2.py).

It speaks the sweep's protocol (gRPC or HTTP) at the sweep's endpoint, so that a sweep over
HTTP checks the endpoint it will load, with what the sync client sends (the server's key, the
timeout: the `connection.Connection` it is given). Failures raise `TritonError` with a message fit for the
sweep's error.
"""

from __future__ import annotations

import asyncio
from typing import Any

from . import statistics
from .client import TritonError, fetch_metrics
from .connection import Connection
from .prometheus import MetricSample

ENGINE_CALL_TIMEOUT_S = 60.0  # tritonclient's own HTTP default, which the engine had before


class AioClient:
    """Readiness, metadata, config and statistics through tritonclient's aio clients."""

    def __init__(self, triton: Connection) -> None:
        # Every call sends the key; the timeout is per call on gRPC, the session's on HTTP.
        # A sweep asks while Triton is as busy as the sweep can make it: a statistics call
        # may take far longer than a page's TRITON_TIMEOUT_S, and a missed one costs a
        # level its server figures, so the engine waits at least ENGINE_CALL_TIMEOUT_S.
        timeout_s = max(triton.timeout_s or 0.0, ENGINE_CALL_TIMEOUT_S)
        self.kwargs: dict[str, Any] = {"headers": triton.headers or None}
        if triton.protocol == "grpc":
            import tritonclient.grpc.aio as grpc_aio

            self.client: Any = grpc_aio.InferenceServerClient(triton.url)
            self.kwargs["client_timeout"] = timeout_s
        else:
            import tritonclient.http.aio as http_aio

            self.client = http_aio.InferenceServerClient(triton.url, conn_timeout=timeout_s)
        # The gRPC client answers protobuf messages unless asked for JSON; HTTP answers JSON.
        self.json_kwargs = (
            {**self.kwargs, "as_json": True} if triton.protocol == "grpc" else self.kwargs
        )

    async def close(self) -> None:
        await self.client.close()

    async def describe(self, model: str, version: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """(metadata, config) of a model that is ready to serve; TritonError otherwise."""
        from tritonclient.utils import InferenceServerException

        try:
            live = await self.client.is_server_live(**self.kwargs)
        except Exception as exc:  # noqa: BLE001 - any transport failure means unreachable
            raise TritonError(f"Triton unreachable: {exc}", unreachable=True) from None
        if not live:
            raise TritonError("Triton is not live")
        try:
            ready = await self.client.is_model_ready(model, version, **self.kwargs)
        except InferenceServerException as exc:
            raise TritonError(f"model {model!r}: {exc.message()}") from None
        if not ready:
            raise TritonError(
                f"model {model!r}{' version ' + version if version else ''} is not loaded/ready "
                "on Triton: load it first"
            )
        try:
            metadata = await self.client.get_model_metadata(model, version, **self.json_kwargs)
            config = await self.client.get_model_config(model, version, **self.json_kwargs)
        except InferenceServerException as exc:
            raise TritonError(f"model {model!r}: {exc.message()}") from None
        return metadata, config

    async def statistics(self, model: str, version: str) -> dict[str, int] | None:
        """The model's cumulative counters (`statistics.totals`); None when unavailable."""
        entries = await self.model_stats(model, version)
        return None if entries is None else statistics.totals(entries, version)

    async def model_stats(self, model: str, version: str) -> list[dict[str, Any]] | None:
        """The statistics extension's entries of the model (one per version); None when
        unavailable."""
        try:
            raw = await self.client.get_inference_statistics(model, version, **self.json_kwargs)
        except Exception:  # noqa: BLE001 - the breakdown is optional
            return None
        return list(raw.get("model_stats", []))

    async def config(self, model: str, version: str = "") -> dict[str, Any]:
        """The config Triton serves for the model (JSON); TritonError when it has none."""
        from tritonclient.utils import InferenceServerException

        try:
            answer = await self.client.get_model_config(model, version, **self.json_kwargs)
        except InferenceServerException as exc:
            raise TritonError(f"model {model!r}: {exc.message()}") from None
        except Exception as exc:  # noqa: BLE001 - any transport failure means unreachable
            raise TritonError(f"Triton unreachable: {exc}", unreachable=True) from None
        # gRPC answers {"config": {...}}, HTTP the config itself.
        return dict(answer.get("config", answer))


async def metrics(url: str, timeout_s: float) -> list[MetricSample]:
    """Triton's metrics page, scraped in a thread (TritonError when it does not answer)."""
    return await asyncio.to_thread(fetch_metrics, url, timeout_s)
