"""Load, unload and reload models on a Triton server, and tell every open page how it went.

Web requests only start an action (`start_action`) and return: a load can take minutes.
The action is a job of the one lifecycle (a `ControlAction` row, run by `control_job` on
a Celery worker of the server's queue); `run_action` (also called directly by the CLI,
the API's ``?wait=1``, a rollout's server and a search's Apply, through `act`) publishes
"started" and the final outcome to the server's repository group, and remembers the
desired load set of that server for "restore previous loads". Every function takes the
server.
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypedDict, Unpack

import redis
from django.conf import settings
from django.db import transaction
from django.dispatch import Signal
from django.utils import timezone

from registry.servers import Server
from registry.triton_clients import get_client
from triton_api.client import TritonError
from triton_api.messages import explain_load_failure

from . import events
from .models import ControlAction, ModelIntent
from .naming import InvalidModelName, check_model_name, is_safe_model_name
from .repository import OUTSIDE, leaves
from .status import state_json

log = logging.getLogger(__name__)

ACTIONS = ("load", "unload", "reload")
# The permission every change to what a server serves needs (team.roles: Operators, Admins).
CONTROL_PERMISSION = "repository_app.control_models"
CANNOT_CONTROL = "your role cannot load or unload models"
NOT_PERMITTED = "your role cannot load or unload models on {server}"
NOT_EXPLICIT = (
    "Triton runs in NONE or POLL model control mode: load and unload need "
    "tritonserver --model-control-mode=explicit"
)

# (server, model) -> this process's token for its claim. The claim itself is a Redis key,
# shared by every web process, worker and command (the web runs several processes); the
# set alone stands in while Redis does not answer.
_inflight: dict[tuple[str, str], str] = {}
_inflight_lock = threading.Lock()
# A claim outlives no action: a load is bounded by TRITON_LOAD_TIMEOUT_S, and a process
# killed mid-action leaves a key that expires.
CLAIM_MARGIN_S = 60
# Sent after a load or reload that succeeded, from config.pbtxt (not a trial with an
# override), with server, name, action, user_id and audit_target: the inference app runs
# the model's checks there.
served_changed = Signal()
_RELEASE = """
if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end
return 0
"""


def action_time_limits() -> tuple[int, int]:
    """(soft, hard) seconds for a job that runs one action: a load is bounded by
    TRITON_LOAD_TIMEOUT_S, the rest is a few Triton questions."""
    soft = int(settings.TRITON_LOAD_TIMEOUT_S) + CLAIM_MARGIN_S
    return soft, soft + 30


def _claim_key(server: str, name: str) -> str:
    return f"dashboard:control:inflight:{server}:{name}"


def _take(server: str, name: str, what: str = "") -> str | None:
    """Mark (server, model) in flight for every process: the claim's token, None when it
    already is. ``what`` ("load started by alice") is kept with the claim, for ``running``."""
    token = secrets.token_hex(8) + (f" {what}" if what else "")
    with _inflight_lock:
        if (server, name) in _inflight:
            return None
        try:
            ttl = int(settings.TRITON_LOAD_TIMEOUT_S) + CLAIM_MARGIN_S
            if not events.shared_redis().set(_claim_key(server, name), token, nx=True, ex=ttl):
                return None
        except (redis.RedisError, OSError) as exc:
            log.warning("control claims in this process only (Redis: %s)", exc)
        _inflight[(server, name)] = token
        return token


def running(server: Server, name: str) -> str:
    """What runs on the model now ("load started by alice"), from its claim; "" when nothing
    does. A page shows it until the outcome arrives, never a stale "started"."""
    value: Any
    try:
        value = events.shared_redis().get(_claim_key(server.name, name))
    except (redis.RedisError, OSError):
        with _inflight_lock:
            value = _inflight.get((server.name, name))
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    return str(value or "").partition(" ")[2]


def _give_back(server: str, name: str) -> None:
    with _inflight_lock:
        token = _inflight.pop((server, name), None)
    if token is not None:
        release_token(server, name, token)


def _hand_over(server: str, name: str) -> None:
    """This process no longer holds the claim: a job does (it releases it by its token)."""
    with _inflight_lock:
        _inflight.pop((server, name), None)


def release_token(server: str, name: str, token: str) -> None:
    """Give back the claim ``token`` took, from whichever process (only that claim: a
    later one on the same model keeps its own)."""
    try:
        events.shared_redis().eval(_RELEASE, 1, _claim_key(server, name), token)
    except (redis.RedisError, OSError) as exc:  # the key expires on its own
        log.warning("control claim of %s on %s not released now (Redis: %s)", name, server, exc)


@dataclass
class ActionOutcome:
    model: str
    action: str
    ok: bool
    message: str
    states: dict[str, Any] = field(default_factory=dict)
    previous_serving: bool = False
    # Triton did not answer (rather than refusing): a rollout reports "unreachable".
    unreachable: bool = False

    def as_event(self, username: str) -> dict[str, Any]:
        return {**asdict(self), "phase": "succeeded" if self.ok else "failed", "by": username}


class ActionRefused(Exception):
    """The action was not started; the message says why, ``reason`` in a word (a
    rollout's target shows it): "unreachable", "not explicit", "busy" or "refused"."""

    def __init__(self, message: str, *, reason: str = "refused") -> None:
        super().__init__(message)
        self.reason = reason


def check_can_control(server: Server) -> None:
    """Raise ActionRefused unless the server answers in explicit model-control mode."""
    try:
        mode = get_client(server).control_mode()
    except TritonError as exc:
        raise ActionRefused(
            exc.message, reason="unreachable" if exc.unreachable else "refused"
        ) from exc
    if mode != "explicit":
        raise ActionRefused(NOT_EXPLICIT, reason="not explicit")


def claim(server: Server, action: str, name: str, username: str, *, announce: bool = True) -> str:
    """The checks before an action runs (name, explicit mode, not busy, not already
    running), then (server, model) is marked in flight and every page on the server hears
    "started" (``announce``: an action that publishes its outcome); raises ActionRefused.
    The caller runs ``run_action``, then ``release``. Returns the claim's token."""
    if action not in ACTIONS:
        raise ActionRefused(f"unknown action {action!r}")
    _check_name(name)
    check_can_control(server)
    # The claim first: an action in flight is named as such, whether or not Triton already
    # says LOADING; Triton's own state then catches a load started outside the dashboard.
    token = _take(server.name, name, f"{action} started by {username}")
    if token is None:
        raise ActionRefused(f"an action on model '{name}' is already running", reason="busy")
    if any(s.state in ("LOADING", "UNLOADING") for s in _states(server, name)):
        _give_back(server.name, name)
        raise ActionRefused(
            f"model '{name}' is busy in Triton (LOADING or UNLOADING): wait for it", reason="busy"
        )
    if announce:
        events.publish(
            events.repository_group(server.name),
            "model.action",
            {"model": name, "action": action, "phase": "started", "by": username},
        )
    return token


def release(server: Server, name: str) -> None:
    """The end of what ``claim`` began (whatever the outcome)."""
    _give_back(server.name, name)


def start_action(
    server: Server, action: str, name: str, username: str, *, user_id: int | None = None
) -> ControlAction:
    """Validate an action, claim its model and queue it as a job (its task is sent on
    commit, to the server's queue); raises ActionRefused with a reason when it cannot."""
    from jobs import lifecycle

    token = claim(server, action, name, username)
    try:
        with transaction.atomic():
            job = ControlAction.objects.create(
                server=server.name, model=name, action=action, username=username,
                user_id=user_id, claim_token=token, queued_at=timezone.now(),
            )  # fmt: skip
            lifecycle.enqueue_on_commit(lifecycle.KINDS["control"], job.pk)
    except BaseException:
        release(server, name)
        raise
    _hand_over(server.name, name)  # the job holds the claim now, wherever it runs
    return job


class ActionOptions(TypedDict, total=False):
    """``run_action``'s options, which ``act`` passes on."""

    user_id: int | None
    config: dict[str, Any] | None
    audit_target: str


def act(
    server: Server, action: str, name: str, username: str, **options: Unpack[ActionOptions]
) -> ActionOutcome:
    """Run an action now, between ``claim`` and ``release``: what the CLI, the API's
    ``?wait=1`` and a search's Apply call, so that they exclude each other and every web
    process (ActionRefused when another action on the model runs, anywhere)."""
    claim(server, action, name, username)
    try:
        return run_action(server, action, name, username, **options)
    finally:
        release(server, name)


@contextmanager
def claimed(server: Server, name: str, action: str, username: str) -> Iterator[None]:
    """Hold the model's claim around Triton calls made elsewhere (a trial load, a search's
    candidate loads): ActionRefused when another action on it runs. Pages hear nothing:
    such a call publishes no outcome, so no "started" may wait for one."""
    claim(server, action if action in ACTIONS else "reload", name, username, announce=False)
    try:
        yield
    finally:
        release(server, name)


def _check_name(name: str) -> None:
    # Loading a folder with shell characters in its name runs them (module naming).
    try:
        check_model_name(name)
    except InvalidModelName as exc:
        raise ActionRefused(str(exc)) from None


def _check_folder(server: Server, name: str) -> None:
    """A model folder that is a link out of the repository is never loaded: Triton would
    load (and, for the Python backend, run) whatever it points to."""
    path = Path(server.repository) / name
    if path.is_symlink() and leaves(path, Path(server.repository)):
        raise ActionRefused(f"model folder '{name}' is {OUTSIDE}")


def model_exists(server: Server, name: str) -> bool:
    """On the server's repository's disk or known to its Triton's index; True when Triton
    does not answer (the action then says why it cannot run)."""
    from .repository import RepositoryError, model_folder

    try:
        model_folder(name, server.repository)
        return True
    except RepositoryError:
        pass
    try:
        return any(s.name == name for s in get_client(server).repository_index())
    except TritonError:
        return True


def _states(server: Server, name: str) -> list:
    try:
        return get_client(server).model_states(name)
    except TritonError:
        return []


def run_action(
    server: Server,
    action: str,
    name: str,
    username: str,
    *,
    user_id: int | None = None,
    config: dict[str, Any] | None = None,
    audit_target: str = "",
) -> ActionOutcome:
    """Run one action on the server now, publish its outcome and record the desired state
    (``audit_target``: what it is part of, e.g. "rollout #3", for the audit log)."""
    _check_name(name)
    if action != "unload":
        _check_folder(server, name)
    client = get_client(server)
    before = _states(server, name)
    was_ready = any(s.state == "READY" for s in before)
    # Triton unloads the ensembles whose steps use the model along with it.
    serving_dependants = _serving_dependants(server, name) if action == "unload" else []
    taken_down: list[ActionOutcome] = []
    try:
        if action == "unload":
            states = client.unload(name)
            taken_down = _taken_down(server, name, serving_dependants)
            outcome = ActionOutcome(name, action, True, f"{name} unloaded")
            if taken_down:
                names = ", ".join(d.model for d in taken_down)
                outcome.message += f", and with it {names} (its steps use {name})"
        else:
            states = client.load(name, config=config)
            verb = "reloaded" if was_ready else "loaded"
            outcome = ActionOutcome(name, action, True, f"{name} {verb}: READY")
    except TritonError as exc:
        states = _states(server, name)
        still_ready = any(s.state == "READY" for s in states)
        message = exc.message if action == "unload" else explain_load_failure(exc.message)
        if was_ready and still_ready and action != "unload":
            message += " — the previous version keeps serving."
        outcome = ActionOutcome(
            name, action, False, message, previous_serving=still_ready, unreachable=exc.unreachable
        )
    outcome.states = state_json(states)
    _audit(server, action, name, username, user_id, outcome, audit_target)
    if outcome.ok:
        ModelIntent.objects.update_or_create(
            server=server.name,
            name=name,
            defaults={"loaded": action != "unload", "updated_by_id": user_id},
        )
    group = events.repository_group(server.name)
    events.publish(group, "model.action", outcome.as_event(username))
    if outcome.ok and action != "unload" and config is None:
        served_changed.send(
            sender=None, server=server, name=name, action=action, user_id=user_id,
            audit_target=audit_target,
        )  # fmt: skip
    for down in taken_down:
        target = audit_target or f"unload of {name}"
        _audit(server, "unload", down.model, username, user_id, down, target)
        ModelIntent.objects.update_or_create(
            server=server.name,
            name=down.model,
            defaults={"loaded": False, "updated_by_id": user_id},
        )
        events.publish(group, "model.action", down.as_event(username))
    changed = {name: outcome.states, **{down.model: down.states for down in taken_down}}
    events.publish(group, "models.states", {"models": changed, "full": False})
    return outcome


def _serving_dependants(server: Server, name: str) -> list[str]:
    """The ensembles of the server's repository that use ``name`` and that Triton serves."""
    from .repository import dependants

    names = dependants(Path(server.repository), name)
    if not names:
        return []
    try:
        index = get_client(server).repository_index()
    except TritonError:
        return []
    return [n for n in names if any(s.name == n and s.state == "READY" for s in index)]


def _taken_down(server: Server, name: str, serving: list[str]) -> list[ActionOutcome]:
    """The outcome, for each ensemble in ``serving``, of the unload of ``name`` that it did
    not survive (its reason reads "unloaded" in Triton, which says nothing of why)."""
    down = []
    for ensemble in serving:
        try:
            states = get_client(server).wait_until_settled(ensemble)
        except TritonError:
            continue
        if any(s.state == "READY" for s in states):
            continue
        message = f"unloaded with {name}, a step it needs"
        down.append(ActionOutcome(ensemble, "unload", True, message, state_json(states)))
    return down


def _audit(
    server: Server,
    action: str,
    name: str,
    username: str,
    user_id: int | None,
    outcome: ActionOutcome,
    target: str = "",
) -> None:
    from django.contrib.auth import get_user_model

    from team import audit

    user = get_user_model().objects.filter(pk=user_id).first() if user_id else None
    audit.record(
        user or username,
        action,
        model_name=name,
        server=server.name,
        target=target,
        outcome="ok" if outcome.ok else "failed",
        detail=outcome.message,
    )


def models_to_restore(server: Server, current_index: dict[str, str]) -> list[str]:
    """Models users loaded on the server that it no longer serves (after a restart in
    explicit mode)."""
    wanted = ModelIntent.objects.filter(server=server.name, loaded=True).values_list(
        "name", flat=True
    )
    return sorted(
        n
        for n in wanted
        if current_index.get(n) not in ("READY", "LOADING") and is_safe_model_name(n)
    )


def last_outcomes(server: Server, names: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """The outcome of the last load, unload or reload of each model on the server (from the
    audit log), so pages show it until the next action, not only until a refresh."""
    from django.db.models import Max, Subquery

    from team.models import AuditEvent

    events = AuditEvent.objects.filter(
        server=server.name, action__in=ACTIONS, outcome__in=("ok", "failed")
    )
    if names is not None:
        events = events.filter(model_name__in=names)
    latest = events.values("model_name").annotate(last=Max("id")).values_list("last", flat=True)
    found = {}
    for event in AuditEvent.objects.filter(id__in=Subquery(latest)):  # one query
        found[event.model_name] = {
            "action": event.action,
            "ok": event.outcome == "ok",
            "message": event.detail,
            "at": event.at,
            "by": event.username,
        }
    return found
