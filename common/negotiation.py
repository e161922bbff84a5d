"""What a page's caller asked for: the pages answer a script's fetch with JSON and a form's
POST with a redirect."""

from __future__ import annotations

from django.http import HttpRequest


def wants_json(request: HttpRequest) -> bool:
    """The request asked for JSON (``Accept: application/json``, as the pages' scripts send)."""
    return "application/json" in request.headers.get("Accept", "")
