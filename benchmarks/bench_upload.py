"""Uploads: a 2 GiB file through the chunked API against a real Daphne, side by side with
`cp`; peak memory of the web process; publishing time for 1 MB vs 1 GB versions.

    .venv/bin/python benchmarks/bench_upload.py [--size-mib 2048] [--chunk-mib 16] [--rounds 3]

Beside the real path it measures the web server's own ceiling: the same chunks sent to
`python -m dashboard.serve` serving `benchmarks/noop_asgi.py` (reads each body, throws it
away), in the same rounds.

Starts Daphne like the tests' `web_server` fixture (its own SQLite database, repository and
staging folder under a temp folder, no Triton needed: the model is a TensorRT plan, which
is not parsed), uploads a random file over one keep-alive connection, completes it, and
reads VmHWM (peak RSS) from /proc/<pid>/status. Everything is removed afterwards.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _django import ROOT, setup_django  # noqa: E402

MiB = 1024 * 1024
# A chunk's path, so the server holds the no-op to the chunk limit, as it does uploads.
NOOP_PATH = "/api/v1/uploads/00000000-0000-0000-0000-000000000000/"


def make_random_file(path: Path, size: int) -> str:
    digest = hashlib.sha256()
    block = os.urandom(64 * MiB)
    with path.open("wb") as handle:
        written = 0
        while written < size:
            # A fresh 8-byte counter per block keeps blocks distinct without urandom's cost.
            data = written.to_bytes(8, "little") + block[8 : min(64 * MiB, size - written)]
            handle.write(data)
            digest.update(data)
            written += len(data)
    return digest.hexdigest()


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size-mib", type=int, default=2048)
    # The browser's default chunk (UPLOAD_CHUNK_BYTES).
    parser.add_argument("--chunk-mib", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = setup_django()
    repo = work / "model_repository"
    (repo / "bench" / "1").mkdir(parents=True)
    (repo / "bench" / "config.pbtxt").write_text('name: "bench"\nbackend: "tensorrt"\n')
    (repo / "bench" / "1" / "model.plan").write_bytes(b"plan")
    os.environ["MODEL_REPOSITORY"] = str(repo)
    from django.conf import settings

    settings.MODEL_REPOSITORY = repo
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    from devstack import services as svc

    user = get_user_model().objects.create_superuser("bench", "", "bench-password-1")
    token = Token.objects.create(user=user).key
    source = work / "source.bin"
    size = args.size_mib * MiB
    sha = make_random_file(source, size)

    port = svc.free_port()
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "dashboard.settings", "TRITON_URL": "127.0.0.1:9",
           "TRITON_TIMEOUT_S": "0.5", "PYTHONUNBUFFERED": "1"}  # fmt: skip
    log = work / "daphne.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "dashboard.serve", "--workers", "1", "-b", "127.0.0.1", "-p",
         str(port), "dashboard.asgi:application"],
        cwd=ROOT, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    try:
        svc.wait_until(lambda: svc.port_is_open("127.0.0.1", port), 60, "daphne", proc, log)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
        headers = {"Authorization": f"Token {token}", "Host": "127.0.0.1"}

        def call(method: str, path: str, body: bytes | None = None, **extra: str):  # type: ignore[no-untyped-def]
            conn.request(method, path, body=body, headers={**headers, **extra})
            response = conn.getresponse()
            return response.status, response.read()

        call("GET", "/api/v1/uploads/")  # warm up imports and the database
        baseline = rss_mib(proc.pid)

        def copy_once() -> tuple[float, float]:
            """(cp, cp then fsync of the copy): the upload fsyncs what it publishes."""
            copy = work / "copy.bin"
            began = time.perf_counter()
            subprocess.run(["cp", str(source), str(copy)], check=True)
            copied = time.perf_counter() - began
            with copy.open("rb") as handle:
                os.fsync(handle.fileno())
            synced = time.perf_counter() - began
            copy.unlink()
            return copied, synced

        def upload_once(expected_version: int) -> tuple[float, float]:
            began = time.perf_counter()
            status, body = call(
                "POST", "/api/v1/uploads/",
                json.dumps({"model": "bench", "filename": "model.plan", "size": size,
                            "sha256": sha}).encode(),
                **{"Content-Type": "application/json"},
            )  # fmt: skip
            assert status == 201, body
            upload = json.loads(body)
            with source.open("rb") as handle:
                offset = 0
                while offset < size:
                    data = handle.read(chunk)
                    status, body = call("PATCH", upload["url"], data, **{
                        "Upload-Offset": str(offset),
                        "Content-Type": "application/octet-stream"})  # fmt: skip
                    assert status == 200, body
                    offset += len(data)
            transfer = time.perf_counter() - began
            began = time.perf_counter()
            status, body = call("POST", upload["url"] + "complete?wait=1")
            complete = time.perf_counter() - began
            assert status == 201, body
            result = json.loads(body)
            assert result["sha256"] == sha and result["version"] == expected_version
            published = repo / "bench" / str(expected_version) / "model.plan"
            assert published.stat().st_size == size
            shutil.rmtree(published.parent)  # keep the disk and page cache to one copy
            return transfer, complete

        noop_port = svc.free_port()
        noop = subprocess.Popen(
            [sys.executable, "-m", "dashboard.serve", "--workers", "1", "-b", "127.0.0.1",
             "-p", str(noop_port), "noop_asgi:application"],
            cwd=ROOT, env={**env, "PYTHONPATH": str(ROOT / "benchmarks")},
            stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        svc.wait_until(lambda: svc.port_is_open("127.0.0.1", noop_port), 60, "no-op", noop, log)

        def noop_once() -> float:
            """The same chunks to the no-op application: the server's own ceiling."""
            sink = http.client.HTTPConnection("127.0.0.1", noop_port, timeout=600)
            began = time.perf_counter()
            with source.open("rb") as handle:
                while data := handle.read(chunk):
                    sink.request("PATCH", NOOP_PATH, body=data,
                                 headers={"Content-Type": "application/octet-stream"})  # fmt: skip
                    answer = sink.getresponse()
                    answer.read()
                    assert answer.status == 200
            sink.close()
            return time.perf_counter() - began

        # Alternate cp, the no-op and the upload so all see the same machine.
        chunk = args.chunk_mib * MiB
        cp_runs, cp_sync_runs, transfer_runs, complete_runs, noop_runs = [], [], [], [], []
        try:
            for _ in range(args.rounds):
                copied, synced = copy_once()
                cp_runs.append(copied)
                cp_sync_runs.append(synced)
                noop_runs.append(noop_once())
                transfer, complete = upload_once(2)
                transfer_runs.append(transfer)
                complete_runs.append(complete)
        finally:
            svc.stop(noop)
        noop_s = statistics.median(noop_runs)
        cp_s = statistics.median(cp_runs)
        cp_sync_s = statistics.median(cp_sync_runs)
        transfer_s = statistics.median(transfer_runs)
        complete_s = statistics.median(complete_runs)
        total_s = statistics.median(
            t + c for t, c in zip(transfer_runs, complete_runs, strict=True)
        )
        peak = peak_rss_mib(proc.pid)
    finally:
        svc.stop(proc)

    # Publishing (rename under the model lock) for 1 MB vs 1 GB versions.
    from registry import servers
    from repository_app import disk
    from repository_app.models import Upload
    from repository_app.uploads import publish, sharing, staging

    sharing._triton_states = lambda server, model: []  # type: ignore[assignment]
    timings = {}
    for label, nbytes in (("1 MB", 10**6), ("1 GB", 10**9)):
        samples = []
        for _ in range(5):
            row = Upload.objects.create(username="bench", model="bench", backend="tensorrt",
                                        filename="model.plan", size=nbytes, server="default")  # fmt: skip
            folder = staging.upload_dir(row) / "version"
            folder.mkdir(parents=True)
            with (folder / "model.plan").open("wb") as handle:
                handle.truncate(nbytes)  # sparse: the rename does not read the data
            disk.fsync_tree(folder)
            start = time.perf_counter()
            publish._publish(servers.default(), row, False)
            samples.append((time.perf_counter() - start) * 1000)
            staging.remove_staging(row)
        timings[label] = sorted(samples)[len(samples) // 2]

    size_gib = size / 1024**3
    print("## Uploads (chunked API through Daphne)\n")
    print(f"`{Path(sys.executable).name} benchmarks/bench_upload.py --size-mib {args.size_mib} "
          f"--chunk-mib {args.chunk_mib} --rounds {args.rounds}` · {os.cpu_count()} CPUs; "
          "`cp` and the upload alternate, each figure is the median of the rounds\n")  # fmt: skip
    print("| measure | value |")
    print("|---|---|")
    print(f"| file | {size_gib:.2f} GiB random, {args.chunk_mib} MiB chunks |")
    print(f"| `cp` of the same file | {cp_s:.2f} s ({size / MiB / cp_s:.0f} MiB/s) |")
    print(
        f"| `cp`, then fsync of the copy | {cp_sync_s:.2f} s ({size / MiB / cp_sync_s:.0f} MiB/s) |"
    )
    print(f"| the server's own ceiling (same chunks to a no-op application) | {noop_s:.2f} s "
          f"({size / MiB / noop_s:.0f} MiB/s) |")  # fmt: skip
    print(f"| chunks sent (PATCH) | {transfer_s:.2f} s ({size / MiB / transfer_s:.0f} MiB/s, "
          f"{noop_s / transfer_s:.2f} of the ceiling) |")  # fmt: skip
    print(f"| complete (sha256 check, fsync, rename) | {complete_s:.2f} s |")
    print(f"| upload total | {total_s:.2f} s ({size / MiB / total_s:.0f} MiB/s) |")
    print(f"| upload throughput vs `cp` | {100 * cp_s / total_s:.0f} % (target ≥ 50 %) |")
    print(f"| upload throughput vs `cp` + fsync | {100 * cp_sync_s / total_s:.0f} % |")
    print(f"| web process RSS before / peak (VmHWM) | {baseline:.0f} MiB / {peak:.0f} MiB: "
          f"+{peak - baseline:.0f} MiB (target: under +32 MiB) |")  # fmt: skip
    for label, ms in timings.items():
        print(f"| publish a {label} version (lock + rename + fsync) | {ms:.2f} ms (median of 5) |")
    print()
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
