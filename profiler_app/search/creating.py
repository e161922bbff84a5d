"""Creating a config search: what a request asks for (`SearchRequest`), how many candidate
runs it plans, the refusals of entries that do not fit the model's kind or each other, the
checks before anything is queued, and the queued search with its carrier job.
"""

from __future__ import annotations

import dataclasses
from typing import Any, cast

from django.core.exceptions import NON_FIELD_ERRORS
from django.db import transaction

from registry.servers import Server
from repository_app import control
from team import audit

from .. import jobs, kind_rules, sweeps
from ..engine.loadgen import SweepError
from ..model_kind import ModelKind, kind_of
from ..models import Search, Sweep
from ..params import FlagsRefused, SweepParams
from . import objective, strategies
from .errors import SearchError, SearchRefused
from .space import Knobs, Space, SpaceError, knobs_of
from .target import is_ready, saved_config


@dataclasses.dataclass
class SearchRequest:
    model: str
    space: Space
    measure: SweepParams  # concurrency range, windows, stability, percentile
    constraints: objective.Constraints
    server: Server  # the Triton server it runs on
    # TextChoices members are str; untyped Django shows mypy a (value, label) tuple.
    objective: str = cast(str, Search.Objective.MAX_THROUGHPUT)
    mode: str = cast(str, Search.Mode.QUICK)
    max_runs: int | None = None
    # Re-measure the top candidates and the current config side by side (confirm.py): off
    # here (0); the form and the API default to confirm.DEFAULT_TOP x DEFAULT_ROUNDS.
    confirm_top: int = 0
    confirm_rounds: int = 0
    # No latency budget given: twice the current config's latency at its knee, from its own
    # measurement, the first of the search (defaults.auto_budget).
    budget_auto: bool = False


def plan(request: SearchRequest) -> tuple[Knobs, int]:
    """(the current config's knobs, how many candidate runs at most); SearchError/SpaceError."""
    base, _, _ = saved_config(request.server, request.model)
    baseline = knobs_of(base)
    dims = request.space.dimensions(baseline)
    if request.mode == Search.Mode.GRID:
        runs = strategies.grid_runs(dims, baseline)
    else:
        runs = strategies.quick_runs(dims, baseline, request.max_runs)
    return baseline, runs + confirm_runs(request.confirm_top, request.confirm_rounds, runs)


def confirm_runs(top: int, rounds: int, runs: int) -> int:
    """The re-measurements after the strategy: the top `top` other candidates and the
    current config, `rounds` times each (none with fewer than 2 rounds: one more run gives
    no spread)."""
    if top < 1 or rounds < 2 or runs < 2:
        return 0
    return (min(top, runs - 1) + 1) * rounds


def refusals(request: SearchRequest, kind: ModelKind) -> dict[str, str]:
    """field -> why the objective, the constraints or the measurement's flags do not fit
    the model's kind or each other; empty when they fit. The candidates are the saved
    config with knobs, so `kind` is read from it (`model_kind.kind_of`)."""
    name, c, params = request.model, request.constraints, request.measure
    errors = dict(kind_rules.refusals(params, kind, kind_rules.BUILTIN))
    if "engine" in errors:  # a search measures with the built-in engine only
        errors[NON_FIELD_ERRORS] = errors.pop("engine").replace(
            "choose perf_analyzer", "benchmark it with a perf_analyzer sweep instead"
        )
    if request.objective not in objective.OBJECTIVES:
        errors["objective"] = f"The objective must be one of {', '.join(objective.OBJECTIVES)}."
    elif request.objective == Search.Objective.MIN_LATENCY and not c.min_throughput:
        errors["min_throughput"] = "Min latency needs a throughput floor (minimum throughput)."
    elif request.objective == Search.Objective.MAX_RESPONSE_THROUGHPUT and not params.streaming:
        errors["objective"] = (
            f"Max response throughput counts a decoupled model's responses over gRPC "
            f"streams; {name} is {kind.kind} and answers each request once: choose max "
            "throughput."
        )
    elif request.objective == Search.Objective.MAX_GOODPUT and not params.goodput:
        errors["goodput"] = (
            "Max goodput counts the requests that meet the goodput objectives: set them, "
            "e.g. "
            + (
                "time_to_first_token:200 request_latency:500"
                if params.streaming
                else "request_latency:50"
            )
            + " (ms)."
        )
    if c.first_response_budget_ms is not None and not params.streaming:
        errors["first_response_budget"] = (
            f"A first-response budget applies to a decoupled model measured over gRPC "
            f"streams; {name} is {kind.kind} and answers each request once: set the latency "
            "budget instead."
        )
    return errors


def preflight(request: SearchRequest) -> None:
    """SearchRefused (each entry on its field) or SearchError before anything is queued."""
    base, _, _ = saved_config(request.server, request.model)
    errors = refusals(request, kind_of(base))
    if errors:
        raise SearchRefused(errors)
    try:
        request.measure.validate()
        control.check_can_control(request.server)
    except SweepError as exc:
        raise SearchError(str(exc)) from None
    except control.ActionRefused as exc:
        raise SearchError(str(exc)) from None
    if is_ready(request.server, request.model):
        try:
            sweeps.preflight(request.server, request.measure)
        except FlagsRefused as exc:  # the kind Triton serves: checked again, on its flags
            raise SearchRefused(exc.errors) from None
        except SweepError as exc:
            raise SearchError(str(exc)) from None


def create_search(request: SearchRequest, *, user: Any = None, enqueue: bool = True) -> Search:
    """A QUEUED search (its carrier sweep queued on the request's Triton server)."""
    try:
        baseline, runs = plan(request)
    except SpaceError as exc:
        raise SearchError(str(exc)) from None
    preflight(request)
    actor = user if getattr(user, "is_authenticated", False) else None
    params = dataclasses.replace(
        request.measure,
        model=request.model,
        percentile=request.constraints.percentile,
        latency_threshold_ms=request.constraints.latency_budget_ms,
    )
    with transaction.atomic():
        carrier = jobs.create(
            cast(str, Sweep.Kind.SEARCH),
            {
                **sweeps.params_to_json(params),
                "confirm_top": request.confirm_top,
                "confirm_rounds": request.confirm_rounds,
                "budget_auto": request.budget_auto,
            },
            server=request.server,
            user=actor,
            levels_total=runs,
            enqueue=enqueue,
        )
        search = Search.objects.create(
            sweep=carrier,
            model=request.model,
            mode=request.mode,
            objective=request.objective,
            space=request.space.to_json(),
            constraints=request.constraints.to_json(),
            baseline=baseline.to_json(),
            max_runs=request.max_runs,
            was_loaded=is_ready(request.server, request.model),
        )
        carrier.summary = {"recommendation": f"Config search #{search.pk}", "search": search.pk}
        carrier.save(update_fields=["summary"])
    audit.record(
        actor or "system",
        "search.start",
        model_name=request.model,
        server=request.server.name,
        target=f"search #{search.pk}",
        detail=f"{request.mode}, {runs} candidate runs at most, {request.objective}",
        after_sha256=carrier.config_sha256,
    )
    jobs.publish_state(carrier)
    return search
