"""`manage.py perf_sweep MODEL ...`: a sweep with perf_analyzer's flags, run in this process.

The sweep is stored like one started from the UI (it appears in the history), but runs
synchronously here rather than through Celery; it takes the server's slot, so it refuses
to start while another sweep runs on the same Triton. ``--server NAME`` picks the server
(default: default, the TRITON_* environment's).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from jobs import queues
from profiler_app import export, jobs, kind_rules, sweeps
from profiler_app.forms import input_data_document
from profiler_app.models import Sweep
from profiler_app.param_bounds import INPUT_DATA_KINDS
from profiler_app.params import DEFAULTS, ParamsError
from profiler_app.permissions import RUN_PERMISSION
from registry import servers
from registry.servers import UnknownServer
from team.cli import acting_user

# The flags' names on this command line, where they are not --NAME-WITH-DASHES.
OPTIONS = {"model": "MODEL", "version": "-x", "protocol": "-i", "batch_size": "-b"}


class Command(BaseCommand):
    help = "Run a perf sweep against a Triton server (perf_analyzer's flag names)."

    def add_arguments(self, parser: CommandParser) -> None:
        # Values stay text: `params.from_flags` reads and checks them, as for the form and
        # the API, and fills in what is not given (the defaults shown here).
        parser.add_argument("model")
        parser.add_argument("-x", dest="version", help="model version")
        parser.add_argument("-i", dest="protocol", help=_default("grpc or http", "protocol"))
        group = parser.add_mutually_exclusive_group()
        group.add_argument(
            "--concurrency-range", help=_default("start:end:step", "concurrency_range")
        )
        group.add_argument("--request-rate-range", help="start:end:step (requests/s)")
        parser.add_argument("-b", dest="batch_size", help=_default("batch size", "batch_size"))
        parser.add_argument("--percentile", help=_default("50, 90, 95, 99 or avg", "percentile"))
        parser.add_argument("--measurement-interval", help=_default("ms", "measurement_interval"))
        parser.add_argument(
            "--stability-percentage", help=_default("percent", "stability_percentage")
        )
        parser.add_argument("--max-trials", help=_default("windows per level", "max_trials"))
        parser.add_argument("--latency-threshold", help="ms")
        parser.add_argument("--shape", action="append", default=[], help="NAME:d1,d2")
        parser.add_argument(
            "--input-data",
            help="random, zero(s), or a JSON file in perf_analyzer's --input-data format "
            "(default random)",
        )
        parser.add_argument(
            "--request-distribution", help=_default("constant or poisson", "request_distribution")
        )
        parser.add_argument(
            "--max-threads",
            help=_default("request-rate mode: most requests outstanding at once", "max_threads"),
        )
        parser.add_argument(
            "--rounds",
            help="measure every level this many times, one round over all levels after "
            "another (median and spread per level; default 1)",
        )
        parser.add_argument(
            "--streaming",
            action="store_true",
            default=None,
            help="gRPC streaming, for decoupled models (needs -i grpc)",
        )
        parser.add_argument(
            "--sequence-length",
            help=_default("sequence models: requests per sequence", "sequence_length"),
        )
        parser.add_argument(
            "--sequence-length-variation",
            help=_default("sequence models: percent", "sequence_length_variation"),
        )
        parser.add_argument(
            "--sequence-id-range", help="sequence models: START:END, END excluded (default from 1)"
        )
        parser.add_argument(
            "--num-of-sequences",
            help=_default(
                "sequence models, request-rate mode: sequences live at once", "num_of_sequences"
            ),
        )
        parser.add_argument(
            "--goodput",
            help="objectives in ms, AIPerf's: e.g. 'time_to_first_token:200 "
            "inter_token_latency:30 request_latency:500' (first_response, inter_response too)",
        )
        parser.add_argument(
            "--token-output",
            help="streaming: the output whose elements per response count tokens "
            "(default: one response is one token)",
        )
        parser.add_argument(
            "--load-hosts",
            help="built-in engine: hosts that generate each level's load, this process and "
            "N - 1 Celery workers of the default queue (default 1)",
        )
        parser.add_argument("--name", default="", help="a name for the sweep")
        parser.add_argument("--note", default="", help="a note stored with the sweep")
        parser.add_argument("-f", dest="csv", default=None, help="write the CSV here")
        parser.add_argument("--engine", choices=["builtin", "perf_analyzer"], default="builtin")
        # As the other commands: --as-user, else $DASHBOARD_CLI_USER; with neither, the
        # sweep has no owner (audited as "system", cancelled by Admins only).
        parser.add_argument(
            "--as-user",
            default=os.environ.get("DASHBOARD_CLI_USER") or None,
            help="run, store and audit the sweep as this user (default $DASHBOARD_CLI_USER; "
            "with neither, as nobody: the host's operator)",
        )
        parser.add_argument(
            "--server",
            default="default",
            metavar="NAME",
            help="the Triton server to run on (default: default, the TRITON_* environment's)",
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            server = servers.get(opts["server"])
        except UnknownServer as exc:
            raise CommandError(f"--server: {exc.message}") from None
        # A sweep stored as a user is run as that user: their role on this server, narrowings
        # included (a server hidden from them is unknown). Without --as-user the operator of
        # the host runs it, as before.
        user = acting_user(opts["as_user"], RUN_PERMISSION, server) if opts["as_user"] else None
        flags = {name: opts[name] for name in DEFAULTS if opts.get(name) not in (None, [])}
        if "input_data" in flags and flags["input_data"] not in INPUT_DATA_KINDS:
            flags["input_data"] = _input_file(flags["input_data"])
        try:
            sweep = sweeps.start_sweep(
                server,
                {**flags, "model": opts["model"]},
                user,
                engine=opts["engine"],
                enqueue=False,
                name=opts["name"],
                note=opts["note"],
            )
        except sweeps.SweepRefused as exc:  # the flags by this command line's names
            raise CommandError(exc.sentence or _refusal(exc, flags)) from None
        params = sweeps.params_of(sweep)
        # Run here, in this process: its host generates the load (the sweep page says so).
        if not jobs.claim(sweep.pk, queues.in_process("manage.py perf_sweep")):
            busy = jobs.running_on(sweep.server)
            reason = f"sweep #{busy.pk} is running there" if busy else "other sweeps are queued"
            Sweep.objects.filter(pk=sweep.pk).update(
                state=Sweep.State.FAILED, error=f"Triton at {server.grpc_url} is busy: {reason}"
            )
            raise CommandError(f"Triton at {server.grpc_url} is busy ({reason}); try again later")
        rounds = f" × {params.rounds} rounds" if params.rounds > 1 else ""
        self.stderr.write(
            f"sweep #{sweep.pk}: {params.model} {params.mode} {params.range_text}{rounds}"
        )
        for line in kind_rules.notes(params, sweep.model_kind):
            self.stdout.write(f"note: {line}")
        state = jobs.execute(sweep.pk)
        sweep.refresh_from_db()
        self.stdout.write(export.summary_text(sweep))
        if opts["csv"]:
            Path(opts["csv"]).write_text(export.to_csv(sweep))
            self.stderr.write(f"CSV written to {opts['csv']}")
        if state != Sweep.State.SUCCEEDED:
            raise CommandError(f"sweep #{sweep.pk} {state}: {sweep.error or 'no error text'}")


def _default(text: str, flag: str) -> str:
    return f"{text} (default {DEFAULTS[flag]})"


def _option(flag: str) -> str:
    return OPTIONS.get(flag, "--" + flag.replace("_", "-"))


def _refusal(exc: ParamsError, flags: dict[str, Any]) -> str:
    """One line per refused flag, naming it as this command line does."""
    named = exc.named({flag: _option(flag) for flag in exc.errors})
    lines = []
    for flag, line in named.items():
        if flag.endswith("_range"):  # the range as typed, as perf_analyzer's users read it
            span = flags.get(flag, DEFAULTS[flag])
            line = f"bad range {span!r} ({_option(flag)}): {exc.errors[flag]}"
        lines.append(line)
    return "\n".join(lines)


def _input_file(path: str) -> Any:
    """perf_analyzer's --input-data JSON file, read here so the sweep stores its content."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise CommandError(f"--input-data {path}: {exc.strerror or exc}") from None
    try:
        return input_data_document(raw)
    except ValidationError as exc:
        raise CommandError(f"--input-data {path}: {'; '.join(exc.messages)}") from None
