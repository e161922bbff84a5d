"""A sweep's parameters: `SweepParams`, their bounds, and the one entry from perf_analyzer's
flags (`from_flags`) that the Benchmark form, the REST API, `manage.py perf_sweep` and the
config search all go through.

`from_flags` takes the flags by name (`concurrency_range`, `measurement_interval`,
`max_trials`, `batch_size`, ...: perf_analyzer's, with dashes as underscores), as typed
values or as the strings a command line or a JSON body carries, checks every bound once
and raises one `ParamsError` carrying a message per refused flag. Ranges are counted by
arithmetic before any list of levels exists: 1:2:1e-300 would otherwise be 10^300 floats.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import NON_FIELD_ERRORS, ValidationError

from . import goodput
from .engine.inputs import InputError, load_input_data, shape_elements
from .engine.stats import REPORTED_PERCENTILES

# The bounds, one place for every entry (form, API, CLI, search) and the engine.
MAX_LEVELS = 200
MAX_CONCURRENCY = 4096  # requests outstanding at once
MAX_REQUEST_RATE = 1_000_000  # requests/s
MAX_WINDOW_MS = 600_000  # --measurement-interval
MAX_TRIALS = 1000  # --max-trials (windows per level)
MAX_ROUNDS = 10  # repeats of every level (see profiler_app.repeats)
# Request-rate mode: at most this many requests outstanding (paced threads), perf_analyzer's
# --max-threads, whose default in that mode is 4.
DEFAULT_MAX_THREADS = 4
MAX_THREADS_LIMIT = 64
MAX_VERSION_CHARS = 32
MAX_SEQUENCE_LENGTH = 100_000  # --sequence-length (requests per sequence)
MAX_SEQUENCE_ID = 2**64 - 1  # correlation ids are uint64
# Request-rate mode on a sequence model: the sequences live at once, which the arrivals are
# spread over (perf_analyzer's --num-of-sequences, default 4).
DEFAULT_NUM_OF_SEQUENCES = 4
MAX_NUM_OF_SEQUENCES = MAX_CONCURRENCY
# Load hosts (`engine.remote`): the sweep's worker and up to MAX_LOAD_HOSTS - 1 load agents,
# each a Celery worker of the job's queue, share every level's load.
MAX_LOAD_HOSTS = 16
MAX_INPUT_DATA_BYTES = 8 * 1024 * 1024  # stored with the sweep, so a re-run has the same data
# --input-data's keywords (perf_analyzer says "zero"; the form and the API "zeros").
INPUT_DATA_KINDS = {"random": "random", "zero": "zeros", "zeros": "zeros"}

# The flags `from_flags` reads and their defaults: the command line's, perf_analyzer's where
# it has one (a single concurrency level, 10 windows).
DEFAULTS: dict[str, Any] = {
    "version": "",
    "protocol": "grpc",
    "concurrency_range": "1:1:1",
    "request_rate_range": "",
    "request_distribution": "constant",
    "max_threads": DEFAULT_MAX_THREADS,
    "percentile": "95",
    "measurement_interval": 2000,
    "stability_percentage": 10.0,
    "max_trials": 10,
    "batch_size": 1,
    "latency_threshold": None,
    "rounds": 1,
    "shape": "",
    "input_data": "random",
    # Decoupled and sequence models (`model_kind`), perf_analyzer's defaults; "" for the
    # id range is perf_analyzer's own (from 1, unbounded).
    "streaming": False,
    "sequence_length": 20,
    "sequence_length_variation": 20.0,
    "sequence_id_range": "",
    "num_of_sequences": DEFAULT_NUM_OF_SEQUENCES,
    # AIPerf's --goodput objectives (`goodput`), and the output whose elements count a
    # streaming sweep's tokens ("": one response is one token).
    "goodput": "",
    "token_output": "",
    "load_hosts": 1,
}
# Flags that may be left empty ("" from a form or a query string): their default then.
_OPTIONAL = {
    "version", "request_distribution", "max_threads", "latency_threshold", "rounds",
    "streaming", "sequence_length", "sequence_length_variation", "sequence_id_range",
    "num_of_sequences",
    "goodput", "token_output", "load_hosts",
}  # fmt: skip
# The flags that only a sequence model takes (`kind_rules`).
SEQUENCE_FLAGS = (
    "sequence_length", "sequence_length_variation", "sequence_id_range", "num_of_sequences"
)  # fmt: skip


class SweepError(RuntimeError):
    """The sweep could not start or run; the message is fit to show a user."""


@dataclass
class SweepParams:
    """What to measure and how, with perf_analyzer's defaults where it has them."""

    model: str
    version: str = ""
    protocol: str = "grpc"  # "grpc" | "http"
    mode: str = "concurrency"  # "concurrency" | "request_rate"
    start: float = 1
    end: float = 1
    step: float = 1
    batch_size: int = 1
    shapes: dict[str, list[int]] = field(default_factory=dict)
    input_data: str | dict[str, Any] = "random"  # "random" | "zeros" | JSON path/text/dict
    percentile: int | str = 95  # 50/90/95/99, or "avg"
    measurement_window_ms: int = 1000
    stability_percentage: float = 10.0
    max_windows: int = 10
    latency_threshold_ms: float | None = None
    arrival: str = "constant"  # request-rate mode: "constant" | "poisson"
    seed: int = 0
    workers: int = 1  # load processes; more only helps when one cannot keep up
    max_threads: int = DEFAULT_MAX_THREADS  # request-rate mode: perf_analyzer's --max-threads
    client: str = "auto"  # "aio" | "threads" | "auto" (see loadgen._client_plan)
    # Rounds over all the levels, each level measured once per round (profiler_app.repeats);
    # run_sweep itself measures one round: the caller repeats it.
    rounds: int = 1
    # --streaming: requests over gRPC bidirectional streaming (what a decoupled model needs).
    streaming: bool = False
    # Sequence models: requests per sequence, its spread in percent, and the correlation ids
    # used ("A:B"; "" is perf_analyzer's default). Stored sweeps without them read these.
    sequence_length: int = 20
    sequence_length_variation: float = 20.0
    sequence_id_range: str = ""
    # Request-rate mode: sequences live at once (--num-of-sequences).
    num_of_sequences: int = DEFAULT_NUM_OF_SEQUENCES
    # Goodput objectives, canonical text ("first_response:200 request_latency:500", ms; see
    # profiler_app.goodput), and the output tensor whose elements per response are tokens.
    goodput: str = ""
    token_output: str = ""
    # Hosts that generate the load of every level (`engine.remote`): 1 is the sweep's own
    # worker; N > 1 adds N - 1 load agents (Celery workers of the job's queue), each level
    # split among them and their windows merged exactly (raw samples pooled).
    load_hosts: int = 1

    @property
    def range_text(self) -> str:
        return f"{self.start:g}:{self.end:g}:{self.step:g}"

    def level_count(self) -> int:
        """How many levels the range holds, computed (see `level_count`)."""
        return level_count(self.start, self.end, self.step)

    def levels(self) -> list[float]:
        """The levels of the range, inclusive, like perf_analyzer's start:end:step. Refuses
        (SweepError) a range over MAX_LEVELS before building anything."""
        count = self.level_count()
        if count > MAX_LEVELS:
            raise SweepError(_too_many_levels(count))
        return [self.start + i * self.step for i in range(count)]

    def flags(self) -> dict[str, Any]:
        """These parameters as the perf_analyzer-named flags `from_flags` reads."""
        span = f"{self.start!r}:{self.end!r}:{self.step!r}"
        return {
            "model": self.model,
            "version": self.version,
            "protocol": self.protocol,
            "mode": self.mode,
            "request_rate_range" if self.mode == "request_rate" else "concurrency_range": span,
            "request_distribution": self.arrival,
            "max_threads": self.max_threads,
            "percentile": self.percentile,
            "measurement_interval": self.measurement_window_ms,
            "stability_percentage": self.stability_percentage,
            "max_trials": self.max_windows,
            "batch_size": self.batch_size,
            "latency_threshold": self.latency_threshold_ms,
            "rounds": self.rounds,
            "shape": " ".join(f"{k}:{','.join(map(str, v))}" for k, v in self.shapes.items()),
            "input_data": self.input_data,
            "streaming": self.streaming,
            "sequence_length": self.sequence_length,
            "sequence_length_variation": self.sequence_length_variation,
            "sequence_id_range": self.sequence_id_range,
            "num_of_sequences": self.num_of_sequences,
            "goodput": self.goodput,
            "token_output": self.token_output,
            "load_hosts": self.load_hosts,
        }

    def validate(self) -> None:
        """The same bounds as every entry's (`from_flags`), for parameters built in code or
        read back from a stored sweep; SweepError with the first refusal."""
        if self.client not in ("auto", "aio", "threads"):
            raise SweepError(f"client must be auto, aio or threads, not {self.client!r}")
        try:
            from_flags(self.flags())
        except ParamsError as exc:
            first = next(iter(exc.errors.values()))
            raise SweepError(first[:1].lower() + first[1:].rstrip(".")) from None

    @property
    def latency_label(self) -> str:
        return "avg" if self.percentile == "avg" else f"p{int(self.percentile)}"


# --- ranges -----------------------------------------------------------------------------------


def parse_range(text: str) -> tuple[float, float, float]:
    """'1:8:2' -> (1, 8, 2); 'A:B' steps by 1; 'A' is a single level. SweepError (a
    message fit to show) for anything else, including inf and nan."""
    try:
        parts = [float(p) for p in text.split(":")]
    except ValueError:
        raise SweepError(f"{text!r} is not start:end:step (numbers)") from None
    for part in parts:
        if not math.isfinite(part):
            raise SweepError(f"{text!r}: {part} is not a finite number")
    if len(parts) == 1:
        return parts[0], parts[0], 1.0
    if len(parts) == 2:
        return parts[0], parts[1], 1.0
    if len(parts) == 3:
        return parts[0], parts[1], parts[2]
    raise SweepError(f"range {text!r} is not start:end[:step]")


def level_count(start: float, end: float, step: float) -> int:
    """How many levels start:end:step holds (inclusive, as perf_analyzer counts them),
    by arithmetic alone. SweepError, with a message fit to show, for a range that is not
    finite, starts at 0 or below, is inverted, or has a step of 0 or below."""
    for value in (start, end, step):
        if not math.isfinite(value):
            raise SweepError(f"{value} is not a finite number")
    if start <= 0:
        raise SweepError(f"the start ({start:g}) must be above 0")
    if end < start:
        raise SweepError(f"the range is inverted: end {end:g} is below start {start:g}")
    if step <= 0:
        raise SweepError(f"the step ({step:g}) must be above 0")
    span = (end - start) / step
    if not math.isfinite(span):  # a step so small that the quotient overflows
        raise SweepError(_too_many_levels(None))
    return int(span + 1e-9) + 1


def _too_many_levels(count: int | None) -> str:
    if count is None or count > 10**9:
        return f"the range has far more than {MAX_LEVELS} levels: raise the step"
    return f"{count:,} levels is too many (at most {MAX_LEVELS}): raise the step"


def check_range(mode: str, start: float, end: float, step: float) -> int:
    """The level count of a range for `mode`, after every bound (finite, the order of
    start/end/step, MAX_CONCURRENCY or MAX_REQUEST_RATE, MAX_LEVELS, whole concurrency
    levels); SweepError naming what is wrong. Nothing is listed before the count passes."""
    count = level_count(start, end, step)
    if mode == "concurrency" and end > MAX_CONCURRENCY:
        raise SweepError(f"concurrency can be at most {MAX_CONCURRENCY} (the end is {end:g})")
    if mode == "request_rate" and end > MAX_REQUEST_RATE:
        raise SweepError(
            f"the request rate can be at most {MAX_REQUEST_RATE:,} requests/s (the end is {end:g})"
        )
    if count > MAX_LEVELS:
        raise SweepError(_too_many_levels(count))
    if mode == "concurrency" and not all(
        float(start + i * step).is_integer() for i in range(count)
    ):
        raise SweepError("concurrency levels must be whole numbers")
    return count


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


class _Refused(Exception):
    """One flag's refusal inside `from_flags`: `subject` opens the message when it is the
    field's words."""

    def __init__(self, message: str, subject: str = "") -> None:
        super().__init__(message)
        self.message = f"{subject} {message}." if subject else message
        self.subject = subject


def refusal(exc: SweepError, params: SweepParams) -> ParamsError:
    """A preflight refusal (`sweeps.preflight`) on the flag it is about: requests that could
    not be built from the input data or from the shapes; the model's state, its batch size
    limit and Triton's answers on none; the kind's refusals (`FlagsRefused`) on theirs."""
    if isinstance(exc, FlagsRefused):
        return ParamsError(exc.errors)
    message = str(exc)
    flag = NON_FIELD_ERRORS
    if message.startswith("inputs:"):
        if isinstance(params.input_data, dict):
            flag = "input_data"
        elif "shape" in message:
            flag = "shape"
    return ParamsError({flag: message})


# --- one flag at a time -----------------------------------------------------------------------


def _sentence(message: str) -> str:
    return message[:1].upper() + message[1:] + "."


def _range(text: Any, mode: str) -> tuple[float, float, float]:
    """A range flag of `mode`, with every bound of `check_range` (levels counted, never
    listed, before the cap)."""
    what = "request-rate" if mode == "request_rate" else "concurrency"
    text = text.strip() if isinstance(text, str) else ""
    if not text:
        raise _Refused(f"Enter a {what} range as start:end:step, e.g. 1:8:1.")
    try:
        start, end, step = parse_range(text)
        check_range(mode, start, end, step)
    except SweepError as exc:
        raise _Refused(_sentence(str(exc))) from None
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
    raise _Refused("must be a whole number", subject)


def _number(value: Any, subject: str) -> float:
    """A finite float from a number or its text; not from a bool."""
    number = math.nan
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str):
        with contextlib.suppress(ValueError):
            number = float(value)
    if not math.isfinite(number):
        raise _Refused("must be a number", subject)
    return number


def _measurement_interval(value: Any) -> int:
    subject = "The measurement window"
    ms = _whole(value, subject)
    if ms <= 0:
        raise _Refused("must be a positive number of ms", subject)
    if ms < 50:
        raise _Refused("must be at least 50 ms", subject)
    if ms > MAX_WINDOW_MS:
        raise _Refused(f"can be at most {MAX_WINDOW_MS} ms", subject)
    return ms


def _stability_percentage(value: Any) -> float:
    subject = "The stability percentage"
    percent = _number(value, subject)
    if percent <= 0 or percent > 1000:
        raise _Refused("must be above 0 (e.g. 10)", subject)
    return percent


def _batch_size(value: Any) -> int:
    subject = "The batch size"
    size = _whole(value, subject)
    if size < 1:
        raise _Refused("must be at least 1", subject)
    return size


def _latency_threshold(value: Any) -> float | None:
    subject = "The latency threshold"
    if value is None or value == "":
        return None
    ms = _number(value, subject)
    if ms <= 0:
        raise _Refused("must be above 0 ms (or empty)", subject)
    return ms


def _whole_between(subject: str, low: int, high: int, why: str = "") -> Callable[[Any], int]:
    def parse(value: Any) -> int:
        number = _whole(value, subject)
        if not low <= number <= high:
            raise _Refused(f"must be between {low} and {high}{why}", subject)
        return number

    return parse


def _percentile(value: Any) -> int | str:
    subject = "The percentile"
    if isinstance(value, str) and value.strip() == "avg":
        return "avg"
    try:
        percentile = _whole(value, subject)
    except _Refused:
        percentile = 0
    if percentile not in REPORTED_PERCENTILES:
        raise _Refused("must be 50, 90, 95, 99 or avg", subject)
    return percentile


def _choice(subject: str, *choices: str) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        if value not in choices:
            raise _Refused(f"must be {' or '.join(choices)}", subject)
        return str(value)

    return parse


def _version(value: Any) -> str:
    subject = "The version"
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise _Refused("must be a version number", subject)
    if len(value.strip()) > MAX_VERSION_CHARS:
        raise _Refused(f"can be at most {MAX_VERSION_CHARS} characters", subject)
    return value.strip()


def parse_shapes(text: str) -> dict[str, list[int]]:
    """'INPUT0:16 INPUT1:4,4' (perf_analyzer's --shape NAME:d1,d2, several separated by
    spaces, commas between dims) -> {"INPUT0": [16], "INPUT1": [4, 4]}; ParamsError on
    "shape" says what is wrong."""
    try:
        return _shapes(text)
    except _Refused as exc:
        raise ParamsError({"shape": exc.message}) from None


def _shapes(value: Any) -> dict[str, list[int]]:
    if isinstance(value, list | tuple):  # the command line's --shape, given once per input
        value = " ".join(str(v) for v in value)
    if not isinstance(value, str):
        raise _Refused("The shapes must be text: NAME:d1,d2, several separated by spaces.")
    shapes: dict[str, list[int]] = {}
    for item in re.split(r"[\s;]+", value.strip()):
        if not item:
            continue
        name, sep, dims = item.rpartition(":")
        if not sep or not name or not dims:
            raise _Refused(f"{item!r} is not NAME:d1,d2")
        try:
            values = [int(d) for d in dims.split(",")]
        except ValueError:
            raise _Refused(f"{item!r}: dimensions must be whole numbers") from None
        if any(v <= 0 for v in values):
            raise _Refused(f"{item!r}: dimensions must be positive")
        try:
            shape_elements(values, f"input {name}")
        except InputError as exc:
            raise _Refused(str(exc)) from None
        shapes[name] = values
    return shapes


def _input_data(value: Any) -> str | dict[str, Any]:
    """A keyword, or perf_analyzer's --input-data document (already parsed: the caller
    reads the file or the upload), checked for its layout and its stored size."""
    if isinstance(value, str) and value in INPUT_DATA_KINDS:
        return INPUT_DATA_KINDS[value]
    if not isinstance(value, dict | list):
        raise _Refused("must be random, zeros or a JSON document", "The input data")
    try:
        load_input_data(value if isinstance(value, dict) else {})
    except InputError as exc:
        raise _Refused(str(exc)) from None
    size = len(json.dumps(value).encode())
    if size > MAX_INPUT_DATA_BYTES:
        raise _Refused(
            f"is {size:,} bytes as JSON; at most {MAX_INPUT_DATA_BYTES:,}", "The input data"
        )
    assert isinstance(value, dict)  # load_input_data refused anything else
    return value


def _switch(subject: str) -> Callable[[Any], bool]:
    """A yes/no flag: a bool, or the text a form, a query string or a command line sends."""

    def parse(value: Any) -> bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _YES | _NO:
            return value.strip().lower() in _YES
        raise _Refused("must be true or false", subject)

    return parse


_YES, _NO = {"true", "1", "on", "yes"}, {"false", "0", "off", "no"}


def _sequence_length_variation(value: Any) -> float:
    subject = "The sequence length variation"
    percent = _number(value, subject)
    if not 0 <= percent <= 100:
        raise _Refused("must be between 0 and 100 (percent)", subject)
    return percent


def _sequence_id_range(value: Any) -> str:
    """perf_analyzer's --sequence-id-range START:END (END excluded, as there; START alone
    is unbounded), whole ids from 1; "" is its default."""
    subject = "The sequence id range"
    if not isinstance(value, str):
        raise _Refused("must be text: START:END, e.g. 1:1000", subject)
    text = value.strip()
    if not text:
        return ""
    parts = text.split(":")
    # ASCII digits only (\d would take full-width ones), and no more than a uint64 has.
    if len(parts) > 2 or not all(re.fullmatch(r"[0-9]{1,20}", part) for part in parts):
        raise _Refused(f"must be START:END in whole numbers, not {text!r}", subject)
    ids = [int(part) for part in parts]
    if ids[0] < 1 or ids[-1] > MAX_SEQUENCE_ID:
        raise _Refused(f"must lie between 1 and {MAX_SEQUENCE_ID}", subject)
    if len(ids) == 2 and ids[1] <= ids[0]:
        raise _Refused(f"holds no id: the end ({ids[1]}, excluded) must be above {ids[0]}", subject)
    return ":".join(map(str, ids))


def sequence_ids(text: str) -> int | None:
    """How many ids a --sequence-id-range holds (its end excluded); None when unbounded."""
    if ":" not in text:
        return None
    start, end = map(int, text.split(":"))
    return end - start


def _goodput(value: Any) -> str:
    """AIPerf's --goodput objectives, as their canonical text ("" for none)."""
    subject = "Goodput"
    if not isinstance(value, str):
        raise _Refused("must be text: NAME:MS pairs, e.g. time_to_first_token:200", subject)
    try:
        return goodput.text(goodput.parse(value))
    except goodput.GoodputError as exc:
        raise _Refused(f"objective {exc}", subject) from None


# An output tensor's name: compared with the model's outputs only, but kept to the
# characters tensor names use (it is stored, shown and sent to the load workers).
_TENSOR_NAME = re.compile(r"[A-Za-z0-9_.:/\-]{1,128}")


def _token_output(value: Any) -> str:
    subject = "The token output"
    if not isinstance(value, str):
        raise _Refused("must be the name of an output tensor", subject)
    name = value.strip()
    if name and not _TENSOR_NAME.fullmatch(name):
        raise _Refused(
            f"must be an output's name (letters, digits, _ . : / -; at most 128), not {name!r:.60}",
            subject,
        )
    return name


def _model(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise _Refused("name the model to benchmark")
    return value


def _streaming_refusals(values: Mapping[str, Any]) -> dict[str, str]:
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


def _load_hosts_refusal(mode: str, end: float, hosts: int, max_threads: int | None) -> str:
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


# --- the entry --------------------------------------------------------------------------------


def from_flags(flags: Mapping[str, Any]) -> SweepParams:
    """SweepParams from perf_analyzer-named flags (DEFAULTS names them; "model" too, and
    "mode", which defaults to request_rate when a request-rate range is given); a missing
    flag takes its default, other keys are ignored. Every flag is checked and every refusal
    comes back at once, in one ParamsError."""
    errors: dict[str, str] = {}
    subjects: dict[str, str] = {}

    def take(name: str, parse: Callable[[Any], Any], default: Any = None) -> Any:
        value = flags.get(name)
        if value is None or (value == "" and name in _OPTIONAL):
            value = DEFAULTS.get(name, default)
        try:
            return parse(value)
        except _Refused as exc:
            errors[name] = exc.message
            if exc.subject:
                subjects[name] = exc.subject
            return None

    # perf_analyzer has no mode flag: the range given says which.
    implied = "request_rate" if flags.get("request_rate_range") else "concurrency"
    mode = take("mode", _choice("The mode", "concurrency", "request_rate"), implied)
    span_flag = "request_rate_range" if mode == "request_rate" else "concurrency_range"
    span = take(span_flag, lambda text: _range(text, mode or "concurrency"))
    values = {
        "model": take("model", _model),
        "version": take("version", _version),
        "protocol": take("protocol", _choice("The protocol", "grpc", "http")),
        "arrival": take(
            "request_distribution", _choice("The request distribution", "constant", "poisson")
        ),
        "max_threads": take("max_threads", _whole_between("Max threads", 1, MAX_THREADS_LIMIT)),
        "percentile": take("percentile", _percentile),
        "measurement_window_ms": take("measurement_interval", _measurement_interval),
        "stability_percentage": take("stability_percentage", _stability_percentage),
        "max_windows": take(
            "max_trials", _whole_between("Max windows", 3, MAX_TRIALS, " (3 decide stability)")
        ),
        "batch_size": take("batch_size", _batch_size),
        "latency_threshold_ms": take("latency_threshold", _latency_threshold),
        "rounds": take("rounds", _whole_between("Rounds", 1, MAX_ROUNDS)),
        "shapes": take("shape", _shapes),
        "input_data": take("input_data", _input_data),
        "streaming": take("streaming", _switch("Streaming")),
        "sequence_length": take(
            "sequence_length", _whole_between("The sequence length", 1, MAX_SEQUENCE_LENGTH)
        ),
        "sequence_length_variation": take("sequence_length_variation", _sequence_length_variation),
        "sequence_id_range": take("sequence_id_range", _sequence_id_range),
        "num_of_sequences": take(
            "num_of_sequences",
            _whole_between("The number of sequences", 1, MAX_NUM_OF_SEQUENCES),
        ),
        "goodput": take("goodput", _goodput),
        "token_output": take("token_output", _token_output),
        "load_hosts": take(
            "load_hosts",
            _whole_between("Load hosts", 1, MAX_LOAD_HOSTS, " (the sweep's worker and its agents)"),
        ),
    }
    if values["streaming"] and values["protocol"] == "http":
        # perf_analyzer's rule too: HTTP has no stream to carry several responses.
        errors["streaming"] = "Streaming needs gRPC (-i grpc): HTTP has no streams."
        subjects["streaming"] = "Streaming"
    if mode == "concurrency" and values["num_of_sequences"] not in (
        None,
        DEFAULT_NUM_OF_SEQUENCES,
    ):
        # perf_analyzer ignores it there; a value that changes nothing is refused, not kept.
        errors["num_of_sequences"] = (
            "The number of sequences applies to request-rate mode: at a concurrency, each "
            "request in flight is a sequence of its own."
        )
        subjects["num_of_sequences"] = "The number of sequences"
    errors.update(_streaming_refusals(values))
    if "load_hosts" not in errors and span is not None and mode is not None:
        refused = _load_hosts_refusal(mode, span[1], values["load_hosts"], values["max_threads"])
        if refused:
            errors["load_hosts"], subjects["load_hosts"] = refused, "Load hosts"
    if errors:
        raise ParamsError(errors, subjects)
    start, end, step = span
    return SweepParams(mode=mode, start=start, end=end, step=step, **values)
