"""What a stored sweep asks for, and how long its task may take: read by the sweep's own
run (`sweeps`) and by its load agents (`load_agents`), which must not import each other.
"""

from __future__ import annotations

import dataclasses

from django.conf import settings

from .engine import remote
from .models import Sweep
from .params import SweepParams

LEGACY_RATE_THREADS = 16


def params_of(sweep: Sweep) -> SweepParams:
    """The sweep's stored parameters (fields a newer SweepParams does not know are left
    out; older rows read with the defaults)."""
    names = {f.name for f in dataclasses.fields(SweepParams)}
    stored = {k: v for k, v in sweep.params.items() if k in names}
    if stored.get("mode") == "request_rate":  # stored before max_threads: they ran with 16
        stored.setdefault("max_threads", LEGACY_RATE_THREADS)
    return SweepParams(**stored)


def join_timeout_s() -> float:
    """How long a run of the engine waits for its load agents to join."""
    return float(getattr(settings, "LOAD_AGENT_JOIN_TIMEOUT_S", 60.0))


def wait_bound_s(params: SweepParams) -> float:
    """The most a run of the engine waits for its agents (joining, then starting): what
    the sweep's time limits add per round."""
    return join_timeout_s() + remote.START_TIMEOUT_S if params.load_hosts > 1 else 0.0


def time_limits(params: SweepParams) -> tuple[int, int]:
    """(soft, hard) seconds for one task: every level at max windows in every round, plus
    margins, plus each round's wait for its load agents."""
    levels = params.level_count() * max(1, params.rounds)
    window_s = params.measurement_window_ms / 1000
    agents_s = wait_bound_s(params) * max(1, params.rounds)
    soft = int(levels * (params.max_windows * window_s * 1.25 + 5) + 120 + agents_s)
    return soft, soft + 60
