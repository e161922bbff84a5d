"""A cold load of a sweep page (five Plotly charts) in Chromium with a new profile, over loopback.

    .venv/bin/python benchmarks/bench_page_load.py [--runs 5]

Starts Daphne (`python -m dashboard.serve`) on a throwaway SQLite database holding one
finished sweep, twice: as `make run` serves (DJANGO_DEBUG=true: plain names through the
finders, uncompressed, revalidated) and as the image serves (DJANGO_DEBUG=false after
`collectstatic`: content-hashed names, Brotli, immutable caching). Each run launches
Debian's Chromium with a new, empty profile, opens the page logged in, and records from
navigation start: the load event, and the first chart drawn (its SVG in the page); then
the bytes that came over the wire. A second visit in the same profile shows the cache.
Median of `--runs` cold runs. Target: cold load < 1.5 s (judged on the first chart drawn,
which comes after the load event).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median

# The Redis database it may flush: REDIS_URL, else BENCH_REDIS_DB (default 9) of the local one.
os.environ.setdefault(
    "REDIS_URL", f"redis://127.0.0.1:6379/{os.environ.get('BENCH_REDIS_DB', '9')}"
)
# One key for this process (which signs the session) and both servers: a session's
# auth hash is an HMAC with it.
os.environ["DJANGO_SECRET_KEY"] = "bench-page-load-only"
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _django import ROOT, setup_django  # noqa: E402

TARGET_S = 1.5
CHROMIUM = os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]  # fmt: skip
MEASURE = """(() => {
  const nav = performance.getEntriesByType('navigation')[0];
  const resources = performance.getEntriesByType('resource');
  const plotly = resources.find(r => r.name.includes('/vendor/plotly.min'));
  return {
    load: nav.loadEventEnd,
    transferred: nav.transferSize + resources.reduce((sum, r) => sum + r.transferSize, 0),
    plotly_transferred: plotly ? plotly.transferSize : -1,
    plotly_url: plotly ? plotly.name : '',
    plotly_fetch: plotly ? plotly.responseEnd - plotly.startTime : -1,
  };
})()"""


def seed() -> tuple[int, str]:
    """A finished sweep with eight levels, and a logged-in session; returns both ids."""
    from django.contrib.auth import get_user_model
    from django.contrib.sessions.backends.db import SessionStore

    from profiler_app import sweeps
    from profiler_app.models import Sweep, SweepPoint
    from profiler_app.params import SweepParams

    params = SweepParams(model="add_batched", start=1, end=8, step=1)
    sweep = Sweep.objects.create(
        model="add_batched", server="127.0.0.1:8001", params=sweeps.params_to_json(params),
        state=Sweep.State.SUCCEEDED, levels_total=8,
    )  # fmt: skip
    SweepPoint.objects.bulk_create(
        SweepPoint(sweep=sweep, level=level, window=SweepPoint.LEVEL, throughput=100.0 * level,
                   requests=1000, duration_s=2.0, avg_us=900.0 + 50 * level, p50_us=850.0,
                   p90_us=1000.0, p95_us=1100.0, p99_us=1300.0, queue_us=100.0,
                   compute_infer_us=700.0, stable=True)
        for level in range(1, 9)
    )  # fmt: skip
    user = get_user_model().objects.create_superuser("pageload", "", "pageload-password-1")
    session = SessionStore()
    session["_auth_user_id"] = str(user.pk)
    session["_auth_user_backend"] = "django.contrib.auth.backends.ModelBackend"
    session["_auth_user_hash"] = user.get_session_auth_hash()
    session.save()
    return sweep.pk, str(session.session_key)


def visit(pw, base: str, path: str, session_key: str) -> tuple[dict, dict]:  # type: ignore[no-untyped-def]
    """A cold visit in a new profile, then a warm one in the same profile."""
    with tempfile.TemporaryDirectory(prefix="bench-profile-") as profile:
        context = pw.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        try:
            context.add_cookies([{"name": "sessionid", "value": session_key, "url": base}])
            page = context.pages[0] if context.pages else context.new_page()
            results = []
            for _ in range(2):
                page.goto(base + path, wait_until="load")
                page.wait_for_selector("#chart-throughput .main-svg", state="attached")
                drawn = page.evaluate("performance.now()")
                figures = page.evaluate(MEASURE)
                figures["drawn"] = drawn
                results.append(figures)
            return results[0], results[1]
        finally:
            context.close()


def serve(env: dict[str, str], log: Path) -> tuple[subprocess.Popen, str]:
    from devstack import services as svc

    port = svc.free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "dashboard.serve", "-b", "127.0.0.1", "-p", str(port),
         "dashboard.asgi:application"],
        cwd=ROOT, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    svc.wait_until(lambda: svc.port_is_open("127.0.0.1", port), 60, "daphne", proc, log)
    return proc, f"http://127.0.0.1:{port}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    work = setup_django()
    from django.conf import settings
    from playwright.sync_api import sync_playwright

    from devstack import services as svc

    sweep_id, session_key = seed()
    base_env = {
        **os.environ,
        "VAR_DIR": str(work),
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
        "REDIS_URL": settings.REDIS_URL,
        "TRITON_POLL_INTERVAL_S": "60",
    }
    production = {**base_env, "DJANGO_DEBUG": "false", "DJANGO_SSL_REDIRECT": "false"}
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput", "-v", "0"],
        cwd=ROOT, env=production, check=True,
    )  # fmt: skip
    collect_s = time.perf_counter() - started
    modes = [
        (
            "make run (DJANGO_DEBUG=true, finders, plain names)",
            {**base_env, "DJANGO_DEBUG": "true"},
        ),
        ("image (DJANGO_DEBUG=false, collectstatic: hashed, Brotli, immutable)", production),
    ]
    print(f"Sweep page `/sweeps/{sweep_id}/`, {args.runs} cold runs per mode (each a new "
          f"Chromium profile), median; collectstatic took {collect_s:.0f} s.")  # fmt: skip
    print()
    print("| served as | cold: load event | cold: first chart | cold: bytes (plotly.min.js) "
          "| plotly.min.js fetch | warm: load event | warm: bytes |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    verdicts = []
    with sync_playwright() as pw:
        for label, env in modes:
            proc, base = serve(env, work / "daphne.log")
            try:
                visit(pw, base, f"/sweeps/{sweep_id}/", session_key)  # server warm-up
                runs = [
                    visit(pw, base, f"/sweeps/{sweep_id}/", session_key) for _ in range(args.runs)
                ]
            finally:
                svc.stop(proc)
            cold = [r[0] for r in runs]
            warm = [r[1] for r in runs]
            assert all(c["plotly_transferred"] > 0 for c in cold), "plotly was never fetched"
            load = median(c["load"] for c in cold) / 1000
            drawn = median(c["drawn"] for c in cold) / 1000
            print(f"| {label} | {load:.2f} s | {drawn:.2f} s "
                  f"| {median(c['transferred'] for c in cold) / 1e6:.2f} MB "
                  f"({median(c['plotly_transferred'] for c in cold) / 1e6:.2f} MB) "
                  f"| {median(c['plotly_fetch'] for c in cold):.0f} ms "
                  f"| {median(w['load'] for w in warm) / 1000:.2f} s "
                  f"| {median(w['transferred'] for w in warm) / 1e3:.0f} kB |")  # fmt: skip
            verdicts.append(f"{label.split(' (')[0]}: cold first chart {drawn:.2f} s, target "
                            f"< {TARGET_S} s: {'met' if drawn < TARGET_S else 'NOT met'}")  # fmt: skip
    print()
    for line in verdicts:
        print(line)


if __name__ == "__main__":
    main()
