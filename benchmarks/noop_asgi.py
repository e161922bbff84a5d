"""An ASGI application that reads a request body and throws it away: the web server's own
ceiling for upload chunks (benchmarks/bench_upload.py serves it with dashboard.serve)."""

from __future__ import annotations

from typing import Any


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            pass
        await send({"type": "lifespan.shutdown.complete"})
        return
    more = True
    while more:
        message = await receive()
        if message["type"] == "http.disconnect":
            return
        more = bool(message.get("more_body", False))
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"{}"})
