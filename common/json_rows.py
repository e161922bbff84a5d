"""Rows of other tables carried as one JSON column of the row a query reads, so that one
query answers what several would (an upload chunk reads its upload, the user's role facts
and the registry together: repository_app.uploads.chunks).

``JSONRows(queryset, fields)`` is a correlated subquery: every row of ``queryset`` as a JSON
object of ``fields``, aggregated into one JSON array (text; ``'[]'`` for no rows), on
SQLite (``json_group_array``) and PostgreSQL (``json_agg``), the two databases we run.
``decode(model, text)`` turns that text back into unsaved instances of ``model``.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from django.db import NotSupportedError
from django.db.models import JSONField, Model, QuerySet, Subquery, TextField
from django.db.models.functions import JSONObject

M = TypeVar("M", bound=Model)

_ROW = "json_row"


class JSONRows(Subquery):
    """``queryset``'s rows, ``fields`` of each, as one JSON array (text)."""

    template = f"(SELECT COALESCE(JSON_AGG(_rows.{_ROW})::text, '[]') FROM (%(subquery)s) _rows)"

    def __init__(self, queryset: QuerySet[Any], fields: Sequence[str] | Mapping[str, str]) -> None:
        # fields: the names to read, or {key in the JSON: the field or lookup it holds}
        named = fields if isinstance(fields, Mapping) else {name: name for name in fields}
        row = JSONObject(**named)
        super().__init__(queryset.values(**{_ROW: row}), output_field=TextField())

    def as_sqlite(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, Any]:
        # json(): a subquery's column loses SQLite's JSON subtype and would be quoted.
        template = (
            f"(SELECT COALESCE(JSON_GROUP_ARRAY(JSON(_rows.{_ROW})), '[]') "
            "FROM (%(subquery)s) _rows)"
        )
        return self.as_sql(compiler, connection, template=template, **extra)

    def as_sql(self, compiler: Any, connection: Any, **extra: Any) -> tuple[str, Any]:
        if connection.vendor not in ("sqlite", "postgresql"):
            raise NotSupportedError(
                f"JSONRows supports SQLite and PostgreSQL, not {connection.vendor}"
            )
        return super().as_sql(compiler, connection, **extra)


def decode(model: type[M], text: str | None) -> list[M]:
    """Unsaved ``model`` instances from ``JSONRows`` text, each field as the database would
    have given it: SQLite hands a JSON field over as text and a datetime without its zone
    (stored in UTC); PostgreSQL hands both over as JSON."""
    fields = {f.attname: f for f in model._meta.concrete_fields}
    found = []
    for item in json.loads(text or "[]"):
        values: dict[str, Any] = {}
        for name, raw in item.items():
            field = fields[name]
            if raw is None:
                values[name] = None
            elif isinstance(field, JSONField):
                values[name] = json.loads(raw) if isinstance(raw, str) else raw
            else:
                value = field.to_python(raw)
                if isinstance(value, dt.datetime) and value.tzinfo is None:
                    value = value.replace(tzinfo=dt.UTC)
                values[name] = value
        found.append(model(**values))
    return found
