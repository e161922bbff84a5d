"""Perf sweeps as the Benchmark form, the REST API and `manage.py perf_sweep` start them,
all three through `start_sweep`: check the flags, check what can be checked before queueing
(`preflight`), create the job and send it (`create_sweep`); re-run a sweep, label it. One
kind of job: `jobs` owns the queue, claim, heartbeat, cancel, resume and finish;
`sweep_run` measures a claimed sweep, `sweep_recorder` stores what it measures, `sweep_read`
reads it back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, cast

from django.db import transaction

from registry.servers import Server
from registry.triton_clients import get_client
from repository_app.naming import InvalidModelName, check_model_name
from triton_api.client import TritonError

from . import jobs, kind_rules, llm
from .engine import composing
from .engine.inputs import InputError, build_payloads, input_specs, max_batch_size
from .engine.loadgen import SweepError
from .model_kind import ModelKind, kind_of_served
from .models import Sweep
from .params import FlagsRefused, ParamsError, SweepParams, from_flags, refusal
from .sweep_plan import params_of

PRESETS: dict[str, dict[str, Any]] = {
    "default": {"range": "1:8:1", "measurement_interval": 2000, "max_trials": 10},
    "quick": {"range": "1:4:1", "measurement_interval": 1000, "max_trials": 5},
    "thorough": {"range": "1:16:1", "measurement_interval": 5000, "max_trials": 20},
}


def params_to_json(params: SweepParams) -> dict[str, Any]:
    return dataclasses.asdict(params)


# TextChoices members are str; untyped Django shows mypy a (value, label) tuple.
_BUILTIN = cast(str, Sweep.Engine.BUILTIN)


def preflight(server: Server, params: SweepParams, engine: str = _BUILTIN) -> ModelKind:
    """Check what can be checked before queueing on ``server``; raises SweepError with a
    user message. The bounds (range, levels, window) come first: nothing is built before
    they pass. Returns the model's kind, from the config Triton serves (a sweep stores its
    label)."""
    try:
        check_model_name(params.model)  # the model name rule (repository_app.naming)
    except InvalidModelName as exc:
        raise SweepError(str(exc)) from None
    params.validate()
    if engine == Sweep.Engine.PERF_ANALYZER:
        from .engine.perf_analyzer_command import PerfAnalyzerNotFound, locate_perf_analyzer

        try:
            locate_perf_analyzer()
        except PerfAnalyzerNotFound as exc:
            raise SweepError(str(exc)) from None
    client = get_client(server)
    try:
        states = client.model_states(params.model)
    except TritonError as exc:
        raise SweepError(f"cannot reach Triton: {exc.message}") from None
    wanted = [s for s in states if not params.version or s.version == params.version]
    if not any(s.state == "READY" for s in wanted):
        seen = ", ".join(f"v{s.version} {s.state}" for s in wanted) or "not loaded"
        which = f" version {params.version}" if params.version else ""
        raise SweepError(
            f"model {params.model!r}{which} is not READY on Triton ({seen}): load it first"
        )
    try:
        metadata = client.model_metadata(params.model, params.version)
        config = client.model_config(params.model, params.version)
    except TritonError as exc:
        raise SweepError(f"model {params.model!r}: {exc.message}") from None
    kind = kind_of_served(config)
    refused = {
        **llm.refusals(params, metadata, engine),  # token output, goodput: model and engine
        **kind_rules.refusals(params, kind, engine),
    }
    if refused:  # flags that do not fit the model's kind, each on its own
        raise FlagsRefused(refused)
    try:  # a BLS model's calls reach perf_analyzer's command line
        composing.check_names(params.model, [composing.Composing(c) for c in kind.calls])
    except composing.StepError as exc:
        raise SweepError(str(exc)) from None
    mbs = max_batch_size(config)
    if mbs and params.batch_size > mbs:
        raise SweepError(f"batch size {params.batch_size} exceeds the model's max_batch_size {mbs}")
    try:
        build_payloads(
            input_specs(metadata, config),
            batch_size=params.batch_size,
            batching=mbs > 0,
            shapes=params.shapes,
            data=params.input_data,
            seed=params.seed,
        )
    except InputError as exc:
        raise SweepError(f"inputs: {exc}") from None
    return kind


# --- starting: the one path of the Benchmark form, the API and the command line --------------


class SweepRefused(ParamsError):
    """Why a sweep was not started, on the fields it is about: `errors` maps each refused
    flag (or "engine", or a field of the caller's own, or NON_FIELD_ERRORS) to its message,
    as ParamsError's. `sentence` is the preflight's own words where the refusal is about the
    model, its inputs or Triton rather than about flags ("" otherwise): a command line says
    that as it is."""

    def __init__(
        self,
        errors: Mapping[str, str],
        subjects: Mapping[str, str] | None = None,
        *,
        sentence: str = "",
    ) -> None:
        super().__init__(errors, subjects)
        self.sentence = sentence


def start_sweep(
    server: Server,
    flags: Mapping[str, Any] | SweepParams,
    user: Any = None,
    *,
    engine: str = _BUILTIN,
    name: str = "",
    note: str = "",
    enqueue: bool = True,
    refused: Mapping[str, str] | None = None,
) -> Sweep:
    """Start a sweep of ``flags`` (perf_analyzer's, "model" among them, read by
    `params.from_flags`; or the SweepParams a form already read from them) on ``server`` as
    ``user``: the flags and the engine are checked, then the preflight, then the sweep is
    created, audited and its task sent (`enqueue`; the command line runs it itself).

    `refused` holds refusals the caller found in fields of its own (the API's name and
    note): they come back with the flags' in one SweepRefused, and nothing is asked of
    Triton while there are any. Raises SweepRefused, or jobs.QueueUnavailable with nothing
    stored. The caller has checked that ``user`` may run sweeps on ``server``."""
    errors: dict[str, str] = {}
    subjects: dict[str, str] = {}
    params = flags if isinstance(flags, SweepParams) else None
    if params is None:
        try:
            params = from_flags(cast(Mapping[str, Any], flags))
        except ParamsError as exc:
            errors.update(exc.errors)
            subjects.update(exc.subjects)
    if engine not in Sweep.Engine.values:
        errors["engine"] = "The engine must be builtin or perf_analyzer."
    errors.update(refused or {})
    if errors or params is None:
        raise SweepRefused(errors, subjects)
    try:
        kind = preflight(server, params, engine)
    except FlagsRefused as exc:  # flags that do not fit the model's kind, by their names
        raise SweepRefused(exc.errors) from None
    except SweepError as exc:
        raise SweepRefused(refusal(exc, params).errors, sentence=str(exc)) from None
    return create_sweep(
        server,
        params,
        engine=engine,
        user=user,
        enqueue=enqueue,
        name=name[:120],
        note=note,
        model_kind=kind.label,
    )


# --- creating and queueing --------------------------------------------------------------------


def create_sweep(
    server: Server,
    params: SweepParams,
    *,
    engine: str = _BUILTIN,
    user: Any = None,
    enqueue: bool = True,
    rerun_of: Sweep | None = None,
    name: str = "",
    note: str = "",
    model_kind: str = "",
) -> Sweep:
    """A QUEUED sweep row on ``server``; its task is sent once the row is committed (when
    `enqueue`). `model_kind` is the model's kind as `preflight` read it (`ModelKind.label`).
    Raises jobs.QueueUnavailable, with nothing stored, when the queue cannot take it."""
    if enqueue:
        jobs.check_queue()
    with transaction.atomic():
        sweep = jobs.create(
            cast(str, Sweep.Kind.SWEEP),
            params_to_json(params),
            server=server,
            user=user,
            levels_total=params.level_count(),
            enqueue=enqueue,
            engine=engine,
            rerun_of=rerun_of,
            name=name,
            note=note,
            model_kind=model_kind[:200],
        )
    from team import audit

    audit.record(
        user if getattr(user, "is_authenticated", False) else (user or "system"),
        "sweep.start",
        model_name=sweep.model,
        server=server.name,
        target=f"sweep #{sweep.pk}",
        detail=f"{engine} {params.mode} {params.range_text}"
        + (f" × {params.rounds} rounds" if params.rounds > 1 else ""),
        after_sha256=sweep.config_sha256,
    )
    jobs.publish_state(sweep)
    return sweep


# --- user actions -----------------------------------------------------------------------------


def rerun(sweep_id: int, user: Any = None) -> Sweep:
    """A new sweep with the same parameters, engine and server (checked again: the bounds
    may be newer than the sweep, the server may be gone)."""
    original = Sweep.objects.get(pk=sweep_id)
    params = params_of(original)
    params.validate()
    return create_sweep(
        jobs.server_of(original),
        params,
        engine=original.engine,
        user=user,
        rerun_of=original,
        name=original.name,
        model_kind=original.model_kind,
    )


def set_label(sweep_id: int, name: str, note: str) -> None:
    """A sweep's name and note (any state: they describe it, they change no measurement)."""
    Sweep.objects.filter(pk=sweep_id).update(name=name[:120], note=note)
