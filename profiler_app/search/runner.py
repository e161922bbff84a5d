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
   search judges on (`scoring.metrics_of`), and what the run changes in the search (a
   budget taken from the current config's knee, the restore's message) as `search.changed`;
4. GPU memory is read from Triton's metrics (`triton_api.gpus`) when present.

Whatever ends the run (success, cancel, a failure, Triton down), `restore` runs before the
carrier is finished: the saved config.pbtxt is loaded again *as an override* (a plain
load would not re-read files whose timestamps did not change), or the model is unloaded
when it was not loaded before. A worker that dies cannot restore: `restore_pending` (the
watchdog's pass, and the start of each search) restores every finished search whose
restore is still pending.

Around it: `creating` checks and queues a search, `scoring` and `ranking` judge its
candidates, `reading` shows it, `applying` writes the winner.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, cast

from django.conf import settings
from django.db import IntegrityError
from django.db.models import Max
from django.utils import timezone

from registry.triton_clients import connection, get_client
from repository_app import control, events
from repository_app.editor.triton_actions import OPAQUE_REFUSAL, config_override
from repository_app.modelconfig import validate_config
from repository_app.modelconfig.findings import ERROR
from triton_api.client import TritonError

from .. import jobs, sweep_plan, sweeps
from ..engine.loadgen import SweepError, run_sweep
from ..engine.results import LevelResult
from ..models import Search, SearchCandidate, Sweep
from ..params import SweepParams
from . import confirm, defaults, objective, strategies
from .errors import SearchError
from .ranking import summarize
from .reading import candidate_json, running_json
from .scoring import constraints_of, level_json, score_levels, score_of
from .space import Knobs, Space, SpaceError, apply
from .target import gpu_memory_used_bytes, saved_config, server_of

log = logging.getLogger(__name__)

State = Sweep.State
LOAD_MARGIN_S = 30


class _Stop(Exception):
    """Cancelled, or the carrier is no longer ours (declared interrupted)."""


class _Fatal(Exception):
    """The search cannot go on (e.g. Triton unreachable)."""


def time_limits(params: SweepParams, runs: int) -> tuple[int, int]:
    per_run, _ = sweep_plan.time_limits(params)
    soft = runs * (per_run - 120 + LOAD_MARGIN_S) + 2 * int(settings.TRITON_LOAD_TIMEOUT_S) + 120
    return soft, soft + 60


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
        with control.claimed(server, search.model, "reload", f"search #{search.pk}"):
            if search.was_loaded:
                base, _, _ = saved_config(server, search.model)
                client.load(search.model, config=config_override(base))
                message = "the saved config.pbtxt serves again"
            else:
                client.unload(search.model)
                message = "the model is unloaded again, as it was before the search"
    except (TritonError, SearchError, control.ActionRefused) as exc:
        message = f"restoring the saved config failed: {exc}"
        Search.objects.filter(pk=search.pk).update(restore_pending=True, restore_message=message)
        log.warning("search #%s: %s", search.pk, message)
    else:
        Search.objects.filter(pk=search.pk).update(restore_pending=False, restore_message=message)
    publish_changed(search)
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


class _Run:
    def __init__(self, search: Search, heartbeat: jobs.Heartbeat) -> None:
        self.search = search
        self.heartbeat = heartbeat
        self.params = sweeps.params_of(search.sweep)
        carrier = search.sweep.params
        self.confirm_top = int(carrier.get("confirm_top") or 0)
        self.confirm_rounds = int(carrier.get("confirm_rounds") or 0)
        self.budget_auto = bool(carrier.get("budget_auto"))
        self.server = server_of(search)
        self.base, _, _ = saved_config(self.server, search.model)
        self.baseline_key = Knobs.from_json(search.baseline).key
        self.client = get_client(self.server)
        self.who = f"search #{search.pk}"

    def stopping(self) -> bool:
        return self.heartbeat.stopping

    def publish_candidate(self, candidate: SearchCandidate) -> None:
        publish_candidate(self.search, candidate_json(candidate, self.search))

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

    def load(self, config: Any) -> None:
        """Load a candidate's config, holding the model's claim as every load does: an
        action on the model from a page, the API or the CLI meanwhile ends the search
        (resume measures the candidates left)."""
        try:
            with control.claimed(self.server, self.search.model, "reload", self.who):
                self.client.load(self.search.model, config=config_override(config))
        except control.ActionRefused as exc:
            if exc.reason == "unreachable":
                raise _Fatal(f"Triton unreachable while loading a candidate: {exc}") from None
            raise _Fatal(f"loading a candidate refused: {exc}") from None

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
            self.load(config)
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
        publish_changed(self.search)

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
                self.load(config)
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
                publish_candidate(self.search, payload)

        async def main() -> Any:
            return await run_sweep(
                self.params,
                connection(self.server, self.params.protocol),
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


def publish_candidate(search: Search, candidate: dict[str, Any]) -> None:
    """A candidate as the page draws it (`reading.candidate_json`; while it is measured,
    with its levels so far)."""
    events.publish(
        events.sweep_group(search.sweep_id),
        "search.candidate",
        {"search": search.pk, "candidate": candidate},
    )


def publish_result(search: Search, result: dict[str, Any], state: str) -> None:
    """The ranking so far (while running) or at the end: one shape from both places."""
    events.publish(
        events.sweep_group(search.sweep_id),
        "search.result",
        {"search": search.pk, "state": state, "result": result},
    )


def publish_changed(search: Search) -> None:
    """What a run changed in the search (`reading.running_json`: a budget taken from the
    current config's knee, the restore's message), read afresh from its row, so the page
    shows it without reading the whole search again."""
    current = Search.objects.select_related("sweep").filter(pk=search.pk).first()
    if current is None:  # deleted meanwhile: no page shows it
        return
    events.publish(
        events.sweep_group(search.sweep_id),
        "search.changed",
        {"search": search.pk, **running_json(current)},
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
