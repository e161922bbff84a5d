"""Answers remembered for the length of one page view: a page asks Triton, the registry
and the narrowings each question once, however many templates and helpers ask it.

Only reading requests (GET and HEAD) remember (``RequestMemoMiddleware``): a POST that
acts and then reads must see the result of its action, and long actions (uploads, jobs,
rollouts) check roles afresh at every step outside any request's memo.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Hashable, Iterator
from typing import Any, TypeVar

from django.http import HttpRequest, HttpResponse

T = TypeVar("T")

_memo: contextvars.ContextVar[dict[Hashable, Any] | None] = contextvars.ContextVar(
    "request_memo", default=None
)


def remembered(key: Hashable, compute: Callable[[], T]) -> T:
    """``compute()``, once per reading request for ``key`` (every time outside one)."""
    memo = _memo.get()
    if memo is None:
        return compute()
    if key not in memo:
        memo[key] = compute()
    return memo[key]  # type: ignore[no-any-return]


def remember(key: Hashable, value: Any) -> None:
    """Remember ``value`` for ``key`` in the current memo (nothing outside one): an answer
    read along with something else, in the same query (``common.json_rows``)."""
    memo = _memo.get()
    if memo is not None:
        memo[key] = value


def recall(key: Hashable) -> Any:
    """What is remembered for ``key`` now, or None: for a question that one remembered
    answer also settles (one server, out of the list of them)."""
    memo = _memo.get()
    return None if memo is None else memo.get(key)


@contextlib.contextmanager
def remembering() -> Iterator[None]:
    """Remember answers until the block ends (one reading request, or one upload chunk:
    its role and narrowing checks read the user's groups and narrowings once)."""
    token = _memo.set({})
    try:
        yield
    finally:
        _memo.reset(token)


class RequestMemoMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.method not in ("GET", "HEAD"):
            return self.get_response(request)
        with remembering():
            return self.get_response(request)
