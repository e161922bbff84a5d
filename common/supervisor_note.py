"""The overview's line about Triton restarts by `make run`: devstack.supervisor writes the
note file under VAR_DIR, the overview reads it (the deployed app never imports devstack)."""

from __future__ import annotations

import json
from pathlib import Path

SUPERVISOR_FILE = "run/triton-supervisor.json"


def supervisor_note(var_dir: Path) -> str:
    """The overview's line about Triton restarts by `make run` ("" when there were none)."""
    from datetime import datetime

    from django.utils import timezone

    try:
        note = json.loads((var_dir / SUPERVISOR_FILE).read_text())
        at = timezone.localtime(datetime.fromisoformat(note["at"]))
    except (OSError, ValueError, KeyError):
        return ""
    return (
        f"make run: tritonserver exited (code {note['exit_code']}) and was {note['state']} at "
        f"{at:%H:%M:%S}; {note['restarts']} restart(s) so far (log: var/log/tritonserver.log)"
    )
