"""What a config search works on: the model's saved config.pbtxt in the server's
repository, and what Triton says of the model and of its GPUs.
"""

from __future__ import annotations

from typing import Any

from registry.servers import Server
from registry.triton_clients import get_client
from repository_app.editor import saving
from repository_app.modelconfig import parse_config
from triton_api import gpus
from triton_api.client import TritonError

from .. import jobs
from ..models import Search
from .errors import SearchError


def saved_config(server: Server, model: str) -> tuple[Any, str, str]:
    """(ModelConfig, text, sha256) of config.pbtxt in the server's repository; SearchError
    when unusable."""
    try:
        current = saving.read_current(model, server)
    except Exception as exc:  # noqa: BLE001 - RepositoryError / SaveError: both mean "no"
        raise SearchError(str(exc)) from None
    if not current.exists:
        raise SearchError(f"model {model!r} has no config.pbtxt to search from")
    parsed = parse_config(current.data)
    if parsed.config is None:
        first = parsed.findings[0].message if parsed.findings else "it does not parse"
        raise SearchError(f"config.pbtxt of {model!r} does not parse: {first}")
    return parsed.config, current.text, current.sha256


def is_ready(server: Server, model: str) -> bool:
    try:
        return any(s.state == "READY" for s in get_client(server).model_states(model))
    except TritonError:
        return False


def has_gpus(server: Server) -> bool:
    """Whether the server's metrics show any GPU; False when they cannot be read."""
    try:
        return gpus.has_gpus(get_client(server).metrics())
    except TritonError:
        return False


def gpu_memory_used_bytes(server: Server) -> float | None:
    """GPU memory used, summed over the GPUs; None where Triton reports none."""
    try:
        return gpus.memory_used_bytes(get_client(server).metrics())
    except TritonError:
        return None


def server_of(search: Search) -> Server:
    """The server the search runs on; SearchError when it was removed meanwhile."""
    try:
        return jobs.server_of(search.sweep)
    except jobs.JobError as exc:
        raise SearchError(str(exc)) from None
