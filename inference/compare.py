"""Whether a model's answer is still the kept one: per output, the same datatype and
shape, and values equal within the output's tolerance (numbers: ``|got - kept| <= atol +
rtol * |kept|``, NaN matching NaN; integers, booleans and strings exactly)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from .tensors import NUMPY

DEFAULT_TOLERANCE = {"atol": 1e-6, "rtol": 1e-5}


@dataclass(frozen=True)
class Verdict:
    passed: bool
    worst: float | None  # the largest difference of any output (numbers), else None
    message: str


def _kept_array(kept: Mapping[str, Any]) -> np.ndarray:
    datatype = str(kept["datatype"])
    if datatype == "BYTES":
        return np.array([str(v).encode() for v in kept["data"]], dtype=object).reshape(
            kept["shape"]
        )
    return np.array(kept["data"], dtype=NUMPY[datatype]).reshape(kept["shape"])


def tolerance_of(tolerance: Mapping[str, Any], output: str) -> tuple[float, float]:
    given = tolerance.get(output) or {}
    return float(given.get("atol", DEFAULT_TOLERANCE["atol"])), float(
        given.get("rtol", DEFAULT_TOLERANCE["rtol"])
    )


def compare(
    expected: Mapping[str, Mapping[str, Any]],
    got: Mapping[str, np.ndarray],
    datatypes: Mapping[str, str],
    tolerance: Mapping[str, Any],
) -> Verdict:
    """Every kept output against what came back; the first failure's words, and the
    worst numeric difference over all outputs."""
    failures: list[str] = []
    worst: float | None = None
    for name, kept in expected.items():
        if name not in got:
            failures.append(f"{name}: not in the answer")
            continue
        if datatypes.get(name) != kept["datatype"]:
            failures.append(f"{name}: {datatypes.get(name)} now, {kept['datatype']} kept")
            continue
        array, want = got[name], _kept_array(kept)
        if tuple(array.shape) != tuple(want.shape):
            failures.append(f"{name}: shape {list(array.shape)} now, {list(want.shape)} kept")
            continue
        if want.dtype.kind in "fc":
            atol, rtol = tolerance_of(tolerance, name)
            a, w = array.astype(np.float64), want.astype(np.float64)
            both_nan = np.isnan(a) & np.isnan(w)
            diff = np.where(both_nan, 0.0, np.abs(a - w))
            diff = np.where(np.isnan(diff), np.inf, diff)
            largest = float(diff.max()) if diff.size else 0.0
            worst = largest if worst is None else max(worst, largest)
            bad = diff > atol + rtol * np.abs(np.nan_to_num(w))
            if bad.any():
                i = int(np.argmax(bad.reshape(-1)))
                failures.append(
                    f"{name}: {int(bad.sum())} of {bad.size} values differ beyond atol {atol:g}"
                    f" + rtol {rtol:g}; at [{i}] {a.reshape(-1)[i]:g} now, "
                    f"{w.reshape(-1)[i]:g} kept (worst difference {largest:g})"
                )
            continue
        differ = array.reshape(-1) != want.reshape(-1)
        if differ.any():
            i = int(np.argmax(differ))
            failures.append(
                f"{name}: {int(differ.sum())} of {differ.size} values differ (exact); at [{i}] "
                f"{array.reshape(-1)[i]!r} now, {want.reshape(-1)[i]!r} kept"
            )
    if failures:
        return Verdict(False, worst, "; ".join(failures))
    return Verdict(
        True, worst, "every output as kept" + (f" (worst difference {worst:g})" if worst else "")
    )
