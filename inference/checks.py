"""Checks: keep a tried request with its answer (``save``), run a model's checks on a
server as jobs (``queue_runs``: on demand, after a load or reload, after a rollout), and
one run's work (``run``: the request sent again, the answer compared).

Saving and running need the role that controls models on the server, checked again when
the worker runs each check (roles are checked on every step of a long action). Every
save, run and delete is audited.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.utils import timezone

from jobs import lifecycle, queues
from registry.servers import Server, repository_key
from registry.triton_clients import get_client
from repository_app.models import ConfigRevision
from team import audit
from triton_api.client import TritonError

from . import results
from .compare import DEFAULT_TOLERANCE, Verdict, compare
from .models import Check, CheckRun
from .tensors import NUMPY
from .trying import CHECK_MAX_VALUES

KIND = "check"  # the lifecycle's kind of a check run (`check_job`)


class CheckRefused(Exception):
    """Nothing was saved or queued; ``field`` names what is at fault."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


def _tolerance(given: Any, outputs: list[str]) -> dict[str, dict[str, float]]:
    if given in (None, ""):
        return {}
    if not isinstance(given, dict):
        raise CheckRefused('tolerance is {"OUTPUT0": {"atol": 1e-6, "rtol": 1e-5}}', "tolerance")
    out = {}
    for name, value in given.items():
        if name not in outputs:
            raise CheckRefused(f"tolerance: the answer has no output {name!r}", "tolerance")
        if not isinstance(value, dict) or set(value) - {"atol", "rtol"}:
            raise CheckRefused(f"tolerance of {name}: atol and rtol", "tolerance")
        entry = {}
        for key in ("atol", "rtol"):
            try:
                number = float(value.get(key, DEFAULT_TOLERANCE[key]))
            except (TypeError, ValueError):
                raise CheckRefused(f"tolerance of {name}: {key} is a number", "tolerance") from None
            if not math.isfinite(number) or number < 0:
                raise CheckRefused(f"tolerance of {name}: {key} is 0 or more", "tolerance")
            entry[key] = number
        out[name] = entry
    return out


def save(user: Any, server: Server, model: str, name: str, token: str, tolerance: Any) -> Check:
    """Keep the request of ``user``'s Try result ``token`` and its outputs as the check
    ``name`` of ``model``."""
    name = (name or "").strip()
    if not 1 <= len(name) <= 120:
        raise CheckRefused("a check's name is 1 to 120 characters", "name")
    try:
        request = results.request_of(user, token)
        kept = results.outputs_of(user, token)
    except results.NoResult:
        raise CheckRefused("no such Try result (they are kept for an hour)", "result") from None
    if (
        request is None
        or sum(int(np.load(k.path, mmap_mode="r").size) for k in kept) > CHECK_MAX_VALUES
    ):
        raise CheckRefused(
            f"this request or its answer holds more than {CHECK_MAX_VALUES:,} values: too large "
            "to keep as a check",
            "result",
        )
    expected = {}
    for output in kept:
        array = np.load(output.path, allow_pickle=False)
        data = (
            [v.decode("utf-8", "replace") for v in array.reshape(-1).tolist()]
            if array.dtype.kind == "S"
            else array.reshape(-1).tolist()
        )
        expected[output.name] = {
            "datatype": output.datatype,
            "shape": list(array.shape),
            "data": data,
        }
    chosen = _tolerance(tolerance, list(expected))
    try:
        with transaction.atomic():
            check = Check.objects.create(
                model=model, name=name, request=request, expected=expected, tolerance=chosen,
                created_by=user, username=user.get_username(),
            )  # fmt: skip
    except IntegrityError:
        raise CheckRefused(f"{model} already has a check named {name!r}", "name") from None
    audit.record(user, "check.save", model_name=model, server=server.name, target=name,
                 detail=f"outputs {', '.join(expected)}")  # fmt: skip
    return check


def delete(user: Any, server: Server, check: Check) -> None:
    check.delete()
    audit.record(
        user, "check.delete", model_name=check.model, server=server.name, target=check.name
    )


def queue_runs(
    server: Server, model: str, user: Any, trigger: str, *, dispatch: bool = True
) -> list[CheckRun]:
    """One run per check of ``model`` on ``server``, queued on the server's queue (without
    ``dispatch``, for the caller to run here: any watchdog sends one left behind)."""
    kind = lifecycle.KINDS[KIND]
    runs = []
    numbers = (
        ConfigRevision.objects.filter(repository=repository_key(server), model=model)
        .order_by("-number")
        .values_list("number", flat=True)[:2]
    )
    restorable = numbers[1] if len(numbers) == 2 else None
    with transaction.atomic():
        for check in Check.objects.filter(model=model):
            run = CheckRun.objects.create(
                saved_check=check, server=server.name, user=user if getattr(user, "pk", None) else None,
                username=getattr(user, "get_username", lambda: str(user))(), trigger=trigger,
                queued_at=timezone.now(), restorable=restorable,
            )  # fmt: skip
            if dispatch:
                lifecycle.enqueue_on_commit(kind, run.pk)
            runs.append(run)
    return runs


def latest(model: str, server: Server | None = None) -> dict[tuple[int, str], CheckRun]:
    """The last run of each of ``model``'s checks per server (on ``server`` only, if given)."""
    rows: QuerySet[CheckRun] = CheckRun.objects.filter(saved_check__model=model).order_by("-id")
    if server is not None:
        rows = rows.filter(server=server.name)
    found: dict[tuple[int, str], CheckRun] = {}
    for run in rows[:500]:
        found.setdefault((run.saved_check_id, run.server), run)
    return found


# The fleet page reads every check verdict in one query; the newest runs decide, so the
# most recent VERDICT_RUNS finished runs are enough (older runs are always superseded).
VERDICT_RUNS = 2000


def verdicts(servers: list[str]) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (model, server): whether the last finished run of each check passed, in one query.

    Only runs with a verdict count (a queued rerun keeps the previous verdict showing)."""
    rows = (
        CheckRun.objects.filter(server__in=servers, passed__isnull=False)
        .select_related("saved_check")
        .order_by("-id")[:VERDICT_RUNS]
    )
    last: dict[tuple[int, str], CheckRun] = {}
    for run in rows:
        last.setdefault((run.saved_check_id, run.server), run)
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for run in last.values():
        entry = found.setdefault(
            (run.saved_check.model, run.server),
            {"total": 0, "failed": 0, "failing": [], "worst": None},
        )
        entry["total"] += 1
        if not run.passed:
            entry["failed"] += 1
            entry["failing"].append(run.saved_check.name)
            if run.worst is not None and (entry["worst"] is None or run.worst > entry["worst"]):
                entry["worst"] = run.worst
    for entry in found.values():
        entry["failing"].sort()
    return found


def _input_array(tensor: Mapping[str, Any]) -> np.ndarray:
    datatype = str(tensor["datatype"])
    if datatype == "BYTES":
        return np.array([str(v).encode() for v in tensor["data"]], dtype=object).reshape(
            tensor["shape"]
        )
    return np.array(tensor["data"], dtype=NUMPY[datatype]).reshape(tensor["shape"])


def send_and_compare(
    server: Server, check: Check, timeout_s: float, limits: tuple[int, int]
) -> Verdict:
    """The check's request sent to ``server`` now, its answer compared with the kept one
    (a refusal by Triton is a failure in Triton's words)."""
    request = check.request
    sequence = request.get("sequence")
    try:
        answer = get_client(server).infer(
            check.model,
            [(t["name"], t["datatype"], _input_array(t)) for t in request["inputs"]],
            list(check.expected),
            sequence=(int(sequence["correlation_id"]), bool(sequence["start"]), bool(sequence["end"]))
            if sequence else None,
            max_request_bytes=limits[0],
            max_response_bytes=limits[1],
            timeout_s=timeout_s,
        )  # fmt: skip
    except TritonError as exc:
        return Verdict(False, None, f"Triton refused the request: {exc.message}")
    return compare(check.expected, answer.outputs, answer.datatypes, check.tolerance)


def run_here(runs: list[CheckRun], command: str) -> list[CheckRun]:
    """Run queued check runs in this process, one after another, through the lifecycle
    (the CLI: it needs no worker); the runs as they ended."""
    kind = lifecycle.KINDS[KIND]
    where = queues.in_process(command)
    for run in runs:
        lifecycle.run(kind, run.pk, where)
    return list(
        CheckRun.objects.select_related("saved_check")
        .filter(pk__in=[r.pk for r in runs])
        .order_by("saved_check__name")
    )


def summaries(trigger: str) -> dict[str, dict[str, Any]]:
    """Per server, the check runs one action started (``trigger``: "rollout #3"): how many
    passed, failed or have not ended, and the worst difference found."""
    found: dict[str, dict[str, Any]] = {}
    for run in CheckRun.objects.filter(trigger=trigger).only("server", "state", "passed", "worst"):
        entry = found.setdefault(
            run.server, {"passed": 0, "failed": 0, "pending": 0, "worst": None}
        )
        if run.state in ("queued", "running"):
            entry["pending"] += 1
        elif run.passed:
            entry["passed"] += 1
        else:
            entry["failed"] += 1
        if run.worst is not None:
            entry["worst"] = max(entry["worst"] or 0.0, run.worst)
    return found
