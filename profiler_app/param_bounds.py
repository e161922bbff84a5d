"""The bounds every entry of a sweep's parameters keeps (form, API, CLI, search, engine),
and the arithmetic on ranges: a range is counted before any list of levels exists, so
1:2:1e-300 is refused instead of becoming 10^300 floats. Kept apart from `params` so that
the checks of single flags (`param_flags`) and `SweepParams` share them without a circle.
"""

from __future__ import annotations

import math

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


class SweepError(RuntimeError):
    """The sweep could not start or run; the message is fit to show a user."""


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
        raise SweepError(too_many_levels(None))
    return int(span + 1e-9) + 1


def too_many_levels(count: int | None) -> str:
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
        raise SweepError(too_many_levels(count))
    if mode == "concurrency" and not all(
        float(start + i * step).is_integer() for i in range(count)
    ):
        raise SweepError("concurrency levels must be whole numbers")
    return count
