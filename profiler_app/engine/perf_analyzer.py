"""perf_analyzer, the reference load generator: find it, run it, read what it says.

The binary is perf_analyzer 2.48 from the `tritonclient==2.48.0` manylinux wheel
(`scripts/install_perf_analyzer.py` puts it in var/tools/). It needs `libcudart.so.12`
on LD_LIBRARY_PATH even without a GPU; `perf_analyzer_env` arranges that.

Reading its output (checked against real 2.48 runs, see tests/data/perf_analyzer/):
- stdout, with `-v`, prints `Pass [n] throughput: X infer/sec. p95 latency: Y usec` per
  window, then a `Client:`/`Server:` block per level that stabilised;
- stderr says `Failed to obtain stable measurement within N measurement windows for
  concurrency C` (the run then exits 2 and stops) or `Measured latency went over the set
  limit of N msec.` (the sweep ends at that level, which is not reported);
- the `-f` CSV has one row per reported level, sorted by throughput; values in µs;
- for an ensemble (and a BLS model given `--bls-composing-models`) the `Server:` block
  gives queue and compute as the sums over its composing models ("(overhead O usec + queue
  Q usec + compute C usec)"), then a "Composing models:" block lists each one (sorted by
  name, nested ensembles indented further) with its own counts and breakdown: the steps
  (`composing`) of `extra["steps"]`. A BLS model's own breakdown is in the CSV only.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import csv
import inspect
import io
import json
import math
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dashboard.csv_cells import csv_cell
from repository_app.triton.aio import AioClient
from repository_app.triton.client import TritonError

from .. import measure
from ..params import DEFAULTS, SweepError, SweepParams
from . import composing, stats
from .loadgen import ServerBreakdown, SweepResult

ROOT = Path(__file__).resolve().parents[2]
TOOLS_DIR = ROOT / "var" / "tools"
PROJECT_BINARY = TOOLS_DIR / "perf_analyzer"
STDERR_TAIL = 5  # stderr lines kept to explain a run that failed without a known message

# perf_analyzer's CSV header with --verbose-csv (2.48); without it the last 3 are absent.
CSV_COLUMNS = [
    "Concurrency",
    "Inferences/Second",
    "Client Send",
    "Network+Server Send/Recv",
    "Server Queue",
    "Server Compute Input",
    "Server Compute Infer",
    "Server Compute Output",
    "Client Recv",
    "p50 latency",
    "p90 latency",
    "p95 latency",
    "p99 latency",
    "Avg latency",
    "request/response",
    "response wait",
]


# Added after those for a streaming sweep (µs, but responses/s): `extra` keys of
# `measure.STREAM_FIELDS`; a figure an engine did not measure is an empty cell
# (perf_analyzer 2.48 reports only the response throughput).
STREAM_CSV_COLUMNS = {
    "Response Throughput": "response_throughput",
    "p50 time to first response": "first_response_p50_us",
    "p95 time to first response": "first_response_p95_us",
    "p99 time to first response": "first_response_p99_us",
    "avg inter-response time": "inter_response_avg_us",
    "p95 inter-response time": "inter_response_p95_us",
    # The built-in engine's tokens (`measure.TOKEN_FIELDS`): tokens/s, per request, per user.
    "Output Token Throughput": "output_token_throughput",
    "Tokens per Request": "tokens_per_request",
    "Output Token Throughput per User": "output_token_throughput_per_user",
}
# Added last for a sweep with goodput objectives: requests/s that met them all.
GOODPUT_CSV_COLUMN = "Goodput"
_RATES = ("response_throughput", "output_token_throughput", "output_token_throughput_per_user",
          "tokens_per_request", "goodput")  # fmt: skip


# Added after those, per step, for a sweep of an ensemble or a BLS model ("add_sub Server
# Queue", ...): `measure.STEP_FIELDS` of its `extra["steps"]`, µs like the other columns.
STEP_CSV_COLUMNS = {
    "Server Queue": "queue_us",
    "Server Compute Input": "compute_input_us",
    "Server Compute Infer": "compute_infer_us",
    "Server Compute Output": "compute_output_us",
    "Request Count": "request_count",
    "Avg Batch Size": "avg_batch_size",
}


class PerfAnalyzerNotFound(FileNotFoundError):
    """No perf_analyzer binary; the message says how to install one."""


def locate_perf_analyzer() -> Path:
    """The perf_analyzer binary: $PERF_ANALYZER, then PATH, then var/tools/perf_analyzer."""
    configured = os.environ.get("PERF_ANALYZER")
    if configured:
        path = Path(configured)
        if path.is_file() and os.access(path, os.X_OK):
            return path
        raise PerfAnalyzerNotFound(f"PERF_ANALYZER={configured} is not an executable file")
    found = shutil.which("perf_analyzer")
    if found:
        return Path(found)
    if PROJECT_BINARY.is_file() and os.access(PROJECT_BINARY, os.X_OK):
        return PROJECT_BINARY
    raise PerfAnalyzerNotFound(
        "perf_analyzer not found: run `.venv/bin/python scripts/install_perf_analyzer.py` "
        "(puts it in var/tools/), or set PERF_ANALYZER to the binary"
    )


def perf_analyzer_env(binary: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for the binary: libcudart.so.12 from <binary dir>/lib or var/tools/lib."""
    env = dict(os.environ if base is None else base)
    dirs = [
        d for d in (binary.parent / "lib", TOOLS_DIR / "lib") if (d / "libcudart.so.12").exists()
    ]
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        dict.fromkeys([*map(str, dirs), *filter(None, [env.get("LD_LIBRARY_PATH")])])
    )
    return env


def _fmt(value: float) -> str:
    return f"{value:g}"


def build_command(
    params: SweepParams,
    url: str,
    *,
    binary: Path | str = "perf_analyzer",
    csv_path: Path | str | None = None,
    input_data_path: Path | str | None = None,
    bls_composing_models: Sequence[str] = (),
) -> list[str]:
    """perf_analyzer's command line for the same sweep as `params`.

    Input data other than "random"/"zeros" must be written to a file first and passed as
    `input_data_path`. `bls_composing_models` ("model" or "model:version", names checked
    by `composing.check_names`) are the models a BLS model calls.
    """
    cmd = [str(binary), "-m", params.model]
    if params.version:
        cmd += ["-x", params.version]
    if bls_composing_models:
        cmd += ["--bls-composing-models", ",".join(bls_composing_models)]
    cmd += ["-i", params.protocol, "-u", url, "-b", str(params.batch_size)]
    span = f"{_fmt(params.start)}:{_fmt(params.end)}:{_fmt(params.step)}"
    if params.mode == "concurrency":
        cmd += ["--concurrency-range", span]
    else:
        cmd += ["--request-rate-range", span, "--request-distribution", params.arrival]
        # Said even at its default (4 there), so the stored command shows the limit.
        cmd += ["--max-threads", str(params.max_threads)]
    if params.percentile != "avg":
        cmd += [f"--percentile={int(params.percentile)}"]
    cmd += [
        "--measurement-interval",
        str(params.measurement_window_ms),
        "--stability-percentage",
        _fmt(params.stability_percentage),
        "--max-trials",
        str(params.max_windows),
    ]
    if params.latency_threshold_ms:
        # perf_analyzer takes whole milliseconds
        cmd += ["--latency-threshold", str(max(1, round(params.latency_threshold_ms)))]
    if params.streaming:
        cmd += ["--streaming"]
    # The sequence flags only where they differ from perf_analyzer's defaults (the same as
    # ours): the command of a stateless model's sweep stays free of them.
    if params.sequence_length != DEFAULTS["sequence_length"]:
        cmd += ["--sequence-length", str(params.sequence_length)]
    if params.sequence_length_variation != DEFAULTS["sequence_length_variation"]:
        cmd += ["--sequence-length-variation", _fmt(params.sequence_length_variation)]
    if params.sequence_id_range:
        cmd += ["--sequence-id-range", params.sequence_id_range]
    if params.mode == "request_rate" and params.num_of_sequences != DEFAULTS["num_of_sequences"]:
        cmd += ["--num-of-sequences", str(params.num_of_sequences)]
    for name, dims in sorted(params.shapes.items()):
        cmd += ["--shape", f"{name}:{','.join(str(d) for d in dims)}"]
    if input_data_path is not None:
        cmd += ["--input-data", str(input_data_path)]
    elif params.input_data in ("random", "zeros"):
        cmd += ["--input-data", "random" if params.input_data == "random" else "zero"]
    else:
        raise ValueError("input data given as JSON needs input_data_path")
    if csv_path is not None:
        cmd += ["-f", str(csv_path), "--verbose-csv"]
    cmd += ["-v"]  # per-window "Pass" lines, for streaming
    return cmd


# --- stdout parsing ---------------------------------------------------------------------------


@dataclass
class PaWindow:
    level: float
    index: int  # 0-based
    throughput: float
    latency_us: float  # the stabilising latency: pN or avg
    closed_at: float = 0.0  # wall clock (time.time()) when its line was read

    def measured(self, chosen_key: str) -> measure.Window:
        """The window in the one shape of a measurement: perf_analyzer prints only its
        throughput and the stabilising latency (`chosen_key`, e.g. "p95_us")."""
        window = measure.Window(
            self.level,
            self.throughput,
            extra={"engine": "perf_analyzer"},
            window=self.index,
            closed_at=self.closed_at,
        )
        setattr(window, chosen_key, self.latency_us)
        return window


@dataclass
class PaStep:
    """One model of a level's "Composing models:" block, as perf_analyzer printed it."""

    model: str
    version: str
    counts: dict[str, float] = field(default_factory=dict)  # "Inference count": 12, ...
    server: dict[str, float] = field(default_factory=dict)  # request_us, queue_us, ... (µs)
    nested: bool = False  # an ensemble among the steps: its own steps follow it

    def breakdown(self) -> ServerBreakdown:
        """Its figures in the built-in engine's shape (a model with no request in the
        level prints only "Request count: 0")."""
        requests = self.counts.get("Successful request count", self.counts.get("Request count"))
        return ServerBreakdown(
            request_count=int(requests or 0),
            inference_count=int(self.counts.get("Inference count", 0)),
            execution_count=int(self.counts.get("Execution count", 0)),
            request_us=self.server.get("request_us", 0.0),
            queue_us=self.server.get("queue_us", 0.0),
            compute_input_us=self.server.get("compute_input_us", 0.0),
            compute_infer_us=self.server.get("compute_infer_us", 0.0),
            compute_output_us=self.server.get("compute_output_us", 0.0),
        )


@dataclass
class PaLevel:
    level: float
    throughput: float = 0.0
    response_throughput: float | None = None  # decoupled models (--streaming): responses/s
    request_count: int = 0
    avg_latency_us: float | None = None
    std_latency_us: float | None = None
    percentiles_us: dict[int, float] = field(default_factory=dict)
    server: dict[str, float] = field(default_factory=dict)
    stable: bool = True
    over_threshold: bool = False
    windows: list[PaWindow] = field(default_factory=list)
    steps: list[PaStep] = field(default_factory=list)  # its "Composing models:" block
    plan: composing.Plan = composing.NONE  # what the model is composed of (step order)

    def step_rows(self) -> list[dict[str, Any]]:
        """`extra["steps"]`: the composing models that are not ensembles themselves, in
        the plan's step order (perf_analyzer prints them sorted by name)."""
        order = [s.model for s in self.plan.steps]
        leaves = [s for s in self.steps if not s.nested]
        leaves.sort(key=lambda s: order.index(s.model) if s.model in order else len(order))
        return measure.with_compute_shares(
            [measure.step_fields(s.model, s.version, s.breakdown()) for s in leaves]
        )

    def measured(self, chosen_key: str) -> measure.Level:
        """The level in the one shape of a measurement. perf_analyzer prints no summary for
        a level that did not settle, nor for the one that went over the latency threshold:
        their last 3 windows (as they would have been merged) stand for them, at the
        chosen latency (`chosen_key`). A level with neither was cut short (cancelled)."""
        pct, server = self.percentiles_us, self.server
        level = measure.Level(
            level=self.level,
            throughput=self.throughput,
            requests=self.request_count,
            avg_us=self.avg_latency_us,
            p50_us=pct.get(50),
            p90_us=pct.get(90),
            p95_us=pct.get(95),
            p99_us=pct.get(99),
            server_request_us=server.get("request_us"),
            queue_us=server.get("queue_us"),
            compute_input_us=server.get("compute_input_us"),
            compute_infer_us=server.get("compute_infer_us"),
            compute_output_us=server.get("compute_output_us"),
            stable=self.stable,
            extra={
                "windows": len(self.windows),
                "over_threshold": self.over_threshold,
                "cancelled": False,
                "engine": "perf_analyzer",
            },
        )
        if self.response_throughput is not None:
            level.extra["response_throughput"] = self.response_throughput
        if steps := self.step_rows():
            level.extra["steps"] = steps
            _composed_breakdown(level, steps, bls=self.plan.kind == composing.BLS)
        from_windows = (
            not self.request_count
            and bool(self.windows)
            and (not self.stable or self.over_threshold)
        )
        if from_windows:
            last = self.windows[-stats.STABILITY_WINDOWS :]
            tputs = [w.throughput for w in last]
            lats = [w.latency_us for w in last]
            level.throughput = sum(tputs) / len(tputs)
            setattr(level, chosen_key, sum(lats) / len(lats))
            level.extra.update(
                throughput_spread=measure.finite(stats.spread(tputs)),
                latency_spread=measure.finite(stats.spread(lats)),
                from_windows=True,
            )
        level.extra["cancelled"] = not self.request_count and not from_windows
        return level


def _composed_breakdown(level: measure.Level, steps: list[dict[str, Any]], *, bls: bool) -> None:
    """The breakdown of a level with steps. An ensemble's is perf_analyzer's own rule (queue
    and compute summed over the steps), split into compute input/infer/output by its steps'
    figures so that they add up to it. A BLS model's printed queue and compute are its
    calls' sums, not its own: they are left unknown here, and its own come from the CSV
    (`csv_server`)."""
    if bls:
        level.queue_us = None
        return
    level.queue_us = sum(s["queue_us"] or 0.0 for s in steps)
    for key in measure.COMPUTE_FIELDS:
        setattr(level, key, sum(s[key] or 0.0 for s in steps))


_LEVEL = re.compile(r"^Request (?:concurrency: (\d+)|Rate: ([\d.]+) inference requests)")
_PASS = re.compile(
    r"^\s*Pass \[(\d+)\] throughput: ([\d.e+]+) infer/sec\. (?:p\d+|Avg) latency: (\d+) usec"
)
_NUMBER_LINE = re.compile(
    r"^\s*(Request count|Throughput|Inference count|Execution count|Successful request count): ([\d.e+]+)"
)
_RESPONSES = re.compile(r"^\s*Response Throughput: ([\d.e+]+)")
_AVG = re.compile(r"^\s*Avg latency: (\d+) usec \(standard deviation (\d+) usec\)")
_PCT = re.compile(r"^\s*p(\d+) latency: (\d+) usec")
_SERVER = re.compile(
    r"^\s*Avg request latency: (\d+) usec \(overhead (\d+) usec \+ queue (\d+) usec \+ "
    r"compute input (\d+) usec \+ compute infer (\d+) usec \+ compute output (\d+) usec\)"
)
# An ensemble's (or a BLS model's, with --bls-composing-models) Server line: sums over its
# composing models, then their block: "<name>, version: <v>" and each one's own lines.
_COMPOSED_SERVER = re.compile(
    r"^\s*Avg request latency: (\d+) usec \(overhead (\d+) usec \+ queue (\d+) usec \+ "
    r"compute (\d+) usec\)"
)
_SERVER_KEYS = (
    "request_us",
    "overhead_us",
    "queue_us",
    "compute_input_us",
    "compute_infer_us",
    "compute_output_us",
)
_COMPOSED_KEYS = ("request_us", "overhead_us", "queue_us", "compute_us")
_COMPOSING = re.compile(r"^\s*Composing models:\s*$")
_STEP = re.compile(r"^\s*([A-Za-z0-9_][A-Za-z0-9_.-]*), version: (\S*)\s*$")
_SUMMARY = re.compile(r"^Inferences/Second vs\. ")
_UNSTABLE = re.compile(
    r"Failed to obtain stable measurement within (\d+) measurement windows for concurrency (\d+)"
)
_UNSTABLE_ANY = re.compile(r"^Failed to obtain stable measurement\.")
_OVER = re.compile(r"Measured latency went over the set limit of (\d+) msec")


class StdoutParser:
    """Feed perf_analyzer's output line by line; get windows and finished levels back.

    stdout and stderr can both be fed (stderr carries the unstable/threshold verdicts).
    A level with composing models (`plan`, or any "Composing models:" block) ends at the
    next level, the closing summary or the end of the output, after its block.
    """

    def __init__(self, plan: composing.Plan = composing.NONE) -> None:
        self.plan = plan
        self.current: PaLevel | None = None
        self.levels: list[PaLevel] = []
        self.errors: list[str] = []
        self._block = ""  # "client" | "server" | "steps" | ""

    def feed(self, line: str) -> list[PaWindow | PaLevel]:
        events: list[PaWindow | PaLevel] = []
        line = line.rstrip("\n")
        if m := _LEVEL.match(line):
            events += self._finish()
            self.current = PaLevel(float(m.group(1) or m.group(2)), plan=self.plan)
            return events
        if _SUMMARY.match(line):  # the last level's composing block is over
            return events + self._finish()
        if m := _UNSTABLE.search(line):
            unstable = self.current or PaLevel(float(m.group(2)))
            unstable.stable = False
            self.current = unstable
            return events + self._finish()
        if _UNSTABLE_ANY.match(line):
            if self.current is not None:
                self.current.stable = False
                events += self._finish()
            return events
        if _OVER.search(line):
            if self.current is not None and self.current.request_count:
                events += self._finish()  # a reported level still open (its steps)
            if self.current is not None and not self.current.request_count:
                self.current.over_threshold = True
                events += self._finish()
            elif self.levels:
                self.levels[-1].over_threshold = True
            return events
        if line.startswith("error:") or line.startswith("Error"):
            self.errors.append(line)
            return events
        level = self.current
        if level is None:
            return events
        if m := _PASS.match(line):
            window = PaWindow(
                level.level,
                int(m.group(1)) - 1,
                float(m.group(2)),
                float(m.group(3)),
                closed_at=time.time(),
            )
            level.windows.append(window)
            return [window]
        if self._block == "steps":
            self._feed_step(level, line)
            return events
        stripped = line.strip()
        if _COMPOSING.match(line):
            self._block = "steps"
        elif m := _COMPOSED_SERVER.match(line):
            level.server.update(zip(_COMPOSED_KEYS, map(float, m.groups()), strict=True))
        elif stripped == "Client:":
            self._block = "client"
        elif stripped == "Server:":
            self._block = "server"
        elif m := _NUMBER_LINE.match(line):
            key, value = m.group(1), float(m.group(2))
            if key == "Request count":
                level.request_count = int(value)
            elif key == "Throughput":
                level.throughput = value
            else:
                level.server[key] = value
        elif m := _RESPONSES.match(line):
            level.response_throughput = float(m.group(1))
        elif m := _AVG.match(line):
            level.avg_latency_us, level.std_latency_us = float(m.group(1)), float(m.group(2))
        elif m := _PCT.match(line):
            level.percentiles_us[int(m.group(1))] = float(m.group(2))
        elif m := _SERVER.match(line):
            level.server.update(zip(_SERVER_KEYS, map(float, m.groups()), strict=True))
            events += self._finish()
        return events

    def _feed_step(self, level: PaLevel, line: str) -> None:
        """A line of the "Composing models:" block (nested blocks included)."""
        if m := _STEP.match(line):
            level.steps.append(PaStep(m.group(1), m.group(2)))
            return
        if not level.steps:
            return
        step = level.steps[-1]
        if m := _NUMBER_LINE.match(line):
            step.counts[m.group(1)] = float(m.group(2))
        elif m := _SERVER.match(line):
            step.server.update(zip(_SERVER_KEYS, map(float, m.groups()), strict=True))
        elif m := _COMPOSED_SERVER.match(line):
            step.nested = True  # an ensemble: its own steps follow, further indented
            step.server.update(zip(_COMPOSED_KEYS, map(float, m.groups()), strict=True))

    def _finish(self) -> list[PaWindow | PaLevel]:
        level, self.current = self.current, None
        self._block = ""
        if level is None:
            return []
        self.levels.append(level)
        return [level]

    def close(self) -> list[PaWindow | PaLevel]:
        """Call at the end of output: finishes a level still open."""
        return self._finish()


def parse_output(lines: Iterable[str], plan: composing.Plan = composing.NONE) -> list[PaLevel]:
    """All levels from a complete captured output."""
    parser = StdoutParser(plan)
    for line in lines:
        parser.feed(line)
    parser.close()
    return parser.levels


# --- CSV --------------------------------------------------------------------------------------


def parse_csv(text: str) -> list[dict[str, float]]:
    """perf_analyzer's -f CSV as dicts of floats, re-sorted by level (first column)."""
    reader = csv.DictReader(io.StringIO(text))
    rows = [{k: float(v) for k, v in row.items() if k and v not in (None, "")} for row in reader]
    key = reader.fieldnames[0] if reader.fieldnames else "Concurrency"
    return sorted(rows, key=lambda r: r.get(key, 0.0))


# The model's own breakdown in perf_analyzer's CSV (µs): for a BLS model the CSV has it, its
# stdout only its calls' sums.
CSV_SERVER = {
    "Server Queue": "queue_us",
    "Server Compute Input": "compute_input_us",
    "Server Compute Infer": "compute_infer_us",
    "Server Compute Output": "compute_output_us",
}


def csv_server(row: dict[str, float]) -> dict[str, float]:
    """The server fields of one row of the CSV (`parse_csv`)."""
    return {field: row[column] for column, field in CSV_SERVER.items() if column in row}


def export_csv(result: SweepResult) -> str:
    """Our sweep as perf_analyzer's --verbose-csv CSV (see `levels_csv`)."""
    return levels_csv(
        [lv.measured() for lv in result.levels],
        result.params.mode,
        streaming=result.params.streaming,
    )


def levels_csv(
    levels: Sequence[measure.Level],
    mode: str = "concurrency",
    *,
    streaming: bool = False,
    goodput: bool = False,
) -> str:
    """Measured levels as perf_analyzer's --verbose-csv CSV (µs, sorted by level).

    "Client Send"/"Client Recv" are 0: the built-in engine sends pre-serialised requests
    and does not decode responses. "Network+Server Send/Recv" is what perf_analyzer makes
    it: avg client latency minus server request time (plus client send/recv, here 0).
    A latency that is not known (a level perf_analyzer reported only from its windows,
    because it did not settle) is an empty cell: the level is kept, as it is on the page.
    A level without any latency is left out. A streaming sweep adds STREAM_CSV_COLUMNS, a
    sweep with goodput objectives GOODPUT_CSV_COLUMN, a sweep with steps STEP_CSV_COLUMNS per
    step (`step_columns`); a figure the engine did not measure (perf_analyzer's tokens) is
    an empty cell, never 0.
    """

    def us(value: float | None) -> int | str:
        return "" if value is None or math.isnan(value) else round(value)

    columns = list(CSV_COLUMNS) + (list(STREAM_CSV_COLUMNS) if streaming else [])
    columns += [GOODPUT_CSV_COLUMN] if goodput else []
    if mode == "request_rate":
        columns[0] = "Request Rate"
    steps = step_columns(levels)
    # Model names come from configs: quoted by the writer, and never read as a formula.
    columns += [csv_cell(f"{label} {c}") for label, _ in steps for c in STEP_CSV_COLUMNS]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for level in sorted(levels, key=lambda lv: lv.level):
        if all(level.latency(k) is None for k in measure.LATENCY_FIELDS):
            continue
        has_server = level.server_request_us is not None

        def server(value: float | None, known: bool = has_server) -> int:
            return round(value or 0.0) if known else 0

        avg = level.avg_us
        if avg is None or math.isnan(avg):
            network: int | str = ""
        else:
            network = round(max(0.0, avg - (level.server_request_us or 0.0))) if has_server else 0
        writer.writerow(
            [
                f"{level.level:g}",
                f"{level.throughput:g}",
                0,
                network,
                server(level.queue_us),
                server(level.compute_input_us),
                server(level.compute_infer_us),
                server(level.compute_output_us),
                0,
                us(level.p50_us),
                us(level.p90_us),
                us(level.p95_us),
                us(level.p99_us),
                us(avg),
                0,
                us(avg),
                *(
                    _stream_cell(k, level.extra.get(k))
                    for k in STREAM_CSV_COLUMNS.values()
                    if streaming
                ),
                *([_stream_cell("goodput", level.extra.get("goodput"))] if goodput else []),
                *_step_cells(level, steps),
            ]
        )
    return out.getvalue()


def step_columns(levels: Sequence[Any]) -> list[tuple[str, tuple[str, str]]]:
    """(label, (model, version)) of every step the levels (`Level`s or level rows as JSON)
    have, in step order: the model's name, "model:version" where one model has steps of
    several versions."""
    seen: list[tuple[str, str]] = []
    for level in levels:
        for step in measure.steps_of(level):
            key = (str(step.get("model", "")), str(step.get("version", "")))
            if key not in seen:
                seen.append(key)
    names = [m for m, _ in seen]
    return [(m if names.count(m) == 1 else f"{m}:{v}", (m, v)) for m, v in seen]


def _step_cells(
    level: measure.Level, steps: Sequence[tuple[str, tuple[str, str]]]
) -> list[int | str]:
    mine = {
        (str(s.get("model", "")), str(s.get("version", ""))): s for s in measure.steps_of(level)
    }
    cells: list[int | str] = []
    for _, key in steps:
        step = mine.get(key, {})
        for name in STEP_CSV_COLUMNS.values():
            value = step.get(name)
            if value is None or not math.isfinite(value):
                cells.append("")
            elif name == "avg_batch_size":
                cells.append(f"{round(value, 2):g}")
            else:
                cells.append(round(value))
    return cells


def _stream_cell(key: str, value: float | None) -> int | str:
    if value is None or math.isnan(value):
        return ""
    return f"{value:g}" if key in _RATES else round(value)


# --- running it -------------------------------------------------------------------------------


@dataclass
class PaResult:
    command: list[str]
    returncode: int
    levels: list[PaLevel]  # from stdout, in run order, including unstable ones
    csv_rows: list[dict[str, float]]  # from the CSV, sorted by level
    errors: list[str]
    cancelled: bool = False
    cpu_seconds: float = 0.0  # perf_analyzer's own user+system CPU time
    plan: composing.Plan = composing.NONE  # the composing models it was given or found

    @property
    def ok(self) -> bool:
        """Exited 0, or stopped on an unstable/over-threshold level after reporting levels."""
        return self.returncode == 0 or (self.returncode == 2 and not self.errors)


async def _call(callback: Callable[..., Any] | None, *args: Any) -> Any:
    if callback is None:
        return None
    value = callback(*args)
    return await value if inspect.isawaitable(value) else value


async def run_perf_analyzer(
    params: SweepParams,
    url: str,
    *,
    on_window: Callable[[PaWindow], Any] | None = None,
    on_level: Callable[[PaLevel], Any] | None = None,
    should_cancel: Callable[[], Any] | None = None,
    binary: Path | None = None,
) -> PaResult:
    """Run perf_analyzer for `params`, streaming windows and levels as it prints them.
    A BLS model's declared calls are passed as --bls-composing-models."""
    binary = binary or locate_perf_analyzer()
    plan = await composing_plan(params, url)
    with tempfile.TemporaryDirectory(prefix="perf_analyzer-") as tmp:
        csv_path = Path(tmp) / "result.csv"
        data_path = None
        if params.input_data not in ("random", "zeros"):
            data_path = Path(tmp) / "input.json"
            source = params.input_data
            if isinstance(source, str) and not source.lstrip().startswith("{"):
                data_path = Path(source)
            else:
                data_path.write_text(source if isinstance(source, str) else json.dumps(source))
        command = build_command(
            params,
            url,
            binary=binary,
            csv_path=csv_path,
            input_data_path=data_path,
            bls_composing_models=[c.spec for c in plan.calls],
        )
        usage_before = os.times()
        proc = await asyncio.create_subprocess_exec(
            *command,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=perf_analyzer_env(binary),
        )
        parser = StdoutParser(plan)
        cancelled = False
        # The last lines of stderr: a run that dies before its first level (a missing
        # library, a refused option) says why only there, in no format the parser knows.
        stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL)

        async def pump(stream: asyncio.StreamReader, tail: collections.deque[str] | None) -> None:
            while line := await stream.readline():
                text = line.decode(errors="replace")
                if tail is not None and text.strip():
                    tail.append(text.strip())
                for event in parser.feed(text):
                    if isinstance(event, PaWindow):
                        await _call(on_window, event)
                    else:
                        await _call(on_level, event)

        async def watch() -> None:
            nonlocal cancelled
            while proc.returncode is None:
                await asyncio.sleep(0.1)
                if should_cancel is not None and await _call(should_cancel):
                    cancelled = True
                    with contextlib.suppress(ProcessLookupError):
                        proc.terminate()
                    return

        assert proc.stdout is not None and proc.stderr is not None
        watcher = asyncio.create_task(watch())
        await asyncio.gather(pump(proc.stdout, None), pump(proc.stderr, stderr_tail))
        returncode = await proc.wait()
        watcher.cancel()
        for event in parser.close():
            await _call(on_level, event)
        usage_after = os.times()
        rows = parse_csv(csv_path.read_text()) if csv_path.exists() else []
    cpu = (usage_after.children_user - usage_before.children_user) + (
        usage_after.children_system - usage_before.children_system
    )
    errors = parser.errors
    if not errors and returncode not in (0, 2) and not cancelled:
        errors = list(stderr_tail) or [f"perf_analyzer exited with {returncode}"]
    return PaResult(command, returncode, parser.levels, rows, errors, cancelled, cpu, plan)


async def composing_plan(params: SweepParams, url: str) -> composing.Plan:
    """The model's composing models (`composing.plan`), for the step order and a BLS
    model's --bls-composing-models. A Triton that does not answer gives none (perf_analyzer
    then says what is wrong); a composing model that cannot be measured is a SweepError."""
    control = AioClient(params.protocol, url)
    try:
        config = await control.config(params.model, params.version)
        return await composing.plan(control, params.model, config)
    except TritonError:
        return composing.NONE
    except composing.StepError as exc:
        raise SweepError(str(exc)) from None
    finally:
        await control.close()


def run_perf_analyzer_sync(params: SweepParams, url: str, **kwargs: Any) -> PaResult:
    """`run_perf_analyzer` for synchronous callers."""
    return asyncio.run(run_perf_analyzer(params, url, **kwargs))


def total_requests(result: PaResult) -> int:
    """Requests perf_analyzer reported across its levels (for CPU per request)."""
    return sum(level.request_count for level in result.levels)


def levels_by_value(levels: Sequence[PaLevel]) -> dict[float, PaLevel]:
    return {level.level: level for level in levels}
