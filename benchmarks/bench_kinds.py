"""Decoupled and sequence models: the built-in engine side by side with perf_analyzer 2.48,
and the streaming figures against what the demo model is programmed to do.

    .venv/bin/python benchmarks/bench_kinds.py [--levels 1,2,4] [--rounds 3]
        [--window-ms 1000] [--rate-fractions 0.5]

Starts its own tritonserver over the demo repository with stream_tok (decoupled: it sends
RESPONSE_COUNT responses, the first after FIRST_RESPONSE_DELAY_MS, each next one after
RESPONSE_DELAY_MS) and seq_accumulate (direct sequence batching) loaded.

1. stream_tok over gRPC streams (`--streaming`) and seq_accumulate in sequences of 20 ± 20 %
   (perf_analyzer's defaults): at each concurrency, and at request rates of
   `--rate-fractions` × perf_analyzer's throughput at the highest concurrency, each engine
   measures every level `--rounds` times, alternating which goes first
   (`bench_engine.measure`); the tables give request throughput, p95 request latency (for
   stream_tok the time to the final response, as perf_analyzer 2.48 reports it) and, for
   stream_tok, response throughput, each as built-in / perf_analyzer per round.
2. Truth at concurrency 1: stream_tok's time to the first response and between responses
   from the built-in engine, p50 and p95, against the delays its config programs; the
   difference is the server's and the client's scheduling (the model sleeps, so it is all
   overhead).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_engine import add_measurement_args, measure, table  # noqa: E402

from profiler_app.engine.loadgen import run_sweep  # noqa: E402
from profiler_app.engine.perf_analyzer_command import locate_perf_analyzer  # noqa: E402
from profiler_app.params import SweepParams  # noqa: E402

DEMO = ROOT / "examples" / "model_repository"
KINDS = {
    "stream_tok": {"streaming": True},
    "seq_accumulate": {"sequence_length": 20, "sequence_length_variation": 20.0},
}


def programmed(model: str) -> dict[str, float]:
    """stream_tok's config parameters (the truth its figures are checked against)."""
    text = (DEMO / model / "config.pbtxt").read_text()
    return {
        key: float(value)
        for key, value in re.findall(r'key: "(\w+)" value: \{ string_value: "([\d.]+)" \}', text)
    }


def side_by_side(url: str, args: argparse.Namespace) -> str:
    sections = []
    for model, flags in KINDS.items():
        args.model, args.sweep_params = model, flags
        rows = asyncio.run(measure(url, args, args.levels))
        if not rows:
            raise SystemExit(f"{model}: perf_analyzer measured no level (see stderr)")
        text = f"### {model} ({', '.join(f'{k}={v}' for k, v in flags.items())})\n\n"
        text += table(rows) + responses_line(rows)
        if args.rate_fractions:
            top = max(rows, key=lambda r: r["c"])["theirs"]
            rates = sorted({max(1, round(f * top)) for f in args.rate_fractions})
            rate_rows = asyncio.run(measure(url, args, rates, "request_rate"))
            if not rate_rows:
                text += (
                    f"\n\nRequest rates {', '.join(map(str, rates))}: perf_analyzer measured no "
                    "request (its errors are on stderr), so there is no ratio."
                )
                sections.append(text)
                continue
            text += (
                f"\n\nRequest rates at {', '.join(f'{f:g}' for f in args.rate_fractions)} × "
                f"perf_analyzer's {top:,.0f} infer/s at concurrency {max(args.levels)}:\n\n"
                + table(rate_rows, "request rate (infer/s)")
                + responses_line(rate_rows)
            )
        sections.append(text)
    return "\n\n".join(sections)


def responses_line(rows: list[dict[str, float]]) -> str:
    """Response throughput, built-in / perf_analyzer (medians of the rounds), per level."""
    known = [r for r in rows if "resp_ratio" in r]
    if not known:
        return ""
    return "\n\nResponse throughput, built-in / perf_analyzer: " + ", ".join(
        f"{r['c']:g}: {r['resp_ratio']:.2f}" for r in known
    )


def truth(url: str, args: argparse.Namespace) -> str:
    """stream_tok at concurrency 1, `--rounds` runs: first-response and inter-response
    times against the programmed delays."""
    config = programmed("stream_tok")
    first_ms, next_ms = config["FIRST_RESPONSE_DELAY_MS"], config["RESPONSE_DELAY_MS"]
    count = int(config["RESPONSE_COUNT"])
    params = SweepParams(
        model="stream_tok", streaming=True, measurement_window_ms=args.window_ms,
        stability_percentage=args.stability, max_windows=args.max_windows,
    )  # fmt: skip
    runs = []
    for _ in range(args.rounds):
        level = asyncio.run(run_sweep(params, url)).levels[0].measured()
        runs.append(level)

    def med(key: str) -> float:
        return statistics.median((r.figure(key) or 0.0) / 1000 for r in runs)

    final_ms = first_ms + (count - 1) * next_ms
    rows = [
        ("time to first response", first_ms, med("first_response_p50_us"),
         med("first_response_p95_us")),
        ("inter-response time", next_ms, med("inter_response_p50_us"),
         med("inter_response_p95_us")),
        ("time to the final response (request latency)", final_ms,
         statistics.median((r.p50_us or 0) / 1000 for r in runs),
         statistics.median((r.p95_us or 0) / 1000 for r in runs)),
    ]  # fmt: skip
    lines = [
        f"stream_tok at concurrency 1, {args.rounds} runs (medians): {count} responses, "
        f"programmed {first_ms:g} ms before the first and {next_ms:g} ms before each next.",
        "",
        "| figure | programmed ms | p50 ms | p50 − programmed | p95 ms | p95 − programmed |",
        "|---|---|---|---|---|---|",
    ]
    for name, want, p50, p95 in rows:
        lines.append(
            f"| {name} | {want:g} | {p50:.2f} | +{p50 - want:.2f} ms ({(p50 / want - 1) * 100:.1f} %) "
            f"| {p95:.2f} | +{p95 - want:.2f} ms |"
        )
    responses = statistics.median(r.figure("responses_per_request") or 0.0 for r in runs)
    lines.append("")
    lines.append(f"Responses per request: {responses:g} (programmed {count}).")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_measurement_args(
        parser, levels="1,2,4", window_ms=1000, stability=10.0, max_windows=8, rounds=3
    )
    parser.add_argument(
        "--rate-fractions",
        default="0.5",
        type=lambda s: [float(x) for x in s.split(",") if x],
        help="request rates at these fractions of perf_analyzer's throughput at the highest "
        "concurrency ('' for none)",
    )
    args = parser.parse_args()
    locate_perf_analyzer()  # fail early with the install hint
    from devstack import services as svc

    with tempfile.TemporaryDirectory() as tmp:
        ports = svc.TritonPorts(svc.free_port(), svc.free_port(), svc.free_port())
        proc = svc.start_tritonserver(
            DEMO, Path(tmp), ports, Path(tmp) / "triton.log", load=tuple(KINDS)
        )
        try:
            url = f"127.0.0.1:{ports.grpc}"
            print(side_by_side(url, args))
            print()
            print(truth(url, args))
        finally:
            svc.stop(proc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
