"""Config search: exhaustive grid vs quick (hill climbing) on the demo models.

    .venv/bin/python benchmarks/bench_search.py [--window-ms 300] [--concurrency 8]

Starts its own tritonserver over a temporary copy of the demo repository and a throwaway
SQLite database, then for each model runs a grid search and a quick search over the same
space (one concurrency level, short windows: about 3 minutes on 2 cores) and prints a
markdown table: the best objective (max throughput within a p95 budget) each found, the
number of candidate runs, and their ratios. Because two live runs differ by measurement
noise, it also replays quick mode's algorithm on the grid's own measurements ("quick on
the grid's surface"): same surface, so its result and run count isolate the algorithm.
Each search ranks as the product does: its top candidates and the current config are
re-measured side by side before ranking (`--search-confirm-top` x `--search-confirm-rounds`,
the form's defaults; 0 measures each candidate once), so each pick comes with its spread.
And because the grid's best is the maximum of many noisy measurements (it is biased
upwards: the winner's curse), the two picks are then measured again side by side
(`--confirm-rounds` alternating rounds, each loaded as a config override) and their median
objectives compared: that ratio, with the spread of its rounds, is the one the target is
read on.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks._django import setup_django  # noqa: E402

SPACES = {
    # busy_compute: ~1 ms + 50 µs/item per execute; instances and batching matter on 2 cores.
    "busy_compute": {
        "counts": (1, 2, 3),
        "max_batch_sizes": (8, 32),
        "batching_off": True,
        "delays_us": (0, 200, 1000),
        "preferred": ((),),
    },
    # add_batched: cheap; the Python backend's per-request overhead dominates.
    "add_batched": {
        "counts": (1, 2),
        "max_batch_sizes": (16, 64),
        "batching_off": True,
        "delays_us": (0, 500),
        "preferred": ((), (8, 16)),
    },
}


def run_search(model: str, mode: str, args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from profiler_app import jobs
    from profiler_app.models import Search
    from profiler_app.params import SweepParams
    from profiler_app.search import creating
    from profiler_app.search.objective import Constraints
    from profiler_app.search.space import Space
    from registry import servers

    request = creating.SearchRequest(
        model=model,
        space=Space(**SPACES[model]),
        measure=SweepParams(
            model=model,
            start=args.concurrency,
            end=args.concurrency,
            measurement_window_ms=args.window_ms,
            stability_percentage=args.stability,
            max_windows=args.max_windows,
        ),
        constraints=Constraints(latency_budget_ms=args.budget_ms, percentile=95),
        server=servers.default(),
        mode=mode,
        confirm_top=args.search_confirm_top,
        confirm_rounds=args.search_confirm_rounds,
    )
    search = creating.create_search(request, enqueue=False)
    assert jobs.claim(search.sweep_id)
    started = time.monotonic()
    state = jobs.execute(search.sweep_id)
    elapsed = time.monotonic() - started
    search = Search.objects.get(pk=search.pk)
    print(f"{model} {mode}: {state} in {elapsed:.0f} s", file=sys.stderr, flush=True)
    return search, elapsed


def best(search) -> tuple[str, float, str]:  # type: ignore[no-untyped-def]
    """The search's own pick (after its re-measurement): key, objective, spread."""
    rows = {r["key"]: r for r in search.result["rows"] if r["feasible"]}
    row = rows.get(search.result.get("best_key") or "")
    if row is None:
        return "-", 0.0, ""
    return row["key"], row["objective"], row.get("spread_text") or "one measurement"


def confirm(grid_search, keys: tuple[str, str], rounds: int) -> tuple[float, float, list[float]]:  # type: ignore[no-untyped-def]  # fmt: skip
    """Measure the grid's pick and quick's pick again, alternating which goes first, with
    the search's own measurement settings; (grid median, quick median, per-round ratios)."""
    import asyncio

    from profiler_app import sweeps
    from profiler_app.engine.loadgen import run_sweep
    from profiler_app.search import runner, scoring, target
    from profiler_app.search.space import Knobs, apply
    from registry import servers
    from registry.triton_clients import connection, get_client
    from repository_app.editor.triton_actions import config_override

    server = servers.default()
    base, _, _ = target.saved_config(server, grid_search.model)
    knobs = {c.key: Knobs.from_json(c.knobs) for c in grid_search.candidates.all() if c.key in keys}
    params = sweeps.params_of(grid_search.sweep)
    client = get_client(server)

    def measure(key: str) -> float:
        client.load(grid_search.model, config=config_override(apply(base, knobs[key])))
        result = asyncio.run(run_sweep(params, connection(server, params.protocol)))
        levels = [scoring.level_json(lv) for lv in result.levels]
        found = scoring.score_levels(levels, grid_search)
        return found.objective if found and found.objective is not None else 0.0

    grid_runs: list[float] = []
    quick_runs: list[float] = []
    for n in range(rounds):
        order = keys if n % 2 == 0 else keys[::-1]
        got = {key: measure(key) for key in order}
        grid_runs.append(got[keys[0]])
        quick_runs.append(got[keys[1]])
    runner.restore(grid_search)
    ratios = [q / g if g else 0.0 for g, q in zip(grid_runs, quick_runs, strict=True)]
    return statistics.median(grid_runs), statistics.median(quick_runs), ratios


def replay_quick(grid_search) -> tuple[str, float, int]:  # type: ignore[no-untyped-def]
    """Quick mode's algorithm on the grid's measurements (no new measurement)."""
    from profiler_app.search import scoring, strategies
    from profiler_app.search.space import Knobs, Space

    measured = {c.key: scoring.score_of(c, grid_search) for c in grid_search.candidates.all()}
    baseline = Knobs.from_json(grid_search.baseline)
    dims = Space.from_json(grid_search.space).dimensions(baseline)
    trace = strategies.hill_climb(dims, baseline, lambda k: measured.get(k.key))
    found = trace.best()
    if found is None or found[1].objective is None:
        return "-", 0.0, trace.runs
    return found[0].key, found[1].objective, trace.runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window-ms", type=int, default=300)
    parser.add_argument("--max-windows", type=int, default=5)
    parser.add_argument("--stability", type=float, default=15.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--budget-ms", type=float, default=50.0)
    parser.add_argument("--models", default="busy_compute,add_batched")
    parser.add_argument("--confirm-rounds", type=int, default=3)
    parser.add_argument("--search-confirm-top", type=int, default=3)
    parser.add_argument("--search-confirm-rounds", type=int, default=3)
    args = parser.parse_args()
    work = setup_django()
    logging.getLogger("repository_app.events").setLevel(logging.ERROR)
    from django.conf import settings

    from devstack import services as svc
    from triton_api.client import TritonClient

    repository = work / "model_repository"
    shutil.copytree(ROOT / "examples" / "model_repository", repository)
    models = [m for m in args.models.split(",") if m]
    with tempfile.TemporaryDirectory() as tmp:
        ports = svc.TritonPorts(svc.free_port(), svc.free_port(), svc.free_port())
        proc = svc.start_tritonserver(
            repository, Path(tmp), ports, Path(tmp) / "triton.log", load=tuple(models)
        )
        settings.TRITON_URL = f"127.0.0.1:{ports.grpc}"
        settings.TRITON_HTTP_URL = f"127.0.0.1:{ports.http}"
        settings.TRITON_METRICS_URL = f"http://127.0.0.1:{ports.metrics}/metrics"
        settings.MODEL_REPOSITORY = repository
        TritonClient(settings.TRITON_URL, settings.TRITON_METRICS_URL).is_live()
        lines = [
            f"Objective: max throughput within p95 ≤ {args.budget_ms:g} ms at concurrency "
            f"{args.concurrency}; windows {args.window_ms} ms, stability {args.stability:g}%, "
            f"max {args.max_windows} windows. Each search re-measures its top "
            f"{args.search_confirm_top} candidates and the current config in "
            f"{args.search_confirm_rounds} alternating rounds before ranking (its runs include "
            "them; a pick's spread is the half range of its rounds). Target: quick within 5% "
            'of the grid\'s best in at most a third of its runs. "Re-measured": both picks '
            f"measured again side by side ({args.confirm_rounds} alternating rounds), medians, "
            "and the half range of the per-round ratios; the target is read on that ratio, "
            "since the grid's best is the maximum of its noisy runs.",
            "",
            "| model | grid best (infer/s) | grid runs | quick best (infer/s) | quick runs | "
            "quick/grid objective | quick/grid runs | picks' spread (grid, quick) | "
            "quick's pick as the grid measured it | "
            "quick on the grid's surface (objective ratio, runs) | re-measured: grid's pick, "
            "quick's pick (infer/s) | re-measured quick/grid ± spread (each round) | grid s | "
            "quick s |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        try:
            for model in models:
                grid, grid_s = run_search(model, "grid", args)
                quick, quick_s = run_search(model, "quick", args)
                g_key, g_best, g_spread = best(grid)
                q_key, q_best, q_spread = best(quick)
                g_runs, q_runs = grid.result["runs"], quick.result["runs"]
                as_grid = next(
                    (r["objective"] for r in grid.result["rows"] if r["key"] == q_key), None
                )
                r_key, r_best, r_runs = replay_quick(grid)
                pick = f"{as_grid / g_best:.2f}" if as_grid and g_best else "n/a"
                if g_key != "-" and q_key != "-" and g_key != q_key:
                    c_grid, c_quick, c_ratios = confirm(grid, (g_key, q_key), args.confirm_rounds)
                    again = f"{c_grid:,.0f}, {c_quick:,.0f}"
                    middle = statistics.median(c_ratios)
                    half = (max(c_ratios) - min(c_ratios)) / 2 / middle if middle else 0.0
                    again_ratio = (
                        f"{middle:.2f} ± {half * 100:.0f}% "
                        f"({', '.join(f'{r:.2f}' for r in c_ratios)})"
                    )
                else:
                    again, again_ratio = "same pick", "1.00 (same config)"
                lines.append(
                    f"| {model} | {g_best:,.0f} (`{g_key}`) | {g_runs} | {q_best:,.0f} (`{q_key}`) "
                    f"| {q_runs} | {q_best / g_best if g_best else 0:.2f} | "
                    f"{q_runs / g_runs:.2f} | {g_spread}; {q_spread} | {pick} | "
                    f"{r_best / g_best if g_best else 0:.2f} (`{r_key}`), {r_runs} runs | "
                    f"{again} | {again_ratio} | {grid_s:.0f} | {quick_s:.0f} |"
                )
        finally:
            svc.stop(proc)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
