"""Every API error is JSON: {"message": "...", "field": "..." or null}."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rest_framework.response import Response
from rest_framework.views import exception_handler


def _first(detail: Any, field: str | None = None) -> tuple[str, str | None]:
    if isinstance(detail, dict):
        for key, value in detail.items():
            name = None if key in ("non_field_errors", "detail") else key
            return _first(value, name if field is None else f"{field}.{name}" if name else field)
    if isinstance(detail, list) and detail:
        return _first(detail[0], field)
    return str(detail), field


def json_error_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    response = exception_handler(exc, context)
    if response is None:
        return None
    message, field = _first(response.data)
    body: dict[str, Any] = {"message": message, "field": field}
    if isinstance(response.data, dict) and len(response.data) > 1:
        body["errors"] = response.data
    response.data = body
    return response


def form_error_response(form: Any) -> Response:
    """A Django form's first error as the API's JSON error (400), all errors alongside."""
    return errors_response(form.errors)


def errors_response(errors: Mapping[str, Sequence[str]]) -> Response:
    """The first of {field: [message, ...]} as the API's JSON error (400), all alongside;
    "__all__" (Django's NON_FIELD_ERRORS) is no field."""
    field, messages = next(iter(errors.items()))
    return Response(
        {
            "message": messages[0],
            "field": None if field == "__all__" else field,
            "errors": errors,
        },
        status=400,
    )
