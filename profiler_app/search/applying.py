"""Applying a search's winner: the candidate written into config.pbtxt in place (the saved
file with its knobs applied, comments and layout kept) through the editor's save path, then
the model reloaded; also the candidate's text as Apply would write it.
"""

from __future__ import annotations

from typing import Any, cast

from django.utils import timezone

from repository_app import control
from repository_app.editor import saving
from repository_app.modelconfig.text_edit import CannotEditInPlace, edit_in_place
from team import audit

from ..models import Search, SearchCandidate, Sweep
from .errors import SearchError
from .space import Knobs, apply
from .target import is_ready, saved_config, server_of


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
    if search.sweep.state in (Sweep.State.QUEUED, Sweep.State.RUNNING):
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
