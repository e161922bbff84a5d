"""Reading perf_analyzer's output, line by line as it prints it (`StdoutParser`): its
windows (`PaWindow`), its levels (`PaLevel`) and an ensemble's or BLS model's steps
(`PaStep`), each also in the one shape of a measurement (`profiler_app.measure`).

Checked against real 2.48 runs (see tests/data/perf_analyzer/):
- stdout, with `-v`, prints `Pass [n] throughput: X infer/sec. p95 latency: Y usec` per
  window, then a `Client:`/`Server:` block per level that stabilised;
- stderr says `Failed to obtain stable measurement within N measurement windows for
  concurrency C` (the run then exits 2 and stops) or `Measured latency went over the set
  limit of N msec.` (the sweep ends at that level, which is not reported);
- for an ensemble (and a BLS model given `--bls-composing-models`) the `Server:` block
  gives queue and compute as the sums over its composing models ("(overhead O usec + queue
  Q usec + compute C usec)"), then a "Composing models:" block lists each one (sorted by
  name, nested ensembles indented further) with its own counts and breakdown: the steps
  (`composing`) of a level's `steps`. A BLS model's own breakdown is in the CSV only
  (`perf_analyzer_csv.csv_server`).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .. import measure
from ..level_figures import StepFigures, StreamFigures, with_compute_shares
from . import composing, stats
from .results import ServerBreakdown


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

    def step_rows(self) -> tuple[StepFigures, ...]:
        """A level's `steps`: the composing models that are not ensembles themselves, in
        the plan's step order (perf_analyzer prints them sorted by name)."""
        order = [s.model for s in self.plan.steps]
        leaves = [s for s in self.steps if not s.nested]
        leaves.sort(key=lambda s: order.index(s.model) if s.model in order else len(order))
        return with_compute_shares(
            [StepFigures.of(s.model, s.version, s.breakdown()) for s in leaves]
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
            level.stream = StreamFigures.only(response_throughput=self.response_throughput)
        if steps := self.step_rows():
            level.steps = steps
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


def _composed_breakdown(level: measure.Level, steps: Sequence[StepFigures], *, bls: bool) -> None:
    """The breakdown of a level with steps. An ensemble's is perf_analyzer's own rule (queue
    and compute summed over the steps), split into compute input/infer/output by its steps'
    figures so that they add up to it. A BLS model's printed queue and compute are its
    calls' sums, not its own: they are left unknown here, and its own come from the CSV
    (`csv_server`)."""
    if bls:
        level.queue_us = None
        return
    level.queue_us = sum(s.queue_us or 0.0 for s in steps)
    for key in measure.COMPUTE_FIELDS:
        setattr(level, key, sum(getattr(s, key) or 0.0 for s in steps))


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
