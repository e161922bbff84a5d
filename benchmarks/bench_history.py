"""The stored metrics history's cost: rows and bytes it writes, and the Server page's read.

    .venv/bin/python benchmarks/bench_history.py [--models 100] [--render-models 50]

Runs on a throwaway SQLite database, the default (PostgreSQL differs in bytes per row).
1. Recording: the real recorder and maintenance (repository_app/history.py) fed synthetic
   scrapes of `--models` models every 2 s (the poller's pace) for one simulated hour on a
   frozen clock: rows written per model per hour, database bytes per day, the recorder's
   time per scrape, and the bound the pruning keeps.
2. Reading: 24 h of rows for `--render-models` models (10 s and 1-minute rows, as the
   poller leaves them), then GET /server/history.json for each range through Django's
   full stack (middleware, view, JSON): median server time of 5 requests and the bytes.
   Target: 24 h for 50 models in < 300 ms.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from statistics import median

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _django import logged_in_client, setup_django  # noqa: E402

TARGET_MS = 300.0
T0 = 1_800_000_000  # a frozen epoch second on a minute boundary
SCRAPE_S = 2


def samples_for(models: int, tick: int):  # type: ignore[no-untyped-def]
    """One scrape's samples, as parse_prometheus returns them: counters that grow."""
    from triton_api.prometheus import MetricSample as S

    out = []
    for m in range(models):
        labels = {"model": f"model_{m:03d}", "version": "1"}
        n = tick * (m % 7 + 1) * 10
        out += [
            S("nv_inference_request_success", labels, n),
            S("nv_inference_request_failure", {**labels, "reason": "BACKEND"}, tick // 50),
            S("nv_inference_count", labels, n * 2),
            S("nv_inference_exec_count", labels, n // 2),
            S("nv_inference_request_duration_us", labels, n * 900.0),
            S("nv_inference_queue_duration_us", labels, n * 100.0),
            S("nv_inference_compute_input_duration_us", labels, n * 50.0),
            S("nv_inference_compute_infer_duration_us", labels, n * 700.0),
            S("nv_inference_compute_output_duration_us", labels, n * 50.0),
            S("nv_inference_pending_request_count", labels, float(tick % 3)),
        ]
    out += [
        S("nv_cpu_utilization", {}, 0.4),
        S("nv_cpu_memory_total_bytes", {}, 64e9),
        S("nv_cpu_memory_used_bytes", {}, 20e9),
    ]
    return out


def db_bytes() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("PRAGMA page_count")
        pages = cursor.fetchone()[0]
        cursor.execute("PRAGMA freelist_count")
        free = cursor.fetchone()[0]
        cursor.execute("PRAGMA page_size")
        size = cursor.fetchone()[0]
    return int((pages - free) * size)


def bench_recording(models: int) -> None:
    from repository_app import history
    from repository_app.models import ModelMetricPoint, ServerMetricPoint

    recorder = history.HistoryRecorder("default")
    before = db_bytes()
    spent = []
    scrapes = 3600 // SCRAPE_S + 1
    last_maintained = None
    for tick in range(scrapes):
        now = T0 + tick * SCRAPE_S
        samples = samples_for(models, tick)
        started = time.perf_counter()
        recorder.observe(now, samples)
        if last_maintained is None or now - last_maintained >= history.MAINTAIN_EVERY_S:
            last_maintained = now
            history.maintain(now, "default")
        spent.append(time.perf_counter() - started)
    by_tier = {t: ModelMetricPoint.objects.filter(resolution_s=t).count() for t in history.TIERS}
    rows = sum(by_tier.values()) + ServerMetricPoint.objects.count()
    grown = db_bytes() - before
    per_row = grown / rows
    # Kept: 24 h of 10 s rows, HISTORY_RETENTION_DAYS (14) of each coarser tier.
    kept = 86400 // history.FINE_S + sum(14 * 86400 // t for t in history.TIERS[1:])
    tiers = " + ".join(f"{by_tier[t] / models:.0f} at {t} s" for t in history.TIERS)
    print(f"Recording, {models} models, one simulated hour of scrapes every {SCRAPE_S} s:")
    print()
    print("| figure | value |")
    print("|---|---|")
    print(f"| rows per model per hour | {sum(by_tier.values()) / models:.0f} ({tiers}); "
          "as many again for the server and for each GPU |")  # fmt: skip
    print(f"| database growth per day, {models} models | {grown * 24 / 1e6:.0f} MB a day for "
          f"the first day ({per_row:.0f} bytes per row with its indexes), then "
          f"{grown * 24 * (1 - by_tier[10] / sum(by_tier.values())) / 1e6:.0f} MB a day "
          "until day 14, then none |")  # fmt: skip
    print(f"| bound kept by pruning ({models} models) | {models * kept:,} rows, about "
          f"{models * kept * per_row / 1e9:.2f} GB |")  # fmt: skip
    print(f"| recorder + maintenance per scrape | median {1000 * median(spent):.1f} ms, "
          f"max {1000 * max(spent):.0f} ms (a 10 s interval closed, a minute rolled up) |")  # fmt: skip
    print()


def bench_reading(models: int) -> None:
    from django.db import connection

    from repository_app import history
    from repository_app.models import ModelMetricPoint, ServerMetricPoint

    ModelMetricPoint.objects.all().delete()
    ServerMetricPoint.objects.all().delete()
    now = int(time.time())
    start = now - 86400 - now % 60
    fields = {"requests_per_s": 12.5, "failures_per_s": 0.0, "request_us": 900.0,
              "queue_us": 100.0, "compute_us": 800.0, "batch_size": 2.0, "pending": 1.0}  # fmt: skip
    t = time.perf_counter()
    for resolution in (history.FINE_S, history.COARSE_S):
        for m in range(models):
            ModelMetricPoint.objects.bulk_create(
                [
                    ModelMetricPoint(
                        ts=ts, resolution_s=resolution, model=f"model_{m:03d}", **fields
                    )
                    for ts in range(start, now, resolution)
                ],
                batch_size=2000,
            )
        ServerMetricPoint.objects.bulk_create(
            [
                ServerMetricPoint(ts=ts, resolution_s=resolution, cpu_utilization=0.4)
                for ts in range(start, now, resolution)
            ],
            batch_size=2000,
        )
    history.roll_up(
        now, "default"
    )  # the 5- and 30-minute rows of those 24 h, as the poller makes them
    # Days 2 to 14 as the 5- and 30-minute rows the poller would have kept (their 1-minute
    # rows matter to no chart read here, so they are left out to save the filling time).
    oldest = start - 13 * 86400
    for resolution in (300, 1800):
        for m in range(models):
            ModelMetricPoint.objects.bulk_create(
                [
                    ModelMetricPoint(
                        ts=ts, resolution_s=resolution, model=f"model_{m:03d}", **fields
                    )
                    for ts in range(oldest, start - start % resolution, resolution)
                ],
                batch_size=2000,
            )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")
    rows = ModelMetricPoint.objects.count()
    filled = time.perf_counter() - t
    client = logged_in_client()
    print(f"Reading: {rows:,} model rows ({models} models: 24 h at 10 s and 1 min, 14 days at "
          f"5 and 30 min; written in {filled:.0f} s), GET /server/history.json, median of 5:")  # fmt: skip
    print()
    print("| range | step (rows read) | points per model | server time (median) | JSON |")
    print("|---|---|---|---|---|")
    verdict = ""
    for key in ("1h", "6h", "24h", "7d", "14d"):
        times = []
        for _ in range(5):
            started = time.perf_counter()
            response = client.get("/server/history.json", {"range": key})
            times.append(1000 * (time.perf_counter() - started))
            assert response.status_code == 200, response.status_code
        data = response.json()
        points = len(data["models"]["model_000"]["t"])
        assert len(data["models"]) == models and points > 0, "measured nothing"
        ms = median(times)
        print(
            f"| {key} | {data['step_s']} s | {points} | {ms:.0f} ms | {len(response.content) / 1e3:.0f} kB |"
        )
        if key == "24h":
            verdict = f"24 h for {models} models: {ms:.0f} ms, target < {TARGET_MS:.0f} ms: " + (
                "met" if ms < TARGET_MS else "NOT met"
            )
    print()
    print(verdict)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", type=int, default=100)
    parser.add_argument("--render-models", type=int, default=50)
    args = parser.parse_args()
    os.environ.setdefault("HISTORY_ENABLED", "true")
    setup_django()
    bench_recording(args.models)
    bench_reading(args.render_models)


if __name__ == "__main__":
    main()
