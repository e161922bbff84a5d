"""Form fields for the editor's list- and shape-valued config fields, and the protobuf
types' ranges (shared by forms.py, section_mixins.py and section_forms.py)."""

from __future__ import annotations

import math
import struct
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

# The protobuf types' ranges: a value outside is refused on its field ("at most ...")
# instead of failing as "Value out of range" when the config is built.
INT32 = (-(2**31), 2**31 - 1)
UINT32 = (0, 2**32 - 1)
INT64 = (-(2**63), 2**63 - 1)
UINT64 = (0, 2**64 - 1)


class ProtoIntField(forms.IntegerField):
    """An optional integer config field within its protobuf type's range (`bounds`, one of
    the tuples above); counts and durations stored in signed types are `non_negative`."""

    def __init__(self, bounds: tuple[int, int], *, non_negative: bool = True, **kwargs: Any):
        kwargs.setdefault("required", False)
        minimum = 0 if non_negative else bounds[0]
        super().__init__(min_value=max(minimum, bounds[0]), max_value=bounds[1], **kwargs)


class IntListField(forms.CharField):
    """A comma-separated list of integers ("16, -1"); brackets are tolerated.

    With ``none_when_blank`` a blank value means "not set" (None) and "[]" an empty list,
    so a reshape to a scalar (shape []) stays distinguishable from no reshape.
    """

    def __init__(
        self,
        *,
        none_when_blank: bool = False,
        minimum: int | None = None,
        maximum: int = INT64[1],
        **kwargs: Any,
    ):
        kwargs.setdefault("required", False)
        super().__init__(**kwargs)
        self.none_when_blank = none_when_blank
        self.minimum = INT64[0] if minimum is None else minimum
        self.maximum = maximum

    def prepare_value(self, value: Any) -> Any:
        if value is None:
            return ""
        if isinstance(value, list | tuple):
            return "[]" if not value and self.none_when_blank else ", ".join(str(v) for v in value)
        return value

    def to_python(self, value: Any) -> list[int] | None:  # type: ignore[override]
        if isinstance(value, list):
            return value
        text = (value or "").strip()
        if not text:
            return None if self.none_when_blank else []
        inner = text.removeprefix("[").removesuffix("]").strip()
        if not inner:
            return []
        numbers: list[int] = []
        for part in inner.split(","):
            part = part.strip()
            try:
                number = int(part)
            except ValueError:
                raise ValidationError(
                    f"'{part}' is not a whole number: write numbers separated by commas, e.g. 8, 16"
                ) from None
            if number < self.minimum:
                raise ValidationError(f"{number} is below {self.minimum}")
            if number > self.maximum:
                raise ValidationError(f"{number} is above {self.maximum}, the largest value here")
            numbers.append(number)
        return numbers

    def validate(self, value: Any) -> None:  # the list itself is always acceptable
        return None

    def has_changed(self, initial: Any, data: Any) -> bool:
        if self.disabled:
            return False
        try:
            new = self.to_python(data)
        except ValidationError:
            return True
        return self.to_python(initial) != new


def float32_text(value: float) -> str:
    """The shortest decimal that reads back as the same float32 (0.3, not 0.30000001)."""
    if math.isnan(value) or math.isinf(value):
        return repr(value)
    packed = struct.pack("<f", value)
    for digits in range(1, 10):
        text = f"{value:.{digits}g}"
        if struct.pack("<f", float(text)) == packed:
            return text
    return repr(value)


def float32_shortest(value: float) -> float:
    return float(float32_text(value))


class FloatListField(forms.CharField):
    """A comma-separated list of numbers ("0.5, 1, 2.5"); brackets are tolerated."""

    def __init__(self, *, float32: bool = False, **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        super().__init__(**kwargs)
        self.float32 = float32

    def prepare_value(self, value: Any) -> Any:
        if value is None:
            return ""
        if isinstance(value, list | tuple):
            show = float32_text if self.float32 else _plain_float
            return ", ".join(show(float(v)) for v in value)
        return value

    def to_python(self, value: Any) -> list[float]:  # type: ignore[override]
        if isinstance(value, list):
            return [float(v) for v in value]
        inner = (value or "").strip().removeprefix("[").removesuffix("]").strip()
        if not inner:
            return []
        numbers: list[float] = []
        for part in inner.split(","):
            part = part.strip()
            try:
                number = float(part)
            except ValueError:
                raise ValidationError(
                    f"'{part}' is not a number: write numbers separated by commas, e.g. 0.5, 1, 10"
                ) from None
            if math.isnan(number) or math.isinf(number):
                raise ValidationError(f"'{part}' is not a finite number")
            numbers.append(float32_shortest(number) if self.float32 else number)
        return numbers

    def validate(self, value: Any) -> None:
        return None

    def has_changed(self, initial: Any, data: Any) -> bool:
        if self.disabled:
            return False
        try:
            return self.to_python(initial) != self.to_python(data)
        except ValidationError:
            return True


def _plain_float(value: float) -> str:
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)


class ShapesField(forms.CharField):
    """Input shapes of a CUDA graph: ``INPUT0: 16, 16; INPUT1: 8`` (name: dims; ...)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("required", False)
        super().__init__(**kwargs)

    def prepare_value(self, value: Any) -> Any:
        if value is None:
            return ""
        if isinstance(value, dict):
            return "; ".join(f"{k}: {', '.join(str(d) for d in v)}" for k, v in value.items())
        return value

    def to_python(self, value: Any) -> dict[str, list[int]]:  # type: ignore[override]
        if isinstance(value, dict):
            return value
        shapes: dict[str, list[int]] = {}
        for part in (value or "").split(";"):
            part = part.strip()
            if not part:
                continue
            name, colon, dims = part.partition(":")
            name = name.strip()
            if not colon or not name:
                raise ValidationError(
                    f"'{part}' is not 'NAME: dims': write e.g. INPUT0: 16, 16; INPUT1: 8"
                )
            if name in shapes:
                raise ValidationError(f"input '{name}' is written twice")
            numbers = []
            for d in dims.replace("[", "").replace("]", "").split(","):
                d = d.strip()
                if not d:
                    continue
                try:
                    numbers.append(int(d))
                except ValueError:
                    raise ValidationError(
                        f"'{d}' in the shape of '{name}' is not a whole number"
                    ) from None
            shapes[name] = numbers
        return shapes

    def validate(self, value: Any) -> None:
        return None

    def has_changed(self, initial: Any, data: Any) -> bool:
        try:
            return self.to_python(initial) != self.to_python(data)
        except ValidationError:
            return True
