"""The OpenAPI schema of a measured level and a window, from `measure`'s dataclasses: the
REST API describes the one shape its responses and the websocket's `sweep.level` and
`sweep.window` events are built from (`measure.Level.to_json`): the columns from
`measure.COLUMNS`, the `extra` entries of the sub-records from their fields
(`level_figures`). The other `extra` entries are free-form (any key)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any

from rest_framework import serializers

from . import measure
from .level_figures import Figures, StepFigures

# The field types the dataclasses use (their annotations are strings: postponed evaluation).
_FIELD_TYPES: dict[str, Any] = {
    "float": lambda **kw: serializers.FloatField(**kw),
    "int": lambda **kw: serializers.IntegerField(**kw),
    "str": lambda **kw: serializers.CharField(**kw),
    "float | None": lambda **kw: serializers.FloatField(allow_null=True, **kw),
    "int | None": lambda **kw: serializers.IntegerField(allow_null=True, **kw),
    "bool | None": lambda **kw: serializers.BooleanField(allow_null=True, **kw),
}


def _record_fields(kind: type[Figures]) -> dict[str, serializers.Field]:
    """A sub-record's entries: optional (a row stored before one existed lacks it)."""
    return {name: _type_of(kind, name)(required=False) for name in kind.names()}


def _type_of(kind: type, name: str) -> Callable[..., serializers.Field]:
    return _FIELD_TYPES[next(str(f.type) for f in fields(kind) if f.name == name)]


def _pair(**kw: Any) -> serializers.ListField:
    return serializers.ListField(child=serializers.FloatField(), min_length=2, max_length=2, **kw)


_Step = type("LevelStepSerializer", (serializers.Serializer,), _record_fields(StepFigures))
_Interval = type(
    "LevelIntervalSerializer",
    (serializers.Serializer,),
    {
        "throughput": _pair(help_text="[low, high] infer/s"),
        "latency": _pair(allow_null=True, help_text="[low, high] µs"),
        "windows": serializers.IntegerField(),
        "confidence": serializers.FloatField(),
        "settled_by": serializers.ChoiceField(["rule", "interval"], allow_null=True),
    },
)
_Extra = type(
    "LevelExtraSerializer",
    (serializers.Serializer,),
    {
        # `extra`'s flat typed entries (`Level.to_json` writes them where a level has one).
        **{k: v for kind in measure.RECORDS.values() for k, v in _record_fields(kind).items()},
        "steps": _Step(many=True, required=False),
        measure.INTERVAL: _Interval(required=False),
    },
)


def _level_fields() -> dict[str, serializers.Field]:
    return {
        name: _Extra(help_text="the sub-records' entries; the others are free-form")
        if name == "extra"
        else _type_of(measure.Level, name)()
        for name in measure.COLUMNS
    }


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
