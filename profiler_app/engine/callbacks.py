"""Callbacks a caller of the engine hands in (on_window, on_level, should_cancel): each
may be a plain function or a coroutine function, and may be left out."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any


async def call(callback: Callable[..., Any] | None, *args: Any) -> Any:
    """`callback(*args)`, awaited when it is a coroutine; None without a callback."""
    if callback is None:
        return None
    result = callback(*args)
    if inspect.isawaitable(result):
        result = await result
    return result
