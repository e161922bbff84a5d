"""Health of each component the dashboard depends on, for `/healthz` and the overview.

The Triton component is one server's: `/healthz` asks the default one (the environment's,
as before servers became a parameter: another server going down does not make the
dashboard unhealthy); the overview asks the server its page is about."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

import redis
from django.conf import settings
from django.db import connection

from common.redact import redact
from registry.servers import Server
from registry.triton_clients import get_client
from triton_api.client import TritonError

from .celery_app import app as celery_app


@dataclass
class ComponentHealth:
    up: bool
    detail: str = ""
    info: dict[str, Any] = field(default_factory=dict)


def check_database() -> ComponentHealth:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        return ComponentHealth(True, connection.vendor)
    except Exception as exc:  # any driver error means "down"
        return ComponentHealth(False, redact(f"database error: {exc}"))
    finally:
        # Health checks run in worker threads: give their connection back.
        connection.close()


def check_redis() -> ComponentHealth:
    try:
        client = redis.Redis.from_url(
            settings.REDIS_URL, socket_connect_timeout=1, socket_timeout=1
        )
        client.ping()
        return ComponentHealth(True, redact(settings.REDIS_URL))
    except redis.RedisError as exc:
        return ComponentHealth(False, redact(f"Redis unreachable at {settings.REDIS_URL}: {exc}"))


def check_worker(redis_up: bool) -> ComponentHealth:
    if not redis_up:
        return ComponentHealth(False, "unknown: the broker (Redis) is down")
    try:
        # limit=1: return as soon as one worker answers (a broadcast ping otherwise waits
        # out the whole timeout, which made every overview take a second).
        replies = celery_app.control.ping(timeout=1.0, limit=1)
    except Exception as exc:  # kombu raises several connection error types
        return ComponentHealth(False, redact(f"cannot ping workers: {exc}"))
    if not replies:
        return ComponentHealth(False, "no Celery worker answered a ping")
    names = sorted(name for reply in replies for name in reply)
    return ComponentHealth(True, f"{len(names)} worker(s)", {"workers": names})


def check_triton(server: Server) -> ComponentHealth:
    try:
        info = get_client(server).server_info()
    except TritonError as exc:
        return ComponentHealth(False, exc.message)
    if info.live and info.ready:
        detail = "live and ready"
    elif info.live:
        # With strict readiness (Triton's default) one failed model makes the server
        # "not ready" while every other model still serves: up, with the reason.
        detail = "live, not ready (a model failed to load, or still loading)"
    else:
        detail = "not live"
    return ComponentHealth(
        info.live,
        detail,
        {
            "live": info.live,
            "ready": info.ready,
            "version": info.version,
            "extensions": info.extensions,
            "model_control_mode": info.control_mode,
            "url": server.grpc_url,
            "server": server.name,
        },
    )


def system_health(server: Server) -> dict[str, ComponentHealth]:
    """All components (Triton: ``server``), checked concurrently so one slow component
    costs one timeout."""
    with ThreadPoolExecutor(max_workers=3) as pool:
        database = pool.submit(check_database)
        redis_health = pool.submit(check_redis)
        triton = pool.submit(check_triton, server)
        redis_result = redis_health.result()
        worker = check_worker(redis_result.up)
        return {
            "database": database.result(),
            "redis": redis_result,
            "worker": worker,
            "triton": triton.result(),
        }


def as_json(components: dict[str, ComponentHealth], *, details: bool = True) -> dict[str, Any]:
    """The health document; without ``details`` (anonymous callers: load balancers and
    container checks) only whether each component is up, nothing about versions, hosts,
    URLs or error texts."""
    status = "ok" if all(c.up for c in components.values()) else "degraded"
    if not details:
        return {"status": status, "components": {n: {"up": c.up} for n, c in components.items()}}
    return {"status": status, "components": {name: asdict(c) for name, c in components.items()}}
