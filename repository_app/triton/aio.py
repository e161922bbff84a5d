"""The load engine's control calls to Triton, on its event loop.

A sweep's coordinator asks Triton, between the windows it measures, whether the server and
model are ready, for the model's metadata and config, for its statistics and for the
metrics page; doing that on the loop (tritonclient's grpc.aio / http.aio clients, the
sync scrape in a thread) keeps the windows' timing and the callbacks free of blocking
calls. The requests that make the load are not here: the engine's own transports send
them (profiler_app/engine/load_workers.py, grpc_h2.py).

It speaks the sweep's protocol (gRPC or HTTP) at the sweep's URL, so that a sweep over HTTP
checks the endpoint it will load. Failures raise `TritonError` with a message fit for the
sweep's error.
"""

from __future__ import annotations

import asyncio
from typing import Any

from . import statistics
from .client import TritonError, fetch_metrics
from .prometheus import MetricSample


class AioClient:
    """Readiness, metadata, config and statistics through tritonclient's aio clients."""

    def __init__(self, protocol: str, url: str) -> None:
        if protocol == "grpc":
            import tritonclient.grpc.aio as client_module
        else:
            import tritonclient.http.aio as client_module  # type: ignore[no-redef]
        self.client = client_module.InferenceServerClient(url)
        # The gRPC client answers protobuf messages unless asked for JSON; HTTP answers JSON.
        self.json = {"as_json": True} if protocol == "grpc" else {}

    async def close(self) -> None:
        await self.client.close()

    async def describe(self, model: str, version: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """(metadata, config) of a model that is ready to serve; TritonError otherwise."""
        from tritonclient.utils import InferenceServerException

        try:
            live = await self.client.is_server_live()
        except Exception as exc:  # noqa: BLE001 - any transport failure means unreachable
            raise TritonError(f"Triton unreachable: {exc}", unreachable=True) from None
        if not live:
            raise TritonError("Triton is not live")
        try:
            ready = await self.client.is_model_ready(model, version)
        except InferenceServerException as exc:
            raise TritonError(f"model {model!r}: {exc.message()}") from None
        if not ready:
            raise TritonError(
                f"model {model!r}{' version ' + version if version else ''} is not loaded/ready "
                "on Triton: load it first"
            )
        try:
            metadata = await self.client.get_model_metadata(model, version, **self.json)
            config = await self.client.get_model_config(model, version, **self.json)
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
            raw = await self.client.get_inference_statistics(model, version, **self.json)
        except Exception:  # noqa: BLE001 - the breakdown is optional
            return None
        return list(raw.get("model_stats", []))

    async def config(self, model: str, version: str = "") -> dict[str, Any]:
        """The config Triton serves for the model (JSON); TritonError when it has none."""
        from tritonclient.utils import InferenceServerException

        try:
            answer = await self.client.get_model_config(model, version, **self.json)
        except InferenceServerException as exc:
            raise TritonError(f"model {model!r}: {exc.message()}") from None
        except Exception as exc:  # noqa: BLE001 - any transport failure means unreachable
            raise TritonError(f"Triton unreachable: {exc}", unreachable=True) from None
        # gRPC answers {"config": {...}}, HTTP the config itself.
        return dict(answer.get("config", answer))


async def metrics(url: str, timeout_s: float) -> list[MetricSample]:
    """Triton's metrics page, scraped in a thread (TritonError when it does not answer)."""
    return await asyncio.to_thread(fetch_metrics, url, timeout_s)
