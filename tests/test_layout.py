"""The house rules of the code layout (issue "One house"), checked on the tree itself."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APPS = ("dashboard", "repository_app", "profiler_app", "team", "devstack")


def _sources() -> dict[Path, str]:
    return {
        p: p.read_text()
        for app in APPS
        for p in (ROOT / app).rglob("*.py")
        if "migrations" not in p.parts
    }


def test_no_import_circles_even_through_function_level_imports():
    done = subprocess.run(
        [sys.executable, "scripts/import_cycles.py", "--all"],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_only_the_triton_package_holds_a_triton_client_and_knows_the_gpu_metrics():
    clients = re.compile(
        r"tritonclient\.(grpc|http)(\.aio)?\s+import\s+(?!model_config_pb2|service_pb2)|import tritonclient\.(grpc|http)"
    )
    gpu = re.compile(r"nv_gpu_")
    holders, gpu_readers = set(), set()
    for path, text in _sources().items():
        rel = path.relative_to(ROOT).as_posix()
        if clients.search(text):
            holders.add(rel)
        if gpu.search(text):
            gpu_readers.add(rel)
    # The engine's inference transports are its hot path; they take their URLs from the
    # package (engine_url) and call nothing but inference.
    assert holders <= {
        "repository_app/triton/client.py",
        "repository_app/triton/aio.py",
        "profiler_app/engine/load_workers.py",
        "profiler_app/engine/http_body.py",
    }, holders
    assert gpu_readers == {"repository_app/triton/gpus.py"}, gpu_readers


def test_pages_and_api_reads_never_run_the_watchdog_or_restore_a_search():
    for path, text in _sources().items():
        if path.name in ("views.py", "api.py"):
            assert "watchdog" not in text and "restore_pending" not in text, path
