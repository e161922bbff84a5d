"""The OpenAPI schema of a measured level and a window, from `measure`'s field list: the
REST API describes the one shape its responses are built from."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any

from rest_framework import serializers

from . import measure

# The field types `measure.Level` uses (its annotations are strings: postponed evaluation).
_FIELD_TYPES: dict[str, Any] = {
    "float": lambda: serializers.FloatField(),
    "int": lambda: serializers.IntegerField(),
    "float | None": lambda: serializers.FloatField(allow_null=True),
    "bool | None": lambda: serializers.BooleanField(allow_null=True),
    "dict[str, Any]": lambda: serializers.DictField(),
}


def _level_fields() -> dict[str, serializers.Field]:
    return {f.name: _FIELD_TYPES[str(f.type)]() for f in fields(measure.Level)}


def _serializer(
    name: str, extra: Callable[[], dict[str, serializers.Field]]
) -> type[serializers.Serializer]:
    """One class per component (named NameSerializer: the schema drops the suffix), so
    every use of it is the same component."""
    level = _level_fields()  # made first: DRF orders fields by when they were made
    return type(name, (serializers.Serializer,), {**level, **extra()})


# A stored row (`measure.point_json`): a level's summary (window -1) or a window.
SweepPointSerializer = _serializer(
    "SweepPointSerializer", lambda: {"window": serializers.IntegerField()}
)
# A search candidate's level (`measure.search_json`): the same, with its older names.
SearchLevelSerializer = _serializer(
    "SearchLevelSerializer",
    lambda: {
        "concurrency": serializers.FloatField(help_text="the level (its older name)"),
        "windows": serializers.IntegerField(allow_null=True, required=False),
        "over_threshold": serializers.BooleanField(allow_null=True, required=False),
        "avg_batch": serializers.FloatField(allow_null=True, required=False),
        "rounds": serializers.IntegerField(
            required=False, help_text="the medians of this many re-measurement rounds"
        ),
    },
)
