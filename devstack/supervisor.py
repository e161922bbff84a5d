"""`make run`'s watch over the tritonserver it started: restart it with backoff when it
exits, and leave a note (var/run/triton-supervisor.json) that the overview page shows."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from common.supervisor_note import SUPERVISOR_FILE

from . import services as svc
from .console import say

BACKOFF_S = (1, 2, 4, 8, 16, 30)
STEADY_AFTER_S = 60  # a Triton that ran this long starts the backoff over


class TritonSupervisor:
    """Restarts the tritonserver that `make run` started when it exits, waiting 1, 2, 4, ...
    30 s between tries; says so in make run's output and in var/run/triton-supervisor.json,
    which the overview shows."""

    def __init__(
        self, start: Callable[[], subprocess.Popen], var_dir: Path, *, name: str = ""
    ) -> None:
        """``name``: a further local Triton (``devstack.fleet``), named in the messages; the
        overview's note is about the default server's alone (""), so only it writes one."""
        self.start = start
        self.who = f"Triton {name}" if name else "Triton"
        self.path: Path | None = None if name else var_dir / SUPERVISOR_FILE
        self.restarts = 0
        self.attempt = 0
        self.started_at = time.monotonic()
        if self.path is not None:
            self.path.unlink(missing_ok=True)

    def restart(self, code: int | None) -> subprocess.Popen:
        if time.monotonic() - self.started_at > STEADY_AFTER_S:
            self.attempt = 0
        while True:
            wait = BACKOFF_S[min(self.attempt, len(BACKOFF_S) - 1)]
            self.attempt += 1
            say(
                f"{self.who}: tritonserver exited with code {code}; restarting in {wait} s (attempt {self.attempt})"
            )
            self._note(code, f"restarting in {wait} s")
            time.sleep(wait)
            try:
                proc = self.start()
            except svc.ServiceError as exc:
                say(f"{self.who}: restart failed: {str(exc).splitlines()[0]}")
                code = None
                continue
            self.restarts += 1
            self.started_at = time.monotonic()
            say(f"{self.who}: restarted (restart {self.restarts})")
            self._note(code, "restarted")
            return proc

    def _note(self, code: int | None, what: str) -> None:
        from datetime import UTC, datetime

        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps({
            "at": datetime.now(UTC).isoformat(), "exit_code": code, "restarts": self.restarts,
            "state": what,
        }))  # fmt: skip
