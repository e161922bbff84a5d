"""A sweep's parameters: `SweepParams`, and the one entry from perf_analyzer's flags
(`from_flags`) that the Benchmark form, the REST API, `manage.py perf_sweep` and the config
search all go through.

`from_flags` takes the flags by name (`concurrency_range`, `measurement_interval`,
`max_trials`, `batch_size`, ...: perf_analyzer's, with dashes as underscores), as typed
values or as the strings a command line or a JSON body carries, checks every flag once
(`param_flags`, within the bounds of `param_bounds`) and raises one `ParamsError` carrying
a message per refused flag.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import NON_FIELD_ERRORS

from . import param_flags
from .param_bounds import (
    DEFAULT_MAX_THREADS,
    DEFAULT_NUM_OF_SEQUENCES,
    MAX_LEVELS,
    MAX_LOAD_HOSTS,
    MAX_NUM_OF_SEQUENCES,
    MAX_ROUNDS,
    MAX_SEQUENCE_LENGTH,
    MAX_THREADS_LIMIT,
    MAX_TRIALS,
    SweepError,
    level_count,
    too_many_levels,
)
from .param_flags import FlagsRefused, ParamsError

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
    # Requests of each level traced by Triton (its trace API; 0: none): `level_traces`.
    "trace_sample": 0,
}
# Flags that may be left empty ("" from a form or a query string): their default then.
_OPTIONAL = {
    "version", "request_distribution", "max_threads", "latency_threshold", "rounds",
    "streaming", "sequence_length", "sequence_length_variation", "sequence_id_range",
    "num_of_sequences",
    "goodput", "token_output", "load_hosts", "trace_sample",
}  # fmt: skip
# The flags that only a sequence model takes (`kind_rules`).
MAX_TRACE_SAMPLE = 100  # requests traced per level
SEQUENCE_FLAGS = (
    "sequence_length", "sequence_length_variation", "sequence_id_range", "num_of_sequences"
)  # fmt: skip


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
    client: str = "auto"  # "aio" | "threads" | "auto" (see engine.worker_pool.client_plan)
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
    # The first N requests of each level traced by Triton, their median timeline kept with
    # the level (`level_traces`); 0: none.
    trace_sample: int = 0

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
            raise SweepError(too_many_levels(count))
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
            "trace_sample": self.trace_sample,
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
        except param_flags.Refused as exc:
            errors[name] = exc.message
            if exc.subject:
                subjects[name] = exc.subject
            return None

    # perf_analyzer has no mode flag: the range given says which.
    implied = "request_rate" if flags.get("request_rate_range") else "concurrency"
    mode = take("mode", param_flags.choice("The mode", "concurrency", "request_rate"), implied)
    span_flag = "request_rate_range" if mode == "request_rate" else "concurrency_range"
    span = take(span_flag, lambda text: param_flags.range_flag(text, mode or "concurrency"))
    values = {
        "model": take("model", param_flags.model),
        "version": take("version", param_flags.version),
        "protocol": take("protocol", param_flags.choice("The protocol", "grpc", "http")),
        "arrival": take(
            "request_distribution",
            param_flags.choice("The request distribution", "constant", "poisson"),
        ),
        "max_threads": take(
            "max_threads", param_flags.whole_between("Max threads", 1, MAX_THREADS_LIMIT)
        ),
        "percentile": take("percentile", param_flags.percentile),
        "measurement_window_ms": take("measurement_interval", param_flags.measurement_interval),
        "stability_percentage": take("stability_percentage", param_flags.stability_percentage),
        "max_windows": take(
            "max_trials",
            param_flags.whole_between("Max windows", 3, MAX_TRIALS, " (3 decide stability)"),
        ),
        "batch_size": take("batch_size", param_flags.batch_size),
        "latency_threshold_ms": take("latency_threshold", param_flags.latency_threshold),
        "rounds": take("rounds", param_flags.whole_between("Rounds", 1, MAX_ROUNDS)),
        "shapes": take("shape", param_flags.shapes),
        "input_data": take("input_data", param_flags.input_data),
        "streaming": take("streaming", param_flags.switch("Streaming")),
        "sequence_length": take(
            "sequence_length",
            param_flags.whole_between("The sequence length", 1, MAX_SEQUENCE_LENGTH),
        ),
        "sequence_length_variation": take(
            "sequence_length_variation", param_flags.sequence_length_variation
        ),
        "sequence_id_range": take("sequence_id_range", param_flags.sequence_id_range),
        "num_of_sequences": take(
            "num_of_sequences",
            param_flags.whole_between("The number of sequences", 1, MAX_NUM_OF_SEQUENCES),
        ),
        "goodput": take("goodput", param_flags.goodput_objectives),
        "token_output": take("token_output", param_flags.token_output),
        "trace_sample": take(
            "trace_sample",
            param_flags.whole_between("Traced requests per level", 0, MAX_TRACE_SAMPLE),
        ),
        "load_hosts": take(
            "load_hosts",
            param_flags.whole_between(
                "Load hosts", 1, MAX_LOAD_HOSTS, " (the sweep's worker and its agents)"
            ),
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
    errors.update(param_flags.streaming_refusals(values))
    if "load_hosts" not in errors and span is not None and mode is not None:
        refused = param_flags.load_hosts_refusal(
            mode, span[1], values["load_hosts"], values["max_threads"]
        )
        if refused:
            errors["load_hosts"], subjects["load_hosts"] = refused, "Load hosts"
    if errors:
        raise ParamsError(errors, subjects)
    start, end, step = span
    return SweepParams(mode=mode, start=start, end=end, step=step, **values)
