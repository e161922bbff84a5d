"""Defaults that find something: what a search starts from when the user has not chosen.

- **The server's size.** Instance counts go up to the server's CPU count (KIND_CPU) or GPU
  count (KIND_GPU, at least 2: a count is per GPU in Triton). Triton exports no CPU
  count, so it is known only when Triton runs on this machine (its address is local);
  elsewhere the counts stop at one more than the current config's. Powers of two up to the
  count, and the count itself (1, 2, 4, 6 for six cores), keep the grid small.
- **A probe of the current config.** A short concurrency sweep of the model as it is
  (`probe_params`, about 10 s, queued like any sweep and named "probe"). Its knee K (the
  concurrency after which throughput stops gaining) sets the search's concurrency range,
  K/2 to 2K in four levels, and the latency budget: twice the current config's p95 at K.
  The latest finished concurrency sweep of the current config (same config.pbtxt, by its
  sha256) on the same server serves as the probe, whoever ran it, so a model benchmarked
  today needs no new probe; its settled levels count, or all its measured ones when none
  settled (a busy machine), and an older sweep serves when a newer one measured nothing.
- **Without a probe** the budget is left to the search itself: it measures the current
  config first and takes twice its p95 at the knee of what it measured (`auto_budget`).
- **A decoupled model** is probed over gRPC streams, and its budget is on the time to the
  first response (what its search judges it on): twice the first response's p95 at the
  knee, from the probe or from the search's own first measurement.
"""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from registry.servers import Server
from registry.triton_clients import get_client
from triton_api import gpus as triton_gpus
from triton_api.address import split_host_port
from triton_api.client import TritonError

from .. import measure, sweeps, verdict
from ..engine import stats
from ..models import Sweep, SweepPoint
from ..params import SweepParams

PROBE_NAME = "probe: find best config"
BUDGET_FACTOR = 2.0
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]", "0.0.0.0"}


def probe_params(model: str, streaming: bool = False) -> SweepParams:
    """The probe: concurrency 1..8, short windows, loose stability (it only has to find
    the knee's neighbourhood, not measure it to the percent); over gRPC streams for a
    decoupled model (`streaming`), which answers nowhere else."""
    return SweepParams(
        model=model,
        start=1,
        end=8,
        step=1,
        measurement_window_ms=250,
        stability_percentage=20,
        max_windows=6,
        streaming=streaming,
    )


@dataclass(frozen=True)
class Capacity:
    cpus: int | None  # None: Triton runs elsewhere and exports no CPU count
    gpus: int

    def max_count(self, kind: str, current: int) -> int:
        if kind == "KIND_GPU":
            return max(2, self.gpus)
        return self.cpus if self.cpus else max(2, current + 1)

    def describe(self, kind: str) -> str:
        if kind == "KIND_GPU":
            return f"{self.gpus} GPU{'s' if self.gpus != 1 else ''} (count is per GPU)"
        if self.cpus:
            return f"{self.cpus} CPU cores"
        return "an unknown number of CPU cores (Triton runs on another host)"


def _host(url: str) -> str:
    """'127.0.0.1:8001' -> '127.0.0.1'; '[::1]:8001' -> '::1'; 'triton' -> 'triton'."""
    url = url.split("://", 1)[-1]
    try:
        return split_host_port(url)[0]
    except ValueError:  # no port: the host alone
        return url


def triton_is_local(url: str) -> bool:
    host = _host(url)
    return host in LOCAL_HOSTS or host in (socket.gethostname(), socket.getfqdn())


def local_cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def capacity(server: Server) -> Capacity:
    try:
        gpus = len(triton_gpus.uuids(get_client(server).metrics()))
    except TritonError:
        gpus = 0
    return Capacity(local_cpu_count() if triton_is_local(server.grpc_url) else None, gpus)


def count_values(limit: int) -> list[int]:
    """1, 2, 4, ... up to `limit`, and `limit` itself."""
    values = [1 << i for i in range(int(math.log2(max(1, limit))) + 1)]
    return sorted({*values, max(1, limit)})


@dataclass(frozen=True)
class Suggestion:
    """What a probe of the current config suggests."""

    sweep_id: int
    knee: float
    p95_ms: float  # at the knee, in the chosen percentile's terms (p95 unless said)
    budget_ms: float
    concurrency_range: str
    latency_label: str
    # The form field the budget fills: a streaming probe's is the first response's.
    budget_field: str = "latency_budget"
    settled: bool = True  # False: from levels that did not settle (a rough guide)

    def sentence(self) -> str:
        rough = "" if self.settled else " (its levels did not settle: a rough guide)"
        return (
            f"From sweep #{self.sweep_id} of the current config{rough}: {self.latency_label} "
            f"{self.p95_ms:.2f} ms at concurrency {self.knee:g} (its knee), so a "
            + ("first-response " if self.budget_field == "first_response_budget" else "")
            + f"budget of {self.budget_ms:g} ms (twice that) and concurrency "
            f"{self.concurrency_range}."
        )


def round_up(value: float, digits: int = 2) -> float:
    """Up to `digits` significant digits, upwards: 4.013 -> 4.1."""
    if value <= 0:
        return value
    scale = 10 ** (digits - 1 - math.floor(math.log10(value)))
    return math.ceil(value * scale) / scale


def range_around(knee: float) -> str:
    """K/2 to 2K in four levels (1:2:1 when K is 1)."""
    k = max(1, int(knee))
    step = max(1, k // 2)
    return f"{step}:{2 * k}:{step}"


def knee_of(levels: Sequence[tuple[float, float, float]]) -> tuple[float, float] | None:
    """(concurrency, latency µs) at the knee of (concurrency, throughput, latency µs) points."""
    ordered = sorted(levels)
    curve = [stats.CurvePoint(c, t, lat) for c, t, lat in ordered if t > 0]
    knee = stats.find_knee(curve)
    if knee is None:
        return None
    point = curve[knee.index]
    return point.level, point.latency_us


def suggest_from(sweep: Sweep) -> Suggestion | None:
    """The suggestion a finished concurrency sweep makes (its settled levels' knee)."""
    params = sweeps.params_of(sweep)
    if params.mode != "concurrency":
        return None
    key = measure.latency_key(params.percentile)
    label, field = params.latency_label, "latency_budget"
    if params.streaming:  # a decoupled model: its search is judged on the first response
        key, label, field = (
            f"first_response_{key}",
            f"first response {label}",
            ("first_response_budget"),
        )
    measured = [
        (p, lv)
        for p in SweepPoint.objects.filter(sweep=sweep, window=SweepPoint.LEVEL)
        if verdict.measured(p) and (lv := measure.Level.from_point(p).figure(key)) is not None
    ]
    # Settled levels only, as the search judges; all measured ones when none settled (a
    # sweep on a busy machine still says where the knee lies), as `auto_budget` does.
    rows = [(p, lv) for p, lv in measured if p.stable is not False]
    settled = bool(rows)
    found = knee_of([(p.level, p.throughput, lv) for p, lv in rows or measured])
    if found is None:
        return None
    knee, latency_us = found
    budget = round_up(BUDGET_FACTOR * latency_us / 1000)
    return Suggestion(
        sweep.pk, knee, latency_us / 1000, budget, range_around(knee), label, field, settled
    )


def sweeps_of_config(server: Server, model: str, config_sha256: str) -> list[Sweep]:
    """The newest finished (succeeded) sweeps of this exact config (its sha256) on
    ``server``, newest first (a search's own queue jobs are not sweeps of it)."""
    rows = Sweep.objects.filter(
        server=server.name,
        model=model,
        config_sha256=config_sha256,
        state=Sweep.State.SUCCEEDED,
        kind=Sweep.Kind.SWEEP,
    ).order_by("-finished_at", "-id")
    return list(rows[:20])


def suggestion(server: Server, model: str, config_sha256: str) -> Suggestion | None:
    """What the newest sweep of the current config that measured a concurrency curve
    suggests (None when no sweep of it did)."""
    for sweep in sweeps_of_config(server, model, config_sha256):
        if sweep.params.get("mode", "concurrency") != "concurrency":
            continue
        found = suggest_from(sweep)
        if found is not None:
            return found
    return None


def without_suggestion(server: Server, model: str, config_sha256: str) -> str:
    """What the form says when no sweep of the current config suggests a budget: that
    there is none, or why those there are do not."""
    then = (
        "the budget is measured first in the search (twice the current config's latency at "
        "its knee), or probe it now to see and edit it."
    )
    found = sweeps_of_config(server, model, config_sha256)
    if not found:
        return f"No sweep of the current config yet: {then}"
    names = ", ".join(f"#{sweep.pk}" for sweep in found[:3])
    return (
        f"The sweeps of the current config ({names}) measured no concurrency curve to take "
        f"a budget from (request-rate sweeps, or no level measured): {then}"
    )


def running_probe(server: Server, model: str) -> Sweep | None:
    return (
        Sweep.objects.filter(
            server=server.name,
            model=model,
            name=PROBE_NAME,
            state__in=(Sweep.State.QUEUED, Sweep.State.RUNNING),
        )
        .order_by("-id")
        .first()
    )


def auto_budget(levels: Sequence[dict[str, Any]], latency_key: str) -> tuple[float, float] | None:
    """(budget ms, concurrency) from the current config's measured levels (`level_json`
    rows): twice its latency at the knee of what was measured."""
    measured = [
        (lv, p)
        for lv in map(measure.Level.from_json, levels)
        if (p := lv.curve_point(latency_key)) is not None
    ]
    points = [(p.level, p.throughput, p.latency_us) for lv, p in measured if lv.stable is not False]
    points = points or [(p.level, p.throughput, p.latency_us) for _, p in measured]
    found = knee_of(points)
    if found is None:
        return None
    knee, latency_us = found
    return round_up(BUDGET_FACTOR * latency_us / 1000), knee


def server_environment(server: Server) -> dict[str, Any]:
    """The Triton a search runs on, for its report: its facts (name, version, address,
    GPUs with their memory: `server_facts.describe`), and the CPU count where it is known
    (a local Triton)."""
    from repository_app.server_facts import describe

    facts = describe(server)
    local = triton_is_local(server.grpc_url)
    return {
        **facts,  # "server" names it, as Sweep.server does; "grpc_url" is its address
        "host": _host(server.grpc_url),
        "local": local,
        "cpu_count": local_cpu_count() if local else None,
    }
