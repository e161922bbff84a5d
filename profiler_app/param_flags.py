"""Checking a sweep's flags one at a time, and the refusals they raise: each check takes a
flag's value (typed, or the text a command line, a form or a JSON body carries) and returns
it parsed or raises `Refused` with a message that names the field. `params.from_flags` runs
them all and gathers every refusal into one `ParamsError`.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from django.core.exceptions import NON_FIELD_ERRORS, ValidationError

from . import goodput
from .engine.inputs import InputError, load_input_data, shape_elements
from .engine.stats import REPORTED_PERCENTILES
from .param_bounds import (
    INPUT_DATA_KINDS,
    MAX_INPUT_DATA_BYTES,
    MAX_SEQUENCE_ID,
    MAX_VERSION_CHARS,
    MAX_WINDOW_MS,
    SweepError,
    check_range,
    parse_range,
)

# --- refusals ---------------------------------------------------------------------------------


class ParamsError(ValidationError):
    """Flags refused: `errors` maps each flag's name (NON_FIELD_ERRORS for a refusal about
    none) to one message that names the field, in words a form or a JSON client reads.

    A Django ValidationError with an error dict, so a form can take it as it is. Where a
    message opens with the field's words ("Rounds must be ..."), `subjects` holds them, and
    `named` puts the caller's own name for the field there instead (the command line's
    "--rounds must be ...")."""

    def __init__(self, errors: Mapping[str, str], subjects: Mapping[str, str] | None = None):
        super().__init__({name: [message] for name, message in errors.items()})
        self.errors = dict(errors)
        self.subjects = {k: v for k, v in (subjects or {}).items() if k in self.errors}

    def named(self, names: Mapping[str, str]) -> dict[str, str]:
        """The messages with each field called what `names` calls it; a message that does
        not open with the field's words gets the name and a colon before it."""
        named = {}
        for flag, message in self.errors.items():
            name = names.get(flag, flag)
            subject = self.subjects.get(flag, "")
            if flag == NON_FIELD_ERRORS:
                named[flag] = message
            elif subject and message.startswith(subject):
                named[flag] = name + message[len(subject) :]
            else:
                named[flag] = f"{name}: {message}"
        return named


class FlagsRefused(SweepError):
    """A preflight refusal that knows its flags (the model's kind did not fit them):
    `errors` maps each flag to its message, as ParamsError's."""

    def __init__(self, errors: Mapping[str, str]) -> None:
        super().__init__("; ".join(errors.values()))
        self.errors = dict(errors)


class Refused(Exception):
    """One flag's refusal inside `from_flags`: `subject` opens the message when it is the
    field's words."""

    def __init__(self, message: str, subject: str = "") -> None:
        super().__init__(message)
        self.message = f"{subject} {message}." if subject else message
        self.subject = subject


# --- one flag at a time -----------------------------------------------------------------------


def _sentence(message: str) -> str:
    return message[:1].upper() + message[1:] + "."


def range_flag(text: Any, mode: str) -> tuple[float, float, float]:
    """A range flag of `mode`, with every bound of `check_range` (levels counted, never
    listed, before the cap)."""
    what = "request-rate" if mode == "request_rate" else "concurrency"
    text = text.strip() if isinstance(text, str) else ""
    if not text:
        raise Refused(f"Enter a {what} range as start:end:step, e.g. 1:8:1.")
    try:
        start, end, step = parse_range(text)
        check_range(mode, start, end, step)
    except SweepError as exc:
        raise Refused(_sentence(str(exc))) from None
    return start, end, step


def _whole(value: Any, subject: str) -> int:
    """An int from an int, a whole float or its text ("500", "500.0"); not from a bool."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            return int(re.sub(r"\.0*$", "", value.strip()))
    raise Refused("must be a whole number", subject)


def _number(value: Any, subject: str) -> float:
    """A finite float from a number or its text; not from a bool."""
    number = math.nan
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str):
        with contextlib.suppress(ValueError):
            number = float(value)
    if not math.isfinite(number):
        raise Refused("must be a number", subject)
    return number


def measurement_interval(value: Any) -> int:
    subject = "The measurement window"
    ms = _whole(value, subject)
    if ms <= 0:
        raise Refused("must be a positive number of ms", subject)
    if ms < 50:
        raise Refused("must be at least 50 ms", subject)
    if ms > MAX_WINDOW_MS:
        raise Refused(f"can be at most {MAX_WINDOW_MS} ms", subject)
    return ms


def stability_percentage(value: Any) -> float:
    subject = "The stability percentage"
    percent = _number(value, subject)
    if percent <= 0 or percent > 1000:
        raise Refused("must be above 0 (e.g. 10)", subject)
    return percent


def batch_size(value: Any) -> int:
    subject = "The batch size"
    size = _whole(value, subject)
    if size < 1:
        raise Refused("must be at least 1", subject)
    return size


def latency_threshold(value: Any) -> float | None:
    subject = "The latency threshold"
    if value is None or value == "":
        return None
    ms = _number(value, subject)
    if ms <= 0:
        raise Refused("must be above 0 ms (or empty)", subject)
    return ms


def whole_between(subject: str, low: int, high: int, why: str = "") -> Callable[[Any], int]:
    def parse(value: Any) -> int:
        number = _whole(value, subject)
        if not low <= number <= high:
            raise Refused(f"must be between {low} and {high}{why}", subject)
        return number

    return parse


def percentile(value: Any) -> int | str:
    subject = "The percentile"
    if isinstance(value, str) and value.strip() == "avg":
        return "avg"
    try:
        percentile = _whole(value, subject)
    except Refused:
        percentile = 0
    if percentile not in REPORTED_PERCENTILES:
        raise Refused("must be 50, 90, 95, 99 or avg", subject)
    return percentile


def choice(subject: str, *choices: str) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        if value not in choices:
            raise Refused(f"must be {' or '.join(choices)}", subject)
        return str(value)

    return parse


def version(value: Any) -> str:
    subject = "The version"
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise Refused("must be a version number", subject)
    if len(value.strip()) > MAX_VERSION_CHARS:
        raise Refused(f"can be at most {MAX_VERSION_CHARS} characters", subject)
    return value.strip()


def shapes(value: Any) -> dict[str, list[int]]:
    """perf_analyzer's --shape: 'INPUT0:16 INPUT1:4,4' (NAME:d1,d2, several separated by
    spaces, commas between dims) -> {"INPUT0": [16], "INPUT1": [4, 4]}."""
    if isinstance(value, list | tuple):  # the command line's --shape, given once per input
        value = " ".join(str(v) for v in value)
    if not isinstance(value, str):
        raise Refused("The shapes must be text: NAME:d1,d2, several separated by spaces.")
    shapes: dict[str, list[int]] = {}
    for item in re.split(r"[\s;]+", value.strip()):
        if not item:
            continue
        name, sep, dims = item.rpartition(":")
        if not sep or not name or not dims:
            raise Refused(f"{item!r} is not NAME:d1,d2")
        try:
            values = [int(d) for d in dims.split(",")]
        except ValueError:
            raise Refused(f"{item!r}: dimensions must be whole numbers") from None
        if any(v <= 0 for v in values):
            raise Refused(f"{item!r}: dimensions must be positive")
        try:
            shape_elements(values, f"input {name}")
        except InputError as exc:
            raise Refused(str(exc)) from None
        shapes[name] = values
    return shapes


def input_data(value: Any) -> str | dict[str, Any]:
    """A keyword, or perf_analyzer's --input-data document (already parsed: the caller
    reads the file or the upload), checked for its layout and its stored size."""
    if isinstance(value, str) and value in INPUT_DATA_KINDS:
        return INPUT_DATA_KINDS[value]
    if not isinstance(value, dict | list):
        raise Refused("must be random, zeros or a JSON document", "The input data")
    try:
        load_input_data(value if isinstance(value, dict) else {})
    except InputError as exc:
        raise Refused(str(exc)) from None
    size = len(json.dumps(value).encode())
    if size > MAX_INPUT_DATA_BYTES:
        raise Refused(
            f"is {size:,} bytes as JSON; at most {MAX_INPUT_DATA_BYTES:,}", "The input data"
        )
    assert isinstance(value, dict)  # load_input_data refused anything else
    return value


def switch(subject: str) -> Callable[[Any], bool]:
    """A yes/no flag: a bool, or the text a form, a query string or a command line sends."""

    def parse(value: Any) -> bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _YES | _NO:
            return value.strip().lower() in _YES
        raise Refused("must be true or false", subject)

    return parse


_YES, _NO = {"true", "1", "on", "yes"}, {"false", "0", "off", "no"}


def sequence_length_variation(value: Any) -> float:
    subject = "The sequence length variation"
    percent = _number(value, subject)
    if not 0 <= percent <= 100:
        raise Refused("must be between 0 and 100 (percent)", subject)
    return percent


def sequence_id_range(value: Any) -> str:
    """perf_analyzer's --sequence-id-range START:END (END excluded, as there; START alone
    is unbounded), whole ids from 1; "" is its default."""
    subject = "The sequence id range"
    if not isinstance(value, str):
        raise Refused("must be text: START:END, e.g. 1:1000", subject)
    text = value.strip()
    if not text:
        return ""
    parts = text.split(":")
    # ASCII digits only (\d would take full-width ones), and no more than a uint64 has.
    if len(parts) > 2 or not all(re.fullmatch(r"[0-9]{1,20}", part) for part in parts):
        raise Refused(f"must be START:END in whole numbers, not {text!r}", subject)
    ids = [int(part) for part in parts]
    if ids[0] < 1 or ids[-1] > MAX_SEQUENCE_ID:
        raise Refused(f"must lie between 1 and {MAX_SEQUENCE_ID}", subject)
    if len(ids) == 2 and ids[1] <= ids[0]:
        raise Refused(f"holds no id: the end ({ids[1]}, excluded) must be above {ids[0]}", subject)
    return ":".join(map(str, ids))


def sequence_ids(text: str) -> int | None:
    """How many ids a --sequence-id-range holds (its end excluded); None when unbounded."""
    if ":" not in text:
        return None
    start, end = map(int, text.split(":"))
    return end - start


def goodput_objectives(value: Any) -> str:
    """AIPerf's --goodput objectives, as their canonical text ("" for none)."""
    subject = "Goodput"
    if not isinstance(value, str):
        raise Refused("must be text: NAME:MS pairs, e.g. time_to_first_token:200", subject)
    try:
        return goodput.text(goodput.parse(value))
    except goodput.GoodputError as exc:
        raise Refused(f"objective {exc}", subject) from None


# An output tensor's name: compared with the model's outputs only, but kept to the
# characters tensor names use (it is stored, shown and sent to the load workers).
_TENSOR_NAME = re.compile(r"[A-Za-z0-9_.:/\-]{1,128}")


def token_output(value: Any) -> str:
    subject = "The token output"
    if not isinstance(value, str):
        raise Refused("must be the name of an output tensor", subject)
    name = value.strip()
    if name and not _TENSOR_NAME.fullmatch(name):
        raise Refused(
            f"must be an output's name (letters, digits, _ . : / -; at most 128), not {name!r:.60}",
            subject,
        )
    return name


def model(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise Refused("name the model to benchmark")
    return value


def streaming_refusals(values: Mapping[str, Any]) -> dict[str, str]:
    """The flags that count what only a streaming sweep (a decoupled model) measures."""
    if values["streaming"] is not False:
        return {}
    errors = {}
    needs = goodput.streaming_only(goodput.parse(values["goodput"] or ""))
    if needs:
        errors["goodput"] = (
            f"Goodput objective {', '.join(needs)} needs a streaming sweep (--streaming, a "
            "decoupled model): a model that does not stream answers each request once, so "
            "only request_latency applies."
        )
    if values["token_output"]:
        errors["token_output"] = (
            "The token output counts tokens in a streaming sweep's responses: turn on "
            "--streaming (a decoupled model), or leave it empty."
        )
    return errors


def load_hosts_refusal(mode: str, end: float, hosts: int, max_threads: int | None) -> str:
    """Every host needs a share of the load at the range's end: a request in flight, or in
    request-rate mode a paced thread (--max-threads is shared among the hosts)."""
    if hosts <= 1:
        return ""
    if mode == "concurrency" and end < hosts:
        return (
            f"Load hosts ({hosts}) must be at most the concurrency range's end ({end:g}): "
            "each host needs a request in flight."
        )
    if mode == "request_rate" and max_threads is not None and max_threads < hosts:
        return (
            f"Load hosts ({hosts}) must be at most --max-threads ({max_threads}): the paced "
            "threads are shared among the hosts, each needs one."
        )
    return ""
