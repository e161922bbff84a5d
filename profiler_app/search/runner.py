"""Running a config search: one kind of job of the benchmark queue (`profiler_app.jobs`).

Design: a `Search` row owns a job row (`Sweep` of kind "search"). The job is queued,
claimed, heart-beaten, cancelled, interrupted and resumed by the one lifecycle
(`jobs`), like a sweep: so one job runs per Triton server, whether it is a sweep or a
search, in one FIFO queue, and a search holds the server for its whole run. This module
is the kind (`SearchKind`): its time limits, its work, its summary and its events.

A run, candidate by candidate (`_Run.evaluate`):
1. a candidate measured before (a resumed search) is read back, not measured again;
2. the candidate config (the saved config.pbtxt with the knobs applied) is loaded as a
   config override: nothing is written to disk. Triton's refusal marks it failed with
   Triton's reason (plus the validator's first error when Triton gives none);
3. the sweep engine measures it at each concurrency level with the search's flags (one
   entry, `params.from_flags`): a decoupled model over gRPC streams, a sequence model in
   sequences; the levels stream to the carrier's Channels group (`sweep.<id>`) as
   `search.candidate` events, the ranking as `search.result`, in the two metrics the
   search judges on (`metrics_of`);
4. GPU memory is read from Triton's metrics (`repository_app.triton.gpus`) when present.

Whatever ends the run (success, cancel, a failure, Triton down), `restore` runs before the
carrier is finished: the saved config.pbtxt is loaded again *as an override* (a plain
load would not re-read files whose timestamps did not change), or the model is unloaded
when it was not loaded before. A worker that dies cannot restore: `restore_pending` (the
watchdog's pass, and the start of each search) restores every finished search whose
restore is still pending.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import Any, cast

from django.conf import settings
from django.core.exceptions import NON_FIELD_ERRORS
from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from repository_app import control, events
from repository_app.editor import saving
from repository_app.editor.triton_actions import OPAQUE_REFUSAL, config_override
from repository_app.modelconfig import parse_config, validate_config
from repository_app.modelconfig.findings import ERROR
from repository_app.modelconfig.text_edit import CannotEditInPlace, edit_in_place
from repository_app.servers import Server
from repository_app.triton import gpus
from repository_app.triton.client import TritonError, engine_url, get_client
from team import audit

from .. import jobs, kind_rules, measure, repeats, sweeps
from ..engine.loadgen import LevelResult, SweepError, run_sweep
from ..model_kind import ModelKind, kind_of
from ..models import Search, SearchCandidate, Sweep
from ..params import FlagsRefused, SweepParams
from . import confirm, defaults, objective, strategies
from .space import Knobs, Space, SpaceError, apply, diff, knobs_of

log = logging.getLogger(__name__)

State = Sweep.State
LOAD_MARGIN_S = 30


class SearchError(Exception):
    """The search cannot be created or changed; the message is fit to show a user."""


class SearchRefused(SearchError):
    """Entries that do not fit the model (its kind) or each other: `errors` maps each
    entry's field name (a form field, or a flag) to why."""

    def __init__(self, errors: dict[str, str]) -> None:
        super().__init__("; ".join(errors.values()))
        self.errors = errors


class _Stop(Exception):
    """Cancelled, or the carrier is no longer ours (declared interrupted)."""


class _Fatal(Exception):
    """The search cannot go on (e.g. Triton unreachable)."""


# --- reading the model ------------------------------------------------------------------------


def saved_config(server: Server, model: str) -> tuple[Any, str, str]:
    """(ModelConfig, text, sha256) of config.pbtxt in the server's repository; SearchError
    when unusable."""
    try:
        current = saving.read_current(model, server)
    except Exception as exc:  # noqa: BLE001 - RepositoryError / SaveError: both mean "no"
        raise SearchError(str(exc)) from None
    if not current.exists:
        raise SearchError(f"model {model!r} has no config.pbtxt to search from")
    parsed = parse_config(current.data)
    if parsed.config is None:
        first = parsed.findings[0].message if parsed.findings else "it does not parse"
        raise SearchError(f"config.pbtxt of {model!r} does not parse: {first}")
    return parsed.config, current.text, current.sha256


def is_ready(server: Server, model: str) -> bool:
    try:
        return any(s.state == "READY" for s in get_client(server).model_states(model))
    except TritonError:
        return False


def has_gpus(server: Server) -> bool:
    """Whether the server's metrics show any GPU; False when they cannot be read."""
    try:
        return gpus.has_gpus(get_client(server).metrics())
    except TritonError:
        return False


def gpu_memory_used_bytes(server: Server) -> float | None:
    """GPU memory used, summed over the GPUs; None where Triton reports none."""
    try:
        return gpus.memory_used_bytes(get_client(server).metrics())
    except TritonError:
        return None


def server_of(search: Search) -> Server:
    """The server the search runs on; SearchError when it was removed meanwhile."""
    try:
        return jobs.server_of(search.sweep)
    except jobs.JobError as exc:
        raise SearchError(str(exc)) from None


# --- creating ---------------------------------------------------------------------------------


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


def time_limits(params: SweepParams, runs: int) -> tuple[int, int]:
    per_run, _ = sweeps.time_limits(params)
    soft = runs * (per_run - 120 + LOAD_MARGIN_S) + 2 * int(settings.TRITON_LOAD_TIMEOUT_S) + 120
    return soft, soft + 60


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


# --- user actions -----------------------------------------------------------------------------


def cancel(search: Search) -> str:
    try:
        return jobs.cancel(search.sweep_id)
    except jobs.JobError as exc:
        raise SearchError(str(exc)) from None


def resume(search: Search) -> str:
    try:
        jobs.resume(search.sweep_id)
    except jobs.JobError as exc:
        raise SearchError(str(exc)) from None
    return f"Search #{search.pk} queued again: it skips the candidates already measured."


# --- restoring --------------------------------------------------------------------------------


def restore(search: Search) -> str:
    """Put the model back as it was before the search; returns what was done."""
    try:
        server = server_of(search)
        client = get_client(server)
        if search.was_loaded:
            base, _, _ = saved_config(server, search.model)
            client.load(search.model, config=config_override(base))
            message = "the saved config.pbtxt serves again"
        else:
            client.unload(search.model)
            message = "the model is unloaded again, as it was before the search"
    except (TritonError, SearchError) as exc:
        message = f"restoring the saved config failed: {exc}"
        Search.objects.filter(pk=search.pk).update(restore_pending=True, restore_message=message)
        log.warning("search #%s: %s", search.pk, message)
        return message
    Search.objects.filter(pk=search.pk).update(restore_pending=False, restore_message=message)
    return message


def restore_pending() -> list[int]:
    """Restore finished searches whose restore is pending (their worker died)."""
    done = []
    pending = Search.objects.filter(restore_pending=True, sweep__state__in=Sweep.FINISHED)
    for search in pending:
        # Claim the restore (any number of watchdogs may run this at once).
        if Search.objects.filter(pk=search.pk, restore_pending=True).update(restore_pending=False):
            restore(search)
            done.append(search.pk)
    return done


# --- running ----------------------------------------------------------------------------------


def level_json(lv: LevelResult) -> dict[str, Any]:
    """A measured level as a candidate stores it (`measure.search_json`)."""
    return measure.search_json(lv.measured())


def constraints_of(search: Search) -> objective.Constraints:
    return objective.Constraints.from_json(search.constraints)


def metrics_of(search: Search) -> objective.Metrics:
    """The two metrics the search judges candidates on (`objective.metrics_for`): from its
    objective and what its measurement streams (a search stored before streaming ones
    existed has no such flag: infer/s and the request latency, as before)."""
    params = search.sweep.params if search.sweep_id else {}
    return objective.metrics_for(
        search.objective,
        constraints_of(search),
        streaming=bool(params.get("streaming")),
        tokens=bool(params.get("token_output")),
    )


def effective_levels(candidate: SearchCandidate) -> list[dict[str, Any]]:
    """What a candidate is judged on: the medians of its re-measurements when it has at
    least two, else its one measurement."""
    rounds = candidate.rounds or []
    if len(confirm.good_rounds(rounds)) >= 2:
        return confirm.median_levels(rounds)
    return list(candidate.levels)


def score_of(candidate: SearchCandidate, search: Search) -> objective.Score | None:
    if candidate.state != SearchCandidate.State.MEASURED:
        return None
    return score_levels(effective_levels(candidate), search, candidate.gpu_memory_bytes)


def spread_of(candidate: SearchCandidate, search: Search) -> repeats.Spread | None:
    """The candidate's objective over its re-measurement rounds (None without two)."""
    if candidate.state != SearchCandidate.State.MEASURED:
        return None
    return confirm.objective_spread(
        candidate.rounds or [],
        lambda levels: score_levels(levels, search, candidate.gpu_memory_bytes),
    )


def score_levels(
    levels: list[dict[str, Any]], search: Search, gpu_memory_bytes: float | None = None
) -> objective.Score | None:
    """The search's objective for measured levels (`level_json` rows, or older ones that
    say `concurrency` only), in its metrics."""
    c, m = constraints_of(search), metrics_of(search)
    points = (m.point(measure.Level.from_json(lv), c) for lv in levels)
    usable = [p for p in points if p is not None]
    memory_mb = gpu_memory_bytes / 2**20 if gpu_memory_bytes else None
    return objective.score(usable, c, search.objective, memory_mb, m)


def candidate_json(candidate: SearchCandidate, search: Search) -> dict[str, Any]:
    knobs = Knobs.from_json(candidate.knobs)
    baseline = Knobs.from_json(search.baseline)
    return {
        "key": candidate.key,
        "seq": candidate.seq,
        "baseline": candidate.baseline,
        "state": candidate.state,
        "knobs": candidate.knobs,
        "description": knobs.describe(),
        "diff": diff(baseline, knobs),
        "levels": candidate.levels,
        "rounds": candidate.rounds or [],
        # The levels it is judged on (medians of its rounds when re-measured).
        "effective_levels": effective_levels(candidate),
        "gpu_memory_bytes": candidate.gpu_memory_bytes,
        "error": candidate.error,
    }


def constraints_text(c: objective.Constraints) -> str:
    """'p95 ≤ 15 ms, throughput ≥ 500 infer/s', or 'none'."""
    parts = [
        f"{c.latency_label} ≤ {c.latency_budget_ms:g} ms" if c.latency_budget_ms else "",
        f"{c.first_response_label} ≤ {c.first_response_budget_ms:g} ms"
        if c.first_response_budget_ms
        else "",
        f"throughput ≥ {c.min_throughput:g} infer/s" if c.min_throughput else "",
        f"GPU memory ≤ {c.gpu_memory_limit_mb:g} MB" if c.gpu_memory_limit_mb else "",
    ]
    return ", ".join(p for p in parts if p) or "none"


def measured_how(params: dict[str, Any], baseline: Knobs) -> str:
    """How each candidate is measured beyond the load, from the stored parameters: 'over
    gRPC streams (goodput objectives first_response:200 ms)', 'in sequences of 20 requests
    ± 20%', or '' for plain requests."""
    if params.get("streaming"):
        parts = [
            f"tokens: elements of {params['token_output']}" if params.get("token_output") else "",
            f"goodput objectives {params['goodput']} ms" if params.get("goodput") else "",
        ]
        extra = "; ".join(p for p in parts if p)
        return "over gRPC streams" + (f" ({extra})" if extra else "")
    goodput = f"goodput objectives {params['goodput']} ms" if params.get("goodput") else ""
    if baseline.sequence:
        ids = params.get("sequence_id_range") or ""
        text = (
            f"in sequences of {params.get('sequence_length', 20)} requests "
            f"± {float(params.get('sequence_length_variation', 20)):g}%"
            + (f", ids {ids}" if ids else "")
        )
        return text + (f" ({goodput})" if goodput else "")
    return goodput


def _median_text(
    spread: repeats.Spread | None, objective_name: str, metrics: objective.Metrics
) -> str:
    if spread is None:
        return ""
    metric = metrics.latency if objective_name in objective.MINIMISE else metrics.throughput
    return f"{metric.text(spread.median)} {confirm.spread_text(spread)}".strip()


def summarize(search: Search) -> dict[str, Any]:
    """The ranked table, the Pareto front and the one-sentence recommendation.

    Candidates re-measured side by side (confirm.py) rank first, on the medians of their
    rounds; the others follow on their one measurement. Re-measured candidates whose
    objective ranges overlap the best one's are tied with it; a current config tied with
    the best is the recommendation (keep it)."""
    c, m = constraints_of(search), metrics_of(search)
    candidates = list(search.candidates.all())
    scored = {cand.key: score_of(cand, search) for cand in candidates}
    spreads = {cand.key: spread_of(cand, search) for cand in candidates}
    re_measured = [cand for cand in candidates if len(confirm.good_rounds(cand.rounds or [])) >= 2]
    others = [cand for cand in candidates if cand not in re_measured]
    ranked = objective.rank([(cand, scored[cand.key]) for cand in re_measured]) + objective.rank(
        [(cand, scored[cand.key]) for cand in others]
    )
    best_cand, best_score = ranked[0] if ranked else (None, None)
    best_spread = spreads.get(best_cand.key) if best_cand is not None else None

    def tied(cand: SearchCandidate) -> bool:
        mine = spreads.get(cand.key)
        if best_cand is None or cand is best_cand or mine is None or best_spread is None:
            return False
        s = scored[cand.key]
        return bool(s and s.feasible) and mine.overlaps(best_spread)

    rows = []
    for position, (cand, s) in enumerate(ranked, start=1):
        level = s.level if s else None
        spread = spreads.get(cand.key)
        rows.append(
            {
                "rank": position,
                "key": cand.key,
                "seq": cand.seq,
                "baseline": cand.baseline,
                "state": cand.state,
                "description": Knobs.from_json(cand.knobs).describe(),
                "diff": diff(Knobs.from_json(search.baseline), Knobs.from_json(cand.knobs)),
                "feasible": bool(s and s.feasible),
                "objective": s.objective if s else None,
                "concurrency": level.concurrency if level else None,
                # The two metrics the search judges on (search_json's "metrics" names them),
                # and infer/s where the first is another.
                "throughput": level.throughput if level else None,
                "latency_us": level.latency_us if level else None,
                "infer_per_s": objective.figure(level, "throughput", m) if level else None,
                "gpu_memory_bytes": cand.gpu_memory_bytes,
                "reason": (s.reason if s else cand.error) or "",
                "rounds": len(confirm.good_rounds(cand.rounds or [])),
                "spread": spread.to_json() if spread else None,
                "spread_text": confirm.spread_text(spread),
                "tied": tied(cand),
            }
        )
    front = pareto_points(candidates, c, m)
    baseline_cand = next((cand for cand in candidates if cand.baseline), None)
    baseline_score = score_of(baseline_cand, search) if baseline_cand else None
    ties = [cand for cand in candidates if tied(cand)]
    if best_cand is None or best_score is None:
        sentence = "No candidate has been measured yet."
        if candidates and all(cand.state == SearchCandidate.State.FAILED for cand in candidates):
            sentence = "No candidate could be measured: " + (candidates[0].error or "failed")
        best_key = None
    elif not best_score.feasible:
        sentence = (
            f"No candidate meets the constraints; the nearest is "
            f"{Knobs.from_json(best_cand.knobs).describe()} ({best_score.reason})."
        )
        best_key = None
    elif best_cand.baseline:
        assert best_score.level is not None
        sentence = (
            f"The current config ({Knobs.from_json(best_cand.knobs).describe()}) is already "
            f"the best: {m.throughput.text(best_score.level.throughput)} at {m.latency.label} "
            f"{m.latency.text(best_score.level.latency_us)}."
        )
        best_key = best_cand.key
    elif baseline_cand is not None and baseline_cand in ties:
        # No change is better than a change within noise.
        sentence = (
            f"The current config ({Knobs.from_json(baseline_cand.knobs).describe()}) is as "
            f"good as the best candidate within noise: "
            f"{_median_text(spreads[baseline_cand.key], search.objective, m)} against "
            f"{_median_text(best_spread, search.objective, m)} for "
            f"{Knobs.from_json(best_cand.knobs).describe()}; keep it."
        )
        best_cand, best_key = baseline_cand, baseline_cand.key
        ties = []
    else:
        sentence = objective.gain_sentence(
            Knobs.from_json(best_cand.knobs).describe(),
            best_score,
            baseline_score,
            c,
            search.objective,
            m,
        )
        best_key = best_cand.key
    if best_key is not None and best_spread is not None and best_cand is ranked[0][0]:
        half = best_spread.half_range or 0.0
        sentence = (
            sentence.rstrip(".") + f" (median of {best_spread.rounds} rounds, ± {half * 100:.0f}%)."
        )
    if best_key is not None and ties:
        names = "; ".join(f"#{t.seq} {Knobs.from_json(t.knobs).describe()}" for t in ties)
        sentence += f" Tied with it within noise: {names}."
    best_row = next((r for r in rows if r["key"] == best_key), None)
    if best_row is not None and best_key != (ranked[0][0].key if ranked else None):
        best_row["recommended"] = True
    return {
        "rows": rows,
        # The Pareto front, computed here only: [key, concurrency] pairs, and the points the
        # page and the report draw (sorted by latency).
        "front": [[p["key"], p["concurrency"]] for p in front],
        "front_points": front,
        "best_key": best_key,
        # The one operating point the chart marks "best": the candidate and concurrency.
        "best_point": [best_key, best_row["concurrency"]] if best_row else None,
        "recommendation": sentence,
        "re_measured": len(re_measured),
        "runs": sum(1 for cand in candidates if cand.state != SearchCandidate.State.MEASURING),
    }


def pareto_points(
    candidates: list[SearchCandidate], c: objective.Constraints, m: objective.Metrics
) -> list[dict[str, Any]]:
    """The measured levels on the Pareto front of the search's two metrics (each candidate
    at the levels it is judged on), sorted by latency, with what a chart labels them with."""
    points = []
    for cand in candidates:
        if cand.state != SearchCandidate.State.MEASURED:
            continue
        for row in effective_levels(cand):
            lv = measure.Level.from_json(row)
            p = m.point(lv, c)
            if p is not None and lv.throughput > 0 and p.throughput > 0:
                points.append(
                    objective.Point(p.throughput, p.latency_us, (cand, lv, row.get("rounds")))
                )
    return [
        {
            "key": cand.key,
            "seq": cand.seq,
            "baseline": cand.baseline,
            "description": Knobs.from_json(cand.knobs).describe(),
            "concurrency": lv.level,
            "throughput": p.throughput,
            "latency_us": p.latency_us,
            "rounds": rounds,
        }
        for p in objective.pareto_front(points)
        for cand, lv, rounds in [p.payload]
    ]


class _Run:
    def __init__(self, search: Search, heartbeat: jobs.Heartbeat) -> None:
        self.search = search
        self.heartbeat = heartbeat
        self.params = sweeps.params_of(search.sweep)
        carrier = search.sweep.params
        self.confirm_top = int(carrier.get("confirm_top") or 0)
        self.confirm_rounds = int(carrier.get("confirm_rounds") or 0)
        self.budget_auto = bool(carrier.get("budget_auto"))
        self.group = search.sweep.group
        self.server = server_of(search)
        self.base, _, _ = saved_config(self.server, search.model)
        self.baseline_key = Knobs.from_json(search.baseline).key
        self.client = get_client(self.server)

    def stopping(self) -> bool:
        return self.heartbeat.stopping

    def publish(self, kind: str, payload: dict[str, Any]) -> None:
        events.publish(self.group, kind, {"search": self.search.pk, **payload})

    def publish_candidate(self, candidate: SearchCandidate) -> None:
        self.publish("search.candidate", {"candidate": candidate_json(candidate, self.search)})

    def publish_result(self) -> None:
        result = summarize(self.search)
        Search.objects.filter(pk=self.search.pk).update(result=result)
        publish_result(self.search, result, cast(str, State.RUNNING))

    def _row(self, knobs: Knobs) -> SearchCandidate:
        candidate = SearchCandidate.objects.filter(search=self.search, key=knobs.key).first()
        if candidate is None:
            seq = (self.search.candidates.aggregate(m=Max("seq"))["m"] or 0) + 1
            try:
                candidate = SearchCandidate.objects.create(
                    search=self.search,
                    key=knobs.key,
                    seq=seq,
                    knobs=knobs.to_json(),
                    baseline=knobs.key == self.baseline_key,
                )
            except IntegrityError:  # pragma: no cover - one runner per search
                candidate = SearchCandidate.objects.get(search=self.search, key=knobs.key)
        return candidate

    def evaluate(self, knobs: Knobs) -> objective.Score | None:
        if self.stopping():
            raise _Stop
        candidate = self._row(knobs)
        if candidate.state != SearchCandidate.State.MEASURING:
            return score_of(candidate, self.search)  # measured before this resume
        candidate.levels, candidate.error = [], ""
        candidate.save(update_fields=["levels", "error"])
        self.publish_candidate(candidate)
        config = apply(self.base, knobs)
        try:
            self.client.load(self.search.model, config=config_override(config))
        except TritonError as exc:
            if exc.unreachable:
                raise _Fatal(f"Triton unreachable while loading a candidate: {exc}") from None
            self._failed(candidate, self._refusal(exc.message, config))
            return None
        levels, result_error = self._measure(candidate)
        if result_error:
            self._failed(candidate, result_error, levels)
            return None
        candidate.levels = levels
        candidate.gpu_memory_bytes = gpu_memory_used_bytes(self.server)
        candidate.state = SearchCandidate.State.MEASURED
        candidate.measured_at = timezone.now()
        candidate.save()
        if candidate.baseline:
            self._set_auto_budget(candidate)
        self.publish_candidate(candidate)
        self.publish_result()
        return score_of(candidate, self.search)

    def _set_auto_budget(self, candidate: SearchCandidate) -> None:
        """No budget was given: twice the current config's latency at its knee (for a
        search over streams, its time to the first response: the latency it is judged on)."""
        c = constraints_of(self.search)
        streaming = self.params.streaming
        field, key, label = (
            ("first_response_budget_ms", c.first_response_key, c.first_response_label)
            if streaming
            else ("latency_budget_ms", c.latency_key, c.latency_label)
        )
        if not self.budget_auto or getattr(c, field) is not None:
            return
        found = defaults.auto_budget(candidate.levels, key)
        if found is None:
            return
        budget, knee = found
        constraints = {
            **self.search.constraints,
            field: budget,
            "budget_from": f"twice the current config's {label} at concurrency {knee:g}, its knee",
        }
        Search.objects.filter(pk=self.search.pk).update(constraints=constraints)
        self.search.constraints = constraints

    def confirm(self) -> None:
        """Re-measure the top candidates and the current config side by side, in
        alternating rounds (confirm.order); rounds measured before (a resume) are kept."""
        if self.confirm_top < 1 or self.confirm_rounds < 2:
            return
        measured = [
            c for c in self.search.candidates.all() if c.state == SearchCandidate.State.MEASURED
        ]
        # The best others, chosen on their first measurement (so a resumed search picks the
        # same ones), and the current config: the reference every gain is stated against.
        first = [
            (c, score_levels(c.levels, self.search, c.gpu_memory_bytes))
            for c in measured
            if not c.baseline
        ]
        chosen = [c for c, s in objective.rank(first) if s is not None][: self.confirm_top]
        chosen += [c for c in measured if c.baseline]
        if len(chosen) < 2:
            return
        for round_no, key in confirm.order([c.key for c in chosen], self.confirm_rounds):
            if self.stopping():
                raise _Stop
            candidate = SearchCandidate.objects.get(search=self.search, key=key)
            if any(r.get("round") == round_no for r in candidate.rounds or []):
                continue
            record: dict[str, Any] = {"round": round_no}
            config = apply(self.base, Knobs.from_json(candidate.knobs))
            try:
                self.client.load(self.search.model, config=config_override(config))
            except TritonError as exc:
                if exc.unreachable:
                    raise _Fatal(f"Triton unreachable while re-measuring: {exc}") from None
                record["error"] = exc.message
            else:
                levels, error = self._measure(candidate, live=False)
                record.update(levels=levels, gpu_memory_bytes=gpu_memory_used_bytes(self.server))
                if error:
                    record["error"] = error
            candidate.rounds = [*(candidate.rounds or []), record]
            candidate.save(update_fields=["rounds"])
            self.publish_candidate(candidate)
            self.publish_result()

    def _refusal(self, message: str, config: Any) -> str:
        if OPAQUE_REFUSAL not in message:
            return message
        errors = [
            f for f in validate_config(config, folder_name=self.search.model) if f.severity == ERROR
        ]
        return f"{message} ({errors[0].message})" if errors else message

    def _failed(
        self, candidate: SearchCandidate, error: str, levels: list[dict[str, Any]] | None = None
    ) -> None:
        candidate.state = SearchCandidate.State.FAILED
        candidate.error = error
        candidate.levels = levels or []
        candidate.measured_at = timezone.now()
        candidate.save()
        self.publish_candidate(candidate)
        self.publish_result()
        return None

    def _measure(
        self, candidate: SearchCandidate, live: bool = True
    ) -> tuple[list[dict[str, Any]], str]:
        levels: list[dict[str, Any]] = []
        payload = candidate_json(candidate, self.search)

        def on_level(lv: LevelResult) -> None:
            levels.append(level_json(lv))
            if live:  # a re-measurement is published as a round, once it is complete
                payload["levels"] = list(levels)
                self.publish("search.candidate", {"candidate": payload})

        async def main() -> Any:
            return await run_sweep(
                self.params,
                engine_url(self.server, self.params.protocol),
                on_level=on_level,
                should_cancel=self.stopping,
            )

        try:
            result = asyncio.run(main())
        except SweepError as exc:
            if self.stopping():
                raise _Stop from None
            return levels, str(exc)
        except Exception:
            # The engine fails when cancelled before its first window ends (no window to
            # merge): a stop, not an error.
            if self.stopping():
                raise _Stop from None
            raise
        if result.cancelled or self.stopping():
            raise _Stop
        failed = [lv for lv in result.levels if lv.errors]
        if failed:
            first = next((m for w in failed[0].windows for m in w.error_messages), "no message")
            return (
                levels,
                f"{failed[0].errors} request(s) failed at concurrency {failed[0].level:g}: {first}",
            )
        return levels, ""


def run_search(job: Sweep, heartbeat: jobs.Heartbeat) -> jobs.Outcome:
    """The work of a claimed search (the lifecycle around it is `jobs`'); the model is
    restored whatever happens."""
    restore_pending()  # what an earlier search's dead worker left
    search = Search.objects.select_related("sweep").get(sweep_id=job.pk)
    Search.objects.filter(pk=search.pk).update(restore_pending=True, restore_message="")
    try:
        if not search.environment:
            search.environment = defaults.server_environment(server_of(search))
            Search.objects.filter(pk=search.pk).update(environment=search.environment)
        run = _Run(search, heartbeat)
        baseline = Knobs.from_json(search.baseline)
        dims = Space.from_json(search.space).dimensions(baseline)
        if search.mode == Search.Mode.GRID:
            strategies.grid(dims, baseline, run.evaluate)
        else:
            strategies.hill_climb(dims, baseline, run.evaluate, max_runs=search.max_runs)
        run.confirm()
    except _Stop:
        return jobs.Outcome(State.CANCELLED)
    except (_Fatal, SearchError, SpaceError) as exc:
        return jobs.Outcome(State.FAILED, str(exc))
    finally:
        restore(search)
    result = summarize(search)
    if result["best_key"] is None and not result["rows"]:
        return jobs.Outcome(State.FAILED, "no candidate was measured")
    if all(r["state"] == "failed" for r in result["rows"]):
        return jobs.Outcome(State.FAILED, result["recommendation"])
    return jobs.Outcome(State.SUCCEEDED)


def publish_result(search: Search, result: dict[str, Any], state: str) -> None:
    """The ranking so far (while running) or at the end: one shape from both places."""
    events.publish(
        events.sweep_group(search.sweep_id),
        "search.result",
        {"search": search.pk, "state": state, "result": result},
    )


class SearchKind:
    """A config search as a kind of job (`profiler_app.jobs`)."""

    name = cast(str, Sweep.Kind.SEARCH)
    noun = "search"

    def time_limits(self, job: Sweep) -> tuple[int, int]:
        return time_limits(sweeps.params_of(job), max(1, job.levels_total))

    def run(self, job: Sweep, heartbeat: jobs.Heartbeat) -> jobs.Outcome:
        return run_search(job, heartbeat)

    def summary(self, job: Sweep) -> dict[str, Any]:
        """The ranking goes to the search's row; the job keeps the recommendation."""
        search = Search.objects.get(sweep_id=job.pk)
        result = summarize(search)
        Search.objects.filter(pk=search.pk).update(result=result)
        return {"recommendation": result["recommendation"], "search": search.pk}

    def ended(self, job: Sweep, *, by_worker: bool) -> None:
        search = Search.objects.get(sweep_id=job.pk)
        # One cancelled while queued has no result yet.
        publish_result(search, search.result or summarize(search), job.state)

    def tidy(self) -> None:
        restore_pending()


jobs.register(SearchKind())


# --- reading ----------------------------------------------------------------------------------


def search_json(search: Search) -> dict[str, Any]:
    carrier = search.sweep
    return {
        "id": search.pk,
        "sweep": carrier.pk,
        "server": carrier.server,
        "model": search.model,
        "mode": search.mode,
        "objective": search.objective,
        **jobs.lifecycle_json(carrier),
        "planned_runs": carrier.levels_total,
        "space": search.space,
        "constraints": search.constraints,
        "measure": {
            k: carrier.params.get(k)
            for k in (
                "start",
                "end",
                "step",
                "measurement_window_ms",
                "max_windows",
                "stability_percentage",
                "percentile",
                "streaming",
                "goodput",
                "token_output",
                "sequence_length",
                "sequence_length_variation",
                "sequence_id_range",
            )
        },
        "range_text": carrier.range_text,
        # What candidates are judged on, named for axes, columns and sentences.
        "metrics": metrics_of(search).to_json(),
        "measured_how": measured_how(carrier.params, Knobs.from_json(search.baseline)),
        "constraints_text": constraints_text(constraints_of(search)),
        "budget_from": search.constraints.get("budget_from", ""),
        "confirm": {
            "top": int(carrier.params.get("confirm_top") or 0),
            "rounds": int(carrier.params.get("confirm_rounds") or 0),
        },
        "environment": search.environment,
        "baseline": search.baseline,
        "baseline_description": Knobs.from_json(search.baseline).describe(),
        "was_loaded": search.was_loaded,
        "restore_pending": search.restore_pending,
        "restore_message": search.restore_message,
        "applied_key": search.applied_key,
        "created_at": search.created_at.isoformat() if search.created_at else None,
    }


def snapshot(search_id: int) -> dict[str, Any] | None:
    """The search, its candidates and ranking, and the group's seq (read first)."""
    search = (
        Search.objects.select_related("sweep", "sweep__created_by").filter(pk=search_id).first()
    )
    if search is None:
        return None
    seq = events.current_seq(search.sweep.group)
    candidates = [candidate_json(c, search) for c in search.candidates.all()]
    return {
        "group": search.sweep.group,
        "seq": seq,
        "search": search_json(search),
        "candidates": candidates,
        "result": summarize(search),
    }


def candidate_config_text(search: Search, key: str) -> str:
    """The candidate as config.pbtxt text: the saved file with its knobs applied in place
    (what Apply would write); SearchError when that cannot be done in place."""
    candidate = SearchCandidate.objects.get(search=search, key=key)
    base, text, _ = saved_config(server_of(search), search.model)
    return _in_place(text, apply(base, Knobs.from_json(candidate.knobs)))


def _in_place(text: str, config: Any) -> str:
    """``text`` with the candidate's knobs written in place: Apply changes the lines of the
    knobs and nothing else (comments and layout stay); it refuses instead of rewriting."""
    try:
        return edit_in_place(text, config)
    except CannotEditInPlace as exc:
        raise SearchError(
            f"the candidate cannot be written into config.pbtxt in place ({exc.reason}); "
            "nothing was changed: make the change in the config editor"
        ) from None


# --- applying the winner ----------------------------------------------------------------------


def apply_candidate(search: Search, key: str, user: Any) -> str:
    """Write the candidate through the editor's save path and reload the model."""
    if search.sweep.state in (State.QUEUED, State.RUNNING):
        raise SearchError("wait for the search to finish before applying a candidate")
    candidate = SearchCandidate.objects.filter(search=search, key=key).first()
    if candidate is None or candidate.state != SearchCandidate.State.MEASURED:
        raise SearchError("only a measured candidate can be applied")
    knobs = Knobs.from_json(candidate.knobs)
    server = server_of(search)
    base, current_text, sha = saved_config(server, search.model)
    text = _in_place(current_text, apply(base, knobs))
    try:
        saved = saving.save_config(
            search.model,
            text,
            server=server,
            base_sha256=sha,
            author_id=user.pk if getattr(user, "pk", None) else None,
            # TextChoices members are str; untyped Django shows mypy a (value, label) tuple.
            source=cast(str, saving.Source.FORM),
            message=f"config search #{search.pk}: {knobs.describe()}",
        )
    except saving.InvalidConfig as exc:
        raise SearchError(f"the validator refused it: {exc.findings[0].message}") from None
    except saving.CodeChangeRefused as exc:
        raise SearchError(exc.message) from None
    except saving.SaveConflict:
        raise SearchError("config.pbtxt changed while saving: try again") from None
    except saving.SaveError as exc:
        raise SearchError(exc.message) from None
    Search.objects.filter(pk=search.pk).update(applied_key=key, applied_at=timezone.now())
    audit.record(
        user,
        "search.apply",
        model_name=search.model,
        server=server.name,
        target=f"search #{search.pk}",
        detail=knobs.describe(),
    )
    if not saved.changed:
        return "config.pbtxt already holds this config: nothing to save."
    username = user.get_username() if hasattr(user, "get_username") else str(user)
    try:
        outcome = control.act(
            server,
            "reload" if is_ready(server, search.model) else "load",
            search.model,
            username,
            user_id=getattr(user, "pk", None),
        )
    except control.ActionRefused as exc:
        revision = saved.revision.number if saved.revision else "?"
        return f"Saved as revision #{revision}, but not reloaded: {exc}"
    revision = saved.revision.number if saved.revision else "?"
    if outcome.ok:
        return f"Saved as revision #{revision} and {outcome.message}."
    return f"Saved as revision #{revision}, but the reload failed: {outcome.message}"
