"""Built-in engine vs perf_analyzer, side by side, on one Triton and model.

    .venv/bin/python benchmarks/bench_engine.py [--url 127.0.0.1:8001]
        [--models add_batched,busy_compute,add_sub] [--levels 1,2,4,8] [--window-ms 1000]
        [--client auto] [--rounds 3] [--rate-fractions 0.3,0.5]

Without --url it starts its own tritonserver (demo repository, the models loaded).
One table per model; the request-rate table (--rate-fractions) is for the first model.
Each concurrency is measured `--rounds` times by each engine, alternating which goes first
(one level per run, same window, stability and percentile settings; the engine uses the
client plan a sweep over all the levels would), and a markdown table is printed: medians
of throughput, p95 and their per-round ratios (engine / perf_analyzer), and client CPU
per request, and Triton's own average request time under each (statistics extension), which
shows when one client's CPU use slowed the server it shares two cores with.
perf_analyzer's CPU per request counts its whole process (warm-up and unstable windows
included) over the requests of the reported windows, so it is an upper bound.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from profiler_app.engine import perf_analyzer as pa  # noqa: E402
from profiler_app.engine.loadgen import run_sweep  # noqa: E402
from profiler_app.engine.perf_analyzer_command import locate_perf_analyzer  # noqa: E402
from profiler_app.engine.worker_pool import client_plan  # noqa: E402
from profiler_app.param_bounds import DEFAULT_MAX_THREADS  # noqa: E402
from profiler_app.params import SweepParams  # noqa: E402


async def measure_once(level: int, params: SweepParams, url: str, args: argparse.Namespace, ours_first: bool) -> dict[str, float] | None:  # fmt: skip
    async def ours_run():  # type: ignore[no-untyped-def]
        metrics_url = getattr(args, "metrics_url", None)  # GPU figures, where Triton has GPUs
        return (await run_sweep(params, url, metrics_url=metrics_url)).levels[0]

    if ours_first:
        ours = await ours_run()
        ref = await pa.run_perf_analyzer(params, url)
    else:
        ref = await pa.run_perf_analyzer(params, url)
        ours = await ours_run()
    measured_any = ref.levels and (
        ref.levels[0].throughput > 0 or any(w.throughput > 0 for w in ref.levels[0].windows)
    )
    if not measured_any:
        print(f"perf_analyzer measured nothing at {level:g}: {ref.errors}", file=sys.stderr)
        return None
    theirs = ref.levels[0]
    their_tput, their_p95 = theirs.throughput, theirs.percentiles_us.get(95, 0.0)
    # Decoupled models (--streaming): responses/s as well, where both measured it.
    ours_responses = ours.measured().figure("response_throughput")
    responses = (
        {"resp_ours": ours_responses, "resp_theirs": theirs.response_throughput}
        if ours_responses is not None and theirs.response_throughput
        else {}
    )
    if not theirs.stable:  # no summary: average its last 3 windows (p95 per window)
        last = theirs.windows[-3:]
        their_tput = sum(w.throughput for w in last) / len(last)
        their_p95 = sum(w.latency_us for w in last) / len(last)
    assert ours.latency is not None
    return {
        "ours": ours.throughput,
        "theirs": their_tput,
        "p95_ours": ours.latency.p95_us,
        "p95_theirs": their_p95,
        "cpu_ours": ours.client_cpu_us,
        "cpu_theirs": ref.cpu_seconds / max(1, _their_requests(ref, args.window_ms)) * 1e6,
        "stable": float(ours.stable and theirs.stable),
        # Triton's request time (queue + compute), where each engine's run has it: perf_analyzer
        # prints it only for a level that stabilised.
        "server_ours": ours.server.request_us if ours.server else -1.0,
        "server_theirs": theirs.server.get("request_us", -1.0),
        "gpu_util": ours.gpu.utilization * 100
        if ours.gpu and ours.gpu.utilization is not None
        else -1.0,  # fmt: skip
        **responses,
    }


async def measure(
    url: str, args: argparse.Namespace, levels: list[int], mode: str = "concurrency"
) -> list[dict[str, float]]:
    """Per level, `rounds` runs of each engine in alternating order; medians of each figure
    and of the per-round ratios (the machine is shared: side by side, never one-off)."""
    client, workers = args.client, args.workers
    if client == "auto":  # the plan a real sweep over all the levels would use
        client, workers = client_plan(
            SweepParams(
                model=args.model,
                mode=mode,
                start=min(levels),
                end=max(levels),
                max_threads=args.max_threads,
                **getattr(args, "sweep_params", {}),
            )  # fmt: skip
        )
    rows = []
    for level in levels:
        params = SweepParams(
            model=args.model, mode=mode, start=level, end=level,
            measurement_window_ms=args.window_ms, stability_percentage=args.stability,
            max_windows=args.max_windows, client=client, workers=workers,
            max_threads=args.max_threads, **getattr(args, "sweep_params", {}),
        )  # fmt: skip
        runs = [
            r
            for n in range(args.rounds)
            if (r := await measure_once(level, params, url, args, ours_first=n % 2 == 0))
        ]
        if not runs:
            continue
        row = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        for key in ("server_ours", "server_theirs"):  # medians of the runs that have it
            known = [r[key] for r in runs if r[key] >= 0]
            row[key] = statistics.median(known) if known else -1.0
        row["c"] = level
        row["ratio"] = statistics.median(r["ours"] / r["theirs"] for r in runs)
        row["p95_ratio"] = statistics.median(r["p95_ours"] / r["p95_theirs"] for r in runs)
        row["ratios"] = [r["ours"] / r["theirs"] for r in runs]  # type: ignore[assignment]
        row["p95_ratios"] = [r["p95_ours"] / r["p95_theirs"] for r in runs]  # type: ignore[assignment]
        row["stable"] = float(all(r["stable"] for r in runs))
        if all("resp_ours" in r for r in runs):
            row["resp_ratio"] = statistics.median(r["resp_ours"] / r["resp_theirs"] for r in runs)
        rows.append(row)
        print(f"{mode} {level} done", file=sys.stderr, flush=True)
    return rows


def _their_requests(ref: pa.PaResult, window_ms: int) -> float:
    """Requests perf_analyzer completed: reported, or estimated from its windows (1.2 x interval)."""
    reported = pa.total_requests(ref)
    if reported:
        return reported
    return sum(w.throughput * window_ms * 1.2 / 1000 for lv in ref.levels for w in lv.windows)


def _known(value: float) -> str:
    return f"{value:,.0f}" if value >= 0 else "–"


def table(rows: list[dict[str, float]], label: str = "concurrency") -> str:
    gpu = any(r.get("gpu_util", -1) >= 0 for r in rows)
    lines = [
        f"| {label} | engine infer/s | perf_analyzer infer/s | throughput ratio (each round) | engine p95 µs | perf_analyzer p95 µs | p95 ratio (each round) | engine CPU µs/req | perf_analyzer CPU µs/req | Triton request µs (engine / perf_analyzer runs) | all stable |"
        + (" GPU util % (engine run) |" if gpu else ""),
        "|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if gpu else ""),
    ]
    for r in rows:
        util = f" {r['gpu_util']:.0f} |" if gpu and r["gpu_util"] >= 0 else (" – |" if gpu else "")
        lines.append(
            f"| {r['c']:g} | {r['ours']:,.0f} | {r['theirs']:,.0f} | {r['ratio']:.2f} "
            f"({', '.join(f'{x:.2f}' for x in r['ratios'])}) "  # type: ignore[attr-defined]
            f"| {r['p95_ours']:,.0f} | {r['p95_theirs']:,.0f} | {r['p95_ratio']:.2f} "
            f"({', '.join(f'{x:.2f}' for x in r['p95_ratios'])}) "  # type: ignore[attr-defined]
            f"| {r['cpu_ours']:.0f} | {r['cpu_theirs']:.0f} "
            f"| {_known(r['server_ours'])} / {_known(r['server_theirs'])} "
            f"| {'yes' if r['stable'] else 'no'} |" + util
        )
    return "\n".join(lines)


def report(url: str, args: argparse.Namespace) -> str:
    """One concurrency table per model; with --rate-fractions, a request-rate table for the
    first model. At equal concurrency a lighter client pushes more through a CPU-bound
    server and so sees lower latency (Little's law: mean latency = concurrency /
    throughput); at an equal request rate both engines offer the same load, which isolates
    how each measures. Raises SystemExit when perf_analyzer measured nothing."""
    sections = []
    for model in args.models:
        args.model = model
        rows = asyncio.run(measure(url, args, args.levels))
        if not rows:
            raise SystemExit(f"{model}: perf_analyzer measured no level (see stderr)")
        text = f"### {model}\n\n" + table(rows)
        if args.rate_fractions and model == args.models[0]:
            top = max(rows, key=lambda r: r["c"])["theirs"]
            rates = sorted({max(1, round(f * top, -1)) for f in args.rate_fractions})
            rate_rows = asyncio.run(measure(url, args, [int(r) for r in rates], "request_rate"))
            text += (
                f"\n\nSame offered load on {model}: request rates at "
                f"{', '.join(f'{f:g}' for f in args.rate_fractions)} × perf_analyzer's "
                f"{top:,.0f} infer/s at concurrency {max(args.levels)} (constant arrivals, "
                f"--max-threads {args.max_threads} for both):\n\n"
                + table(rate_rows, "request rate (infer/s)")
            )
        sections.append(text)
    return "\n\n".join(sections)


def add_measurement_args(
    parser: argparse.ArgumentParser, *, levels: str, window_ms: int, stability: float,
    max_windows: int, rounds: int,
) -> None:  # fmt: skip
    """The options `measure` reads (bench_gpu.py shares them, with its own defaults)."""
    parser.add_argument("--levels", default=levels, type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--window-ms", type=int, default=window_ms)
    parser.add_argument("--stability", type=float, default=stability)
    parser.add_argument("--max-windows", type=int, default=max_windows)
    parser.add_argument("--client", default="auto", choices=["auto", "aio", "threads"])
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument(
        "--max-threads", type=int, default=DEFAULT_MAX_THREADS, help="request-rate mode"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="Triton gRPC host:port (default: start one)")
    parser.add_argument(
        "--models",
        default="add_batched,busy_compute,add_sub",
        type=lambda s: [m for m in s.split(",") if m],
    )
    add_measurement_args(
        parser, levels="1,2,4,8", window_ms=1000, stability=10.0, max_windows=8, rounds=3
    )
    parser.add_argument(
        "--rate-fractions",
        default="",
        type=lambda s: [float(x) for x in s.split(",") if x],
        help="also compare at equal offered load: request rates at these fractions of "
        "perf_analyzer's throughput at the highest concurrency (e.g. 0.5,0.8)",
    )
    args = parser.parse_args()
    locate_perf_analyzer()  # fail early with the install hint
    if args.url:
        print(report(args.url, args))
        return 0
    from devstack import services as svc

    with tempfile.TemporaryDirectory() as tmp:
        ports = svc.TritonPorts(svc.free_port(), svc.free_port(), svc.free_port())
        proc = svc.start_tritonserver(
            ROOT / "examples" / "model_repository",
            Path(tmp),
            ports,
            Path(tmp) / "triton.log",
            load=tuple(args.models),
        )
        try:
            print(report(f"127.0.0.1:{ports.grpc}", args))
        finally:
            svc.stop(proc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
