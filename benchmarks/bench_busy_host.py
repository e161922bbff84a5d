"""Busy host: how often a short sweep ends with a recommendation on a quiet machine and
under a competing CPU load, how sure it is, and whether the busy sweeps recommend what
the quiet ones do.

    .venv/bin/python benchmarks/bench_busy_host.py [--sweeps 3] [--model add_batched]
        [--range 1:4:1] [--budgets 5x1000,10x500] [--stability 10] [--hogs 2] [--url H:P]

Without --url it starts its own tritonserver (demo repository, the model loaded) on this
machine, so Triton and the load generator share its CPUs. For each budget (max windows x
window ms: "5x1000" is the quick preset, 5 s per level; "10x500" the same 5 s in shorter
windows) it runs --sweeps quiet and --sweeps busy sweeps of the built-in engine, taking
turns (quiet, busy, quiet, ...) so that a drift of the machine lands on both alike. A busy
sweep has --hogs busy-loop processes (`while True: pass`, what `stress --cpu N` does)
competing for the CPUs. Each sweep's verdict is `profiler_app.verdict.summarize`, as the
page shows it. Printed per budget and condition: the share of sweeps that ended with a
recommendation, how sure it was (settled by perf_analyzer's rule, within an interval, or
read unsure from what was measured), the share that perf_analyzer's rule alone would have
settled (at least one level met it: an upper bound on the old "nothing to recommend"
answer's complement, since this run's levels stop early when their interval settles), the
share showing the busy-host note, and whether the recommended level matches the quiet
sweeps' most common one.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import dataclasses
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from profiler_app import measure, verdict  # noqa: E402
from profiler_app.engine.loadgen import run_sweep  # noqa: E402
from profiler_app.param_bounds import parse_range  # noqa: E402
from profiler_app.params import SweepParams  # noqa: E402


@dataclasses.dataclass
class Outcome:
    busy: bool
    load_before: float  # the 1-minute load average when the sweep started
    summary: dict[str, Any]
    levels: list[dict[str, Any]]

    @property
    def answered(self) -> bool:
        return self.summary["knee_level"] is not None

    def settled_by(self, how: str | None) -> int:
        return sum(1 for p in self.levels if (measure.interval_of(p) or _NONE).settled_by == how)


_NONE = measure.LevelInterval(0, 0, None, 0, 0, None)


def hogs(count: int) -> list[subprocess.Popen]:
    """`count` busy loops, one process each (killed by `stop_hogs`)."""
    return [
        subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
        for _ in range(count)
    ]


def stop_hogs(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        proc.kill()
        proc.wait()


def one_sweep(params: SweepParams, url: str, busy: bool, hog_count: int) -> Outcome:
    load = os.getloadavg()[0]
    started = hogs(hog_count) if busy else []
    try:
        result = asyncio.run(run_sweep(params, url))
    finally:
        stop_hogs(started)
    levels = [{**lv.measured().to_json(), "window": -1} for lv in result.levels]
    return Outcome(busy, load, verdict.summarize(levels, params, "succeeded"), levels)


def _share(part: int, whole: int) -> str:
    return f"{part}/{whole} ({part / whole * 100:.0f}%)" if whole else "0/0"


def report(outcomes: list[Outcome], label: str, step: float) -> str:
    quiet = [o for o in outcomes if not o.busy]
    quiet_knees = collections.Counter(o.summary["knee_level"] for o in quiet if o.answered)
    reference = quiet_knees.most_common(1)[0][0] if quiet_knees else None
    lines = [
        f"#### {label}",
        "",
        "| condition | sweeps | with a recommendation | settled (rule / within) | unsure "
        "| by perf_analyzer's rule alone | busy-host note | levels: rule / interval / not "
        "| knees (how sure) | same knee as quiet | within one level |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, group in (("quiet", quiet), ("busy", [o for o in outcomes if o.busy])):
        n = len(group)
        answered = [o for o in group if o.answered]
        grades = collections.Counter(o.summary["sureness"] for o in answered)
        rule_alone = sum(1 for o in group if o.settled_by("rule") > 0)
        noted = sum(1 for o in group if o.summary["host_note"])
        levels = [sum(o.settled_by(h) for o in group) for h in ("rule", "interval", None)]
        knees = (
            ", ".join(f"{o.summary['knee_level']:g} {o.summary['sureness']}" for o in answered)
            or "—"
        )
        same = sum(1 for o in answered if o.summary["knee_level"] == reference)
        near = sum(
            1
            for o in answered
            if reference is not None and abs(o.summary["knee_level"] - reference) <= step
        )
        lines.append(
            f"| {name} | {n} | {_share(len(answered), n)} "
            f"| {grades['settled']} / {grades['within']} | {grades['unsure']} "
            f"| {_share(rule_alone, n)} | {_share(noted, n)} | {' / '.join(map(str, levels))} "
            f"| {knees} | {_share(same, len(answered))} | {_share(near, len(answered))} |"
        )
    lines.append("")
    load = [o.load_before for o in outcomes]
    lines.append(
        f"Quiet sweeps' most common knee: {reference if reference is None else f'{reference:g}'}"
        f". Load average (1 min) when the sweeps started: {min(load):.1f}–{max(load):.1f}."
    )
    if reference is not None:
        at = [
            (o.busy, p["throughput"], measure.interval_of(p))
            for o in outcomes
            for p in o.levels
            if p["level"] == reference
        ]
        for busy in (False, True):
            values = [t for b, t, _ in at if b == busy]
            widths = [i.relative(t) for b, t, i in at if b == busy and i and i.relative(t)]
            if values:
                lines.append(
                    f"At {reference:g}, {'busy' if busy else 'quiet'}: median "
                    f"{statistics.median(values):,.0f} infer/s over {len(values)} sweeps"
                    + (f", its intervals ±{max(widths) * 100:.0f}% at most" if widths else "")
                    + "."
                )
    example = next((o for o in outcomes if o.busy and o.summary["sureness"] == "unsure"), None)
    example = example or next((o for o in outcomes if o.busy), None)
    if example is not None:
        lines += ["", "A busy sweep's verdict, as the page shows it:", ""]
        for key in ("recommendation", "sureness_text", "host_note"):
            if example.summary.get(key):
                lines.append(f"> {example.summary[key]}")
                lines.append(">")
        lines.pop()
    return "\n".join(lines)


def budgets(text: str) -> list[tuple[int, int]]:
    """'5x1000,10x500' -> [(5, 1000), (10, 500)]: max windows x window ms."""
    out = []
    for part in text.split(","):
        windows, _, ms = part.partition("x")
        out.append((int(windows), int(ms)))
    return out


def run(url: str, args: argparse.Namespace) -> str:
    start, end, step = parse_range(args.range)
    sections = [
        f"Model {args.model}, concurrency {args.range}, stability {args.stability:g}%, "
        f"{args.sweeps} quiet and {args.sweeps} busy sweeps per budget, busy = {args.hogs} "
        f"busy-loop processes on {os.cpu_count()} CPUs; Triton on this machine.",
    ]
    for windows, window_ms in budgets(args.budgets):
        params = SweepParams(
            model=args.model, start=start, end=end, step=step, max_windows=windows,
            measurement_window_ms=window_ms, stability_percentage=args.stability,
        )  # fmt: skip
        outcomes = []
        for i in range(args.sweeps * 2):
            busy = i % 2 == 1
            print(f"  {windows}x{window_ms} ms sweep {i + 1}, {'busy' if busy else 'quiet'}",
                  file=sys.stderr)  # fmt: skip
            outcomes.append(one_sweep(params, url, busy, args.hogs))
        label = (
            f"{windows} windows × {window_ms} ms (each level measures up to "
            f"{windows * window_ms / 1000:g} s)"
        )
        sections.append(report(outcomes, label, step))
    return "\n\n".join(sections)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="Triton gRPC host:port (default: start one here)")
    parser.add_argument("--model", default="add_batched")
    parser.add_argument("--range", default="1:4:1")
    parser.add_argument("--budgets", default="5x1000,10x500")
    parser.add_argument("--stability", type=float, default=10.0)
    parser.add_argument("--sweeps", type=int, default=3)
    parser.add_argument("--hogs", type=int, default=2)
    args = parser.parse_args()
    if args.url:
        print(run(args.url, args))
        return 0
    from devstack import services as svc

    with tempfile.TemporaryDirectory() as tmp:
        ports = svc.TritonPorts(svc.free_port(), svc.free_port(), svc.free_port())
        proc = svc.start_tritonserver(
            ROOT / "examples" / "model_repository",
            Path(tmp),
            ports,
            Path(tmp) / "triton.log",
            load=(args.model,),
        )
        try:
            print(run(f"127.0.0.1:{ports.grpc}", args))
        finally:
            svc.stop(proc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
