"""The composing models of an ensemble or a BLS model: which ones, and their breakdown.

An ensemble's steps come from its config (nested ensembles are expanded to their steps, as
perf_analyzer's model parser does); a BLS model's from its `calls_models` parameter
(`model_kind`). Only those models' figures are kept: another client's traffic to some other
model must not leak into a sweep (they are read in one statistics call for the server, so
that the steps' counts and the model's are of one moment, see `read`).

What Triton 2.51 reports for an ensemble itself (checked on this machine): its request,
inference and execution counts and its request time are its own; its queue is only the
ensemble scheduler's (a few µs), and its compute is the sum of its steps' compute
durations over its own requests. perf_analyzer (inference_profiler.cc,
`GetTotalEnsembleDurations`) instead reports an ensemble's queue and compute as the sums
of its composing models' per-request averages, recursively: that is the ensemble row's
breakdown here too (`composed`), so that its steps add up to it. A BLS model keeps its own
breakdown: its calls run inside its own compute, so they are a part of it, not its parts
(perf_analyzer's CSV reports its own figures too; its stdout sums the calls).

Every request of an ensemble runs each step once, but the counts of one window are not
exactly equal: each model's statistics count a request when *that model* finished it,
so a request in flight at a window's boundary can count for a step in one window and for
the ensemble in the next (at most the requests in flight).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from repository_app.naming import unsafe_name_reason
from triton_api import statistics
from triton_api.aio import AioClient
from triton_api.client import TritonError

from ..level_figures import StepFigures, with_compute_shares
from ..model_kind import CALLS_PARAMETER, ENSEMBLE, kind_of_served

BLS = "bls"
MAX_DEPTH = 8  # nested ensembles; Triton refuses cycles, this bounds a broken config


class StepError(ValueError):
    """A composing model that cannot be measured; the message says which and why."""


@dataclass(frozen=True)
class Composing:
    """A composing model and the version whose statistics are read ("" = every loaded
    version, added up, before `resolve_versions`)."""

    model: str
    version: str = ""

    @property
    def spec(self) -> str:
        """perf_analyzer's --bls-composing-models entry: "model" or "model:version"."""
        return f"{self.model}:{self.version}" if self.version else self.model


@dataclass(frozen=True)
class Plan:
    """What a sweep reads besides the model itself: `kind` "" (nothing), ENSEMBLE or BLS;
    `steps` the models whose statistics are diffed, in step order; `calls` a BLS model's
    declared calls, as perf_analyzer takes them."""

    kind: str = ""
    steps: tuple[Composing, ...] = ()
    calls: tuple[Composing, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.steps)


NONE = Plan()


@dataclass
class StepServer:
    """One step's statistics over a window or a level (`results.ServerBreakdown`, None
    when Triton did not answer)."""

    step: Composing
    server: Any = None


def _version(value: Any) -> str:
    """An ensemble step's model_version (-1, "-1" or absent: the newest) as statistics take
    it ("" for the newest)."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        return ""
    return str(number) if number >= 0 else ""


def declared(config: dict[str, Any]) -> tuple[str, list[Composing]]:
    """(kind, the composing models its config names, in order): an ensemble's steps, a
    BLS model's `calls_models`, or ("", [])."""
    config = config.get("config", config)  # gRPC's as_json wraps the config
    kind = kind_of_served(config)
    if kind.kind == ENSEMBLE:
        steps = (config.get("ensemble_scheduling") or {}).get("step") or []
        return ENSEMBLE, [
            Composing(str(s.get("model_name", "")), _version(s.get("model_version"))) for s in steps
        ]
    if kind.calls:
        return BLS, [Composing(name) for name in kind.calls]
    return "", []


def check_names(model: str, items: Sequence[Composing]) -> None:
    """StepError for a composing model name outside the safe set (`repository_app.naming`):
    a BLS model's names are free text in its config, and they reach perf_analyzer's
    command line."""
    for item in items:
        reason = unsafe_name_reason(item.model)
        if reason:
            raise StepError(
                f"{model}'s {CALLS_PARAMETER} parameter (or ensemble step) names "
                f"{item.model!r}, which is not a model name the dashboard measures: {reason}"
            )


async def plan(control: AioClient, model: str, config: dict[str, Any]) -> Plan:
    """The plan of the model whose served config is `config`: its composing models, nested
    ensembles expanded (each model once, in first-seen order, as perf_analyzer's set of
    composing models holds each once), each version resolved (`resolve_versions`)."""
    kind, items = declared(config)
    if not kind:
        return NONE
    check_names(model, items)
    leaves: list[Composing] = []
    await _expand(control, model, items, leaves, depth=1)
    steps = await resolve_versions(control, leaves)
    return Plan(kind, tuple(steps), tuple(items) if kind == BLS else ())


async def _expand(
    control: AioClient, parent: str, items: Sequence[Composing], out: list[Composing], depth: int
) -> None:
    if depth > MAX_DEPTH:
        raise StepError(f"{parent}: ensembles nested more than {MAX_DEPTH} deep")
    configs = await asyncio.gather(
        *(_config(control, parent, item) for item in items), return_exceptions=True
    )
    for item, found in zip(items, configs, strict=True):
        if isinstance(found, BaseException):
            raise found
        kind, inner = declared(found)
        if kind == ENSEMBLE:
            check_names(item.model, inner)
            await _expand(control, item.model, inner, out, depth + 1)
        elif item not in out:
            out.append(item)


async def _config(control: AioClient, parent: str, item: Composing) -> dict[str, Any]:
    try:
        return await control.config(item.model, item.version)
    except TritonError as exc:
        if exc.unreachable:
            raise StepError(str(exc)) from None
        raise StepError(
            f"{parent} runs {item.model}, which Triton does not serve ({exc}): load it first"
        ) from None


async def resolve_versions(control: AioClient, items: Sequence[Composing]) -> list[Composing]:
    """Each item with "" for its version gets the newest version with statistics, as
    perf_analyzer picks it (the others are kept as they are)."""
    found = await asyncio.gather(
        *(control.model_stats(i.model, "") for i in items if not i.version)
    )
    newest = iter(found)
    out = []
    for item in items:
        if item.version:
            out.append(item)
            continue
        versions = [str(e.get("version", "")) for e in next(newest) or []]
        numbers = [int(v) for v in versions if v.isascii() and v.isdigit()]
        out.append(dataclasses.replace(item, version=str(max(numbers)) if numbers else ""))
    return out


async def read(
    control: AioClient, plan: Plan, model: str, version: str
) -> tuple[dict[str, int] | None, list[dict[str, int] | None]]:
    """(the model's cumulative counters, each step's), read at one moment. Without steps,
    the model's own statistics call. With steps, one call for the server's models (Triton
    answers it from one pass over them), of which only the model's and its steps' entries
    are kept: separate calls would each be answered a little later on a busy machine, and
    the steps' counts would drift from the model's by whatever completed in between; in
    one read they differ only by the requests in flight."""
    if not plan.steps:
        return await control.statistics(model, version), []
    entries = await control.model_stats("", "")
    if entries is None:
        return None, [None] * len(plan.steps)

    def of(name: str, wanted: str) -> dict[str, int]:
        return statistics.totals([e for e in entries if e.get("name") == name], wanted)

    return of(model, version), [of(s.model, s.version) for s in plan.steps]


def composed(plan: Plan, own: Any, steps: Sequence[StepServer]) -> Any:
    """The model's breakdown (`results.ServerBreakdown`) as its row shows it: an
    ensemble's queue and compute are the sums of its steps' (perf_analyzer's rule); its
    counts and request time stay its own. Anything else, or a step without figures, keeps
    `own`."""
    if plan.kind != ENSEMBLE or own is None or not steps:
        return own
    if any(s.server is None for s in steps):
        return own
    return dataclasses.replace(
        own,
        queue_us=sum(s.server.queue_us for s in steps),
        compute_input_us=sum(s.server.compute_input_us for s in steps),
        compute_infer_us=sum(s.server.compute_infer_us for s in steps),
        compute_output_us=sum(s.server.compute_output_us for s in steps),
    )


def rows(steps: Sequence[StepServer]) -> tuple[StepFigures, ...]:
    """A level's or a window's `steps`, in step order."""
    return with_compute_shares(
        [StepFigures.of(s.step.model, s.step.version, s.server) for s in steps]
    )
