"""One test run's processes: marked, found again and stopped, so an interrupted run leaves
nothing behind and never lends an earlier run's worker to a later one.

`scripts/test.sh` exports RUN_ENV ("<pid>:<start ticks>" of the shell that owns the run)
before anything starts, so every process of the run (pytest, its xdist workers, the
tritonservers and their stubs, Celery workers, Daphne, redis-server, load workers) carries
it in /proc/<pid>/environ. A marked process whose owner is gone is a leftover, from any
checkout; a process of a run whose owner is alive is never touched, so two runs side by
side keep their own. Linux only (/proc), like the rest of the test stack.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

RUN_ENV = "DASHBOARD_TEST_RUN"
PROC = Path("/proc")


def start_ticks(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat): with
    the pid, it names one process even after the pid is reused."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: split after it.
    return stat.rsplit(")", 1)[1].split()[19]


def run_id(pid: int) -> str:
    return f"{pid}:{start_ticks(pid)}"


def owner_alive(marker: str) -> bool:
    pid, _, ticks = marker.partition(":")
    return pid.isascii() and pid.isdigit() and start_ticks(int(pid)) == ticks


@dataclass(frozen=True)
class Marked:
    pid: int
    marker: str
    var_dir: str
    command: str

    def describe(self) -> str:
        return f"pid {self.pid} ({self.command[:120]})"


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = (PROC / str(pid) / "environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.partition(b"=") for item in raw.split(b"\0") if item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, _, v in pairs}


def _command(pid: int) -> str:
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip() or "?"


def run_processes() -> list[Marked]:
    """Every process that belongs to a test run of this project: marked with RUN_ENV, or
    (runs from before the mark) started with a VAR_DIR ending in var/test."""
    me = {os.getpid(), os.getppid()}
    found = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit() or int(entry.name) in me:
            continue
        pid = int(entry.name)
        env = _environ(pid)
        marker = env.get(RUN_ENV, "")
        var_dir = env.get("VAR_DIR", "")
        if marker or var_dir.endswith("/var/test"):
            found.append(Marked(pid, marker, var_dir, _command(pid)))
    return found


def leftovers(var_dir: str) -> list[Marked]:
    """Processes of runs whose owner is gone: marked ones from any checkout, unmarked ones
    (older runs) only from this checkout's VAR_DIR."""
    return [
        p
        for p in run_processes()
        if (p.marker and not owner_alive(p.marker)) or (not p.marker and p.var_dir == var_dir)
    ]


def of_run(marker: str) -> list[Marked]:
    return [p for p in run_processes() if p.marker == marker]


def stop(processes: Iterable[Marked], grace_s: float = 3.0) -> list[Marked]:
    """SIGTERM each, SIGKILL what is still there after `grace_s`; returns those signalled."""
    targets = list(processes)
    for proc in targets:
        _signal(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_alive(p.pid) for p in targets):
        time.sleep(0.1)
    for proc in targets:
        if _alive(proc.pid):
            _signal(proc.pid, signal.SIGKILL)
    return targets


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _alive(pid: int) -> bool:
    try:
        state = (PROC / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"  # a zombie has exited; only its parent's wait is missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devstack.runguard", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sweep = sub.add_parser("leftovers", help="stop what earlier, interrupted runs left")
    sweep.add_argument("--var-dir", required=True, help="this checkout's test VAR_DIR")
    end = sub.add_parser("stop-run", help="stop every process of one run (its RUN_ENV value)")
    end.add_argument("marker")
    end.add_argument("--grace", type=float, default=3.0)
    args = parser.parse_args(argv)
    if args.command == "leftovers":
        for proc in stop(leftovers(os.path.abspath(args.var_dir))):
            print(f"Stopped a leftover of an earlier test run: {proc.describe()}")
    else:
        for proc in stop(of_run(args.marker), args.grace):
            print(f"Stopped a process of this test run: {proc.describe()}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
