"""`manage.py perf_sweep MODEL ...`: a sweep with perf_analyzer's flags, run in this process.

The sweep is stored like one started from the UI (it appears in the history), but runs
synchronously here rather than through Celery; it takes the server's slot, so it refuses
to start while another sweep runs on the same Triton.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from profiler_app import export, sweeps
from profiler_app.forms import input_data_document, parse_shapes
from profiler_app.models import Sweep
from profiler_app.params import (
    DEFAULT_MAX_THREADS,
    MAX_ROUNDS,
    MAX_WINDOW_MS,
    SweepError,
    SweepParams,
    check_range,
    parse_range,
)


class Command(BaseCommand):
    help = "Run a perf sweep against the configured Triton (perf_analyzer's flag names)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("model")
        parser.add_argument("-x", dest="version", default="", help="model version")
        parser.add_argument("-i", dest="protocol", choices=["grpc", "http"], default="grpc")
        group = parser.add_mutually_exclusive_group()
        group.add_argument("--concurrency-range", default=None, help="start:end:step")
        group.add_argument("--request-rate-range", default=None, help="start:end:step")
        parser.add_argument("-b", dest="batch_size", type=int, default=1)
        parser.add_argument("--percentile", default="95", help="50, 90, 95, 99 or avg")
        parser.add_argument("--measurement-interval", type=int, default=2000, help="ms")
        parser.add_argument("--stability-percentage", type=float, default=10.0)
        parser.add_argument("--max-trials", type=int, default=10)
        parser.add_argument("--latency-threshold", type=float, default=None, help="ms")
        parser.add_argument("--shape", action="append", default=[], help="NAME:d1,d2")
        parser.add_argument(
            "--input-data",
            default="random",
            help="random, zero(s), or a JSON file in perf_analyzer's --input-data format",
        )
        parser.add_argument(
            "--request-distribution", choices=["constant", "poisson"], default="constant"
        )
        parser.add_argument(
            "--max-threads",
            type=int,
            default=DEFAULT_MAX_THREADS,
            help="request-rate mode: most requests outstanding at once",
        )
        parser.add_argument(
            "--rounds",
            type=int,
            default=1,
            help="measure every level this many times, one round over all levels after "
            "another (median and spread per level)",
        )
        parser.add_argument("--name", default="", help="a name for the sweep")
        parser.add_argument("--note", default="", help="a note stored with the sweep")
        parser.add_argument("-f", dest="csv", default=None, help="write the CSV here")
        parser.add_argument("--engine", choices=["builtin", "perf_analyzer"], default="builtin")
        parser.add_argument("--as-user", default=None, help="store the sweep as this user")

    def handle(self, *args: Any, **opts: Any) -> None:
        user = None
        if opts["as_user"]:
            user = get_user_model().objects.filter(username=opts["as_user"]).first()
            if user is None:
                raise CommandError(f"no user named {opts['as_user']!r}")
        mode = "request_rate" if opts["request_rate_range"] else "concurrency"
        span = opts["request_rate_range"] or opts["concurrency_range"] or "1:1:1"
        flag = "--request-rate-range" if mode == "request_rate" else "--concurrency-range"
        try:
            start, end, step = parse_range(span)
            # The bounds and the level count, before anything is built or stored.
            check_range(mode, start, end, step)
        except SweepError as exc:
            raise CommandError(f"bad range {span!r} ({flag}): {exc}") from None
        if not 1 <= opts["rounds"] <= MAX_ROUNDS:
            raise CommandError(f"--rounds must be between 1 and {MAX_ROUNDS}")
        if not 50 <= opts["measurement_interval"] <= MAX_WINDOW_MS:
            raise CommandError(f"--measurement-interval must be between 50 and {MAX_WINDOW_MS} ms")
        percentile: int | str = opts["percentile"]
        if percentile != "avg":
            try:
                percentile = int(percentile)
            except ValueError:
                raise CommandError("--percentile must be 50, 90, 95, 99 or avg") from None
        try:
            shapes = parse_shapes(" ".join(opts["shape"]))
        except ValidationError as exc:
            raise CommandError(f"--shape: {'; '.join(exc.messages)}") from None
        input_data = _input_data(opts["input_data"])
        params = SweepParams(
            model=opts["model"],
            version=opts["version"],
            protocol=opts["protocol"],
            mode=mode,
            start=start,
            end=end,
            step=step,
            batch_size=opts["batch_size"],
            shapes=shapes,
            input_data=input_data,
            percentile=percentile,
            measurement_window_ms=opts["measurement_interval"],
            stability_percentage=opts["stability_percentage"],
            max_windows=opts["max_trials"],
            latency_threshold_ms=opts["latency_threshold"],
            arrival=opts["request_distribution"],
            max_threads=opts["max_threads"],
            rounds=opts["rounds"],
        )
        try:
            sweeps.preflight(params, opts["engine"])
        except SweepError as exc:
            raise CommandError(str(exc)) from None
        sweep = sweeps.create_sweep(
            params,
            engine=opts["engine"],
            user=user,
            enqueue=False,
            name=opts["name"][:120],
            note=opts["note"],
        )
        if not sweeps.claim(sweep.pk):
            busy = sweeps.running_on(sweep.server)
            reason = f"sweep #{busy.pk} is running there" if busy else "other sweeps are queued"
            Sweep.objects.filter(pk=sweep.pk).update(
                state=Sweep.State.FAILED, error=f"Triton at {sweep.server} is busy: {reason}"
            )
            raise CommandError(f"Triton at {sweep.server} is busy ({reason}); try again later")
        rounds = f" × {params.rounds} rounds" if params.rounds > 1 else ""
        self.stderr.write(f"sweep #{sweep.pk}: {params.model} {mode} {params.range_text}{rounds}")
        state = sweeps.execute(sweep.pk)
        sweep.refresh_from_db()
        self.stdout.write(export.summary_text(sweep))
        if opts["csv"]:
            Path(opts["csv"]).write_text(export.to_csv(sweep))
            self.stderr.write(f"CSV written to {opts['csv']}")
        if state != Sweep.State.SUCCEEDED:
            raise CommandError(f"sweep #{sweep.pk} {state}: {sweep.error or 'no error text'}")


def _input_data(value: str) -> str | dict[str, Any]:
    """perf_analyzer's --input-data: random, zero (or zeros), or a JSON file, read here so
    the sweep stores its content."""
    if value in ("random", "zero", "zeros"):
        return "random" if value == "random" else "zeros"
    try:
        raw = Path(value).read_bytes()
    except OSError as exc:
        raise CommandError(f"--input-data {value}: {exc.strerror or exc}") from None
    try:
        return input_data_document(raw)
    except ValidationError as exc:
        raise CommandError(f"--input-data {value}: {'; '.join(exc.messages)}") from None
