"""Editor pages: thin views over saving, form_mapping, the validator and triton_actions.

One page (``config_editor``) holds both modes; every button posts to it with an
``action``: check, to_text, to_form, save, save_reload, try. The page carries the sha256
of the file it was opened from (``base_sha``); in form mode also the text the form was
rendered from (``base_text``), so a form save applies only the changed fields to it, in
place (``modelconfig.text_edit``). ``action=check`` with ``Accept: application/json`` is form
mode's live validation (static/js/editor_form.js): findings, where the form shows them, and
format errors by field. Every view is about the server the request names
(``server_context.server_of``): the file is in its repository, its Triton judges, reloads
and tries.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods, require_POST

from common.negotiation import wants_json
from registry.server_context import server_of
from registry.servers import Server, sharing

from ..modelconfig import Finding, parse_config
from ..modelconfig.findings import has_errors
from ..modelconfig.parsing import MAX_CONFIG_BYTES
from ..repository import RepositoryError
from . import diffing, fill, form_mapping, page, saving, triton_actions
from .rights import edit_refusal

OFFER_KEY = "editor.reload_offer"  # in the session: a save's "reload where it is loaded"

WRITE_ACTIONS = ("save", "save_reload", "try")
ACTIONS = ("check", "to_text", "to_form", "fill", "fill_template", *WRITE_ACTIONS)


def refuse(request: HttpRequest, message: str, status: int) -> HttpResponse:
    if wants_json(request) or request.path.endswith(("/validate", "/raw")):
        return JsonResponse({"ok": False, "message": message}, status=status)
    return render(
        request,
        "repository/config_error.html",
        {"message": message, "status": status},
        status=status,
    )


def current_or_404(name: str, server: Server) -> saving.CurrentConfig:
    try:
        return saving.read_current(name, server)
    except RepositoryError as exc:
        raise Http404(str(exc)) from exc
    except saving.SaveError as exc:
        raise Http404(exc.message) from exc


def _too_large_finding(size: int) -> Finding:
    return Finding(
        "error",
        "parse.too-large",
        f"the text is {size / 1_048_576:.1f} MiB, over the {MAX_CONFIG_BYTES // 1_048_576} MiB "
        "limit; model configs are a few KB: nothing was saved",
        line=1,
        col=1,
    )


def _finding_dicts(findings: list[Finding]) -> list[dict[str, Any]]:
    return [f.to_dict() for f in findings]


def _page(
    request: HttpRequest,
    name: str,
    *,
    mode: str,
    base_sha: str,
    text: str = "",
    editor: form_mapping.EditorForms | None = None,
    findings: list[Finding] | None = None,
    unplaced: list[Finding] | None = None,
    outcome: dict[str, Any] | None = None,
    message: str = "",
    rewrite_reason: str = "",
    status: int = 200,
    config: Any = None,
    reload_offer: Any = None,
) -> HttpResponse:
    """The editor page; in form mode ``config`` is what the forms show (the posted changes
    applied), when it differs from ``text``."""
    findings = findings or []
    server = server_of(request)
    latest = saving.latest_revision(name, server)
    summary: list[dict[str, Any]] = []
    format_errors: list[dict[str, str]] = []
    extra: dict[str, Any] = {}
    if mode == "form" and editor is not None:
        extra = page.form_context(text, config, server.repository)
        if unplaced is None and not editor.config.is_bound:
            unplaced = form_mapping.place_on_unbound(editor, text, findings)
        targets = form_mapping.finding_targets(editor, findings)
        summary = [{"finding": f, "target": t} for f, t in zip(findings, targets, strict=True)]
        if editor.config.is_bound:
            format_errors = [
                {"target": key, "label": form_mapping.field_label(key), "message": message}
                for key, messages_ in form_mapping.field_errors(editor).items()
                for message in messages_
            ]
    return render(
        request,
        "repository/editor.html",
        {
            "name": name,
            "mode": mode,
            "base_sha": base_sha,
            "text": text,
            "editor": editor,
            "findings": findings,
            "unplaced": findings if unplaced is None else unplaced,
            "findings_json": _finding_dicts(findings),
            "error_count": sum(1 for f in findings if f.is_error),
            "warning_count": sum(1 for f in findings if not f.is_error),
            "outcome": outcome,
            "message": message,
            "summary": summary,
            "format_errors": format_errors,
            "rewrite_reason": rewrite_reason,
            "can_edit": not edit_refusal(request, server),
            "cannot_edit": edit_refusal(request, server),
            "cannot_try": edit_refusal(request, server, "try"),
            "latest": latest,
            "max_bytes": MAX_CONFIG_BYTES,
            "placeholders": page.placeholders(text),
            "template_field": page.TEMPLATE_FIELD,
            "reload_offer": reload_offer,
            **extra,
        },
        status=status,
    )


def _open_page(
    request: HttpRequest,
    name: str,
    mode: str,
    *,
    outcome: dict[str, Any] | None = None,
    status: int = 200,
) -> HttpResponse:
    """The editor showing the file on disk now (an edit made outside is recorded by the
    workers or the next save: the page only reads)."""
    server = server_of(request)
    current = current_or_404(name, server)
    text = current.text
    findings = saving.editor_findings(current.data, name, server)
    editor = None
    if mode == "form":
        editor, _ = form_mapping.forms_for_text(name, text)
        if editor is None and page.placeholders(text):
            messages.warning(
                request,
                "The file is a template, so it opens in text mode: fill its placeholders "
                "below (or edit them in the text).",
            )
        elif editor is None:
            messages.warning(
                request, "The file does not parse, so it opens in text mode: fix it there."
            )
    return _page(
        request,
        name,
        mode="form" if editor is not None else "text",
        base_sha=current.sha256,
        text=text,
        findings=findings,
        outcome=outcome,
        status=status,
        editor=editor,
        reload_offer=_take_offer(request, name, server) if outcome is None else None,
    )


def _keep_offer(request: HttpRequest, server: Server, name: str, done: tuple[str, ...]) -> None:
    """After a save on a repository other servers share: the page it redirects to offers
    to reload the model where it is loaded (never automatic)."""
    if len(sharing(server)) > 1:
        request.session[OFFER_KEY] = {"model": name, "server": server.name, "done": list(done)}


def _take_offer(request: HttpRequest, name: str, server: Server) -> Any:
    from .reload_offer import reload_offer

    kept = request.session.get(OFFER_KEY)
    if not kept or kept.get("model") != name or kept.get("server") != server.name:
        return None
    del request.session[OFFER_KEY]
    return reload_offer(server, name, request.user, done=tuple(kept.get("done", ())))


@login_required
@require_http_methods(["GET", "POST"])
def config_editor(request: HttpRequest, name: str) -> HttpResponse:
    if request.method == "GET":
        return _open_page(request, name, "text" if request.GET.get("mode") == "text" else "form")
    try:
        data = request.POST
    except RequestDataTooBig:
        return refuse(
            request, _too_large_finding(int(request.META.get("CONTENT_LENGTH") or 0)).message, 413
        )
    server = server_of(request)
    current_or_404(name, server)
    action = data.get("action", "check")
    mode = "text" if data.get("mode") == "text" else "form"
    if action not in ACTIONS:
        return refuse(request, f"unknown action {action!r}", 400)
    if action in WRITE_ACTIONS and (refused := edit_refusal(request, server, action)):
        return refuse(request, refused, 403)
    base_sha = data.get("base_sha", "")
    message = data.get("message", "")
    if mode == "text":
        return _text_post(request, name, action, data.get("text", ""), base_sha, message)
    return _form_post(request, name, action, data, base_sha, message)


def _again(request: HttpRequest, name: str, **shown: Any) -> Callable[..., HttpResponse]:
    """The editor page shown again with what was posted; a status and an action's outcome
    may be added."""

    def again(status: int = 200, outcome: dict[str, Any] | None = None) -> HttpResponse:
        return _page(request, name, status=status, outcome=outcome, **shown)

    return again


def _text_post(
    request: HttpRequest, name: str, action: str, text: str, base_sha: str, message: str
) -> HttpResponse:
    text = text.replace("\r\n", "\n")
    server = server_of(request)
    findings = saving.editor_findings(text, name, server)

    again = _again(
        request, name, mode="text", base_sha=base_sha, text=text, findings=findings, message=message
    )

    if action == "to_form":
        editor, parse_findings = form_mapping.forms_for_text(name, text)
        if editor is None:
            messages.error(
                request,
                "The text does not parse, so the form cannot show it: fix the errors first.",
            )
            return again(422)
        return _page(
            request,
            name,
            mode="form",
            base_sha=base_sha,
            text=text,
            editor=editor,
            findings=findings,
            message=message,
        )
    if action in ("check", "to_text"):
        return again()
    if action == "fill":
        return _fill(request, name, text, base_sha, message, again)
    if action == "fill_template":
        return _fill_template(request, name, text, base_sha, message)
    if action == "try":
        parsed = parse_config(text)
        if parsed.config is None:
            return again(422)
        verdict = triton_actions.try_config(server, name, parsed.config, request.user)
        return again(outcome=_trial_outcome(verdict, findings))
    return _save(request, name, action, text, base_sha, message, "text", findings, again)


def _base_text(name: str, server: Server, base_sha: str, posted: str) -> str:
    """The text the form was rendered from. Browsers post a textarea with CRLF line ends
    and without a leading newline, so when the posted text is the file the page was opened
    from (same sha256, same text up to those two), the file's exact text is the base: the
    in-place edit then changes the changed lines and nothing else."""
    posted = posted.replace("\r\n", "\n")
    try:
        current = saving.read_current(name, server)
    except (RepositoryError, saving.SaveError):
        return posted
    if current.sha256 == base_sha and _loose(current.text) == _loose(posted):
        return current.text
    return posted


def _loose(text: str) -> str:
    return text.replace("\r\n", "\n").lstrip("\n")


def _form_check(result: form_mapping.FormRound) -> JsonResponse:
    """The live check of form mode: findings with where the form shows them, format errors
    by field, and whether the change can be written in place."""
    findings = result.findings or form_mapping.unparsable_base(result.base_text)
    targets = form_mapping.finding_targets(result.editor, findings)
    return JsonResponse(
        {
            "ok": result.ok and not has_errors(findings),
            "findings": [
                {**f.to_dict(), "target": t} for f, t in zip(findings, targets, strict=True)
            ],
            "errors": sum(1 for f in findings if f.is_error),
            "warnings": sum(1 for f in findings if not f.is_error),
            "field_errors": form_mapping.field_errors(result.editor),
            "field_labels": form_mapping.field_labels(result.editor),
            "rewrite_reason": result.rewrite_reason,
            "ensemble_graph": page.ensemble_graph(
                result.applied.config if result.applied else None
            ),
        }
    )


def _form_post(
    request: HttpRequest, name: str, action: str, data: Any, base_sha: str, message: str
) -> HttpResponse:
    server = server_of(request)
    base_text = _base_text(name, server, base_sha, data.get("base_text", ""))
    # The server facts a save is validated with (saving.editor_findings), for every finding
    # form mode shows, the live check's too.
    facts = saving.server_facts_now(server)
    result = form_mapping.read_form(name, base_text, data, server=facts)
    if action == "check" and wants_json(request):
        return _form_check(result)

    again = _again(
        request,
        name,
        mode="form",
        base_sha=base_sha,
        text=base_text,
        editor=result.editor,
        findings=result.findings,
        unplaced=result.unplaced,
        message=message,
        rewrite_reason=result.rewrite_reason,
        config=result.applied.config if result.applied else None,
    )

    if action == "fill_template":
        # The template as the form would write it (the file's own text when the change
        # needs a rewrite, so nothing is lost without asking).
        source = result.text if result.ok and not result.rewrite_reason else base_text
        return _fill_template(request, name, source, base_sha, message)
    if not result.ok:
        base_findings = form_mapping.unparsable_base(base_text)
        if base_findings:  # a tampered or stale page: show the text instead
            return _page(
                request,
                name,
                mode="text",
                base_sha=base_sha,
                text=base_text,
                findings=base_findings,
                status=422,
            )
        return again(422 if action in WRITE_ACTIONS else 200)
    if (
        result.rewrite_reason
        and action in ("fill", "to_text", "save", "save_reload")
        and not result.editor.config.cleaned_data.get("rewrite")
    ):
        # Never drop comments or layout without asking.
        result.editor.config.add_error(
            "rewrite",
            f"this change cannot be written into the file in place ({result.rewrite_reason}), "
            "so it would rewrite the whole file in canonical form: comments, blank lines and "
            "the order of fields would be lost. Tick the box to rewrite it, or make the "
            "change in text mode.",
        )
        return again(422)
    if action == "fill":
        return _fill(request, name, result.text, base_sha, message, again)
    if action == "to_text":
        return _text_page(request, name, result.text, base_sha, message)
    if action in ("check", "to_form"):
        return again()
    assert result.config is not None
    if action == "try":
        verdict = triton_actions.try_config(server, name, result.config, request.user)
        return again(outcome=_trial_outcome(verdict, result.findings))
    if not result.changed:
        messages.info(request, "Nothing changed in the form: nothing to save.")
        return again()
    return _save(
        request, name, action, result.text, base_sha, message, "form", result.findings, again
    )


def _text_page(
    request: HttpRequest, name: str, text: str, base_sha: str, message: str
) -> HttpResponse:
    """`text` in text mode with its findings, unsaved (the user reviews it, then saves)."""
    return _page(
        request,
        name,
        mode="text",
        base_sha=base_sha,
        text=text,
        findings=saving.editor_findings(text, name, server_of(request)),
        message=message,
    )


def _fill_template(
    request: HttpRequest, name: str, text: str, base_sha: str, message: str
) -> HttpResponse:
    """The template with the placeholders the user filled, in text mode, unsaved."""
    filled, done, left = page.fill_from_post(text, request.POST)
    if not done:
        messages.warning(request, "No placeholder was given a value: nothing was filled.")
    else:
        note = f"Filled {', '.join('${' + n + '}' for n in done)}"
        if left:
            note += f"; still to fill: {', '.join('${' + n + '}' for n in left)}"
        messages.info(request, note + ". Nothing is saved yet: review the text, then save.")
    return _text_page(request, name, filled, base_sha, message)


def _fill(request, name, text, base_sha, message, again):  # type: ignore[no-untyped-def]
    """Show the config filled from the ONNX graph, in text mode, unsaved."""
    try:
        filled, note = fill.fill_from_model(name, text, server_of(request))
    except fill.FillError as exc:
        messages.error(request, f"Fill from model: {exc}")
        return again(422)
    messages.info(request, note)
    return _text_page(request, name, filled, base_sha, message)


def _save(
    request: HttpRequest,
    name: str,
    action: str,
    text: str,
    base_sha: str,
    message: str,
    source: str,
    findings: list[Finding],
    again: Any,
) -> HttpResponse:
    if has_errors(findings):
        return again(422)
    server = server_of(request)
    try:
        result = saving.save_config(
            name,
            text,
            server=server,
            base_sha256=base_sha,
            author_id=request.user.pk,
            source=source,
            message=message,
        )
    except saving.InvalidConfig:
        return again(422)
    except saving.CodeChangeRefused as exc:
        messages.error(request, exc.message)
        return again(403)
    except saving.SaveConflict as exc:
        return _conflict(request, name, exc.current, text, message)
    except saving.SaveError as exc:
        messages.error(request, exc.message)
        return again(507)
    # Back to the mode the user saved from.
    back = reverse("config_editor", args=[name]) + ("?mode=text" if source == "text" else "")
    if not result.changed:
        messages.info(request, "The file already has exactly this content: nothing to save.")
        return redirect(back)
    assert result.revision is not None
    saved = f"Saved config.pbtxt as revision #{result.revision.number}."
    if action != "save_reload":
        messages.success(request, saved)
        _keep_offer(request, server, name, done=())
        return redirect(back)
    verdict = triton_actions.reload_saved(
        server, name, request.user.get_username(), request.user.pk
    )
    if verdict.ok:
        messages.success(request, f"{saved} {verdict.message}")
        _keep_offer(request, server, name, done=(server.name,))
        return redirect(back)
    outcome = {
        "kind": "reload_failed",
        "saved": saved,
        "revision": result.revision,
        "previous": result.previous,
        "triton_message": verdict.message,
        "previous_serving": verdict.previous_serving,
        "opaque": verdict.opaque,
        "findings": _finding_dicts(findings),
    }
    return _open_page(request, name, "text" if source == "text" else "form", outcome=outcome)


def _trial_outcome(
    verdict: triton_actions.TritonVerdict, findings: list[Finding]
) -> dict[str, Any]:
    return {
        "kind": "trial",
        "ok": verdict.ok,
        "triton_message": verdict.message,
        "restored": verdict.restored,
        "restore_message": verdict.restore_message,
        "opaque": verdict.opaque,
        "findings": _finding_dicts(findings),
    }


def _conflict(
    request: HttpRequest, name: str, current: saving.CurrentConfig, yours: str, message: str
) -> HttpResponse:
    theirs = current.text
    latest = saving.latest_revision(name, server_of(request))
    return render(
        request,
        "repository/config_conflict.html",
        {
            "name": name,
            "theirs": theirs,
            "theirs_sha": current.sha256,
            "theirs_revision": latest,
            "yours": yours,
            "diff": diffing.side_by_side(theirs, yours),
            "message": message,
        },
        status=409,
    )


@login_required
@require_POST
def config_validate(request: HttpRequest, name: str) -> JsonResponse:
    """Validate the posted body (the raw config text) and return findings with positions."""
    try:
        body = request.body
    except RequestDataTooBig:
        size = int(request.META.get("CONTENT_LENGTH") or 0)
        return JsonResponse(
            {"ok": False, "findings": [_too_large_finding(size).to_dict()], "errors": 1},
            status=413,
        )
    server = server_of(request)
    current_or_404(name, server)
    findings = saving.editor_findings(body, name, server)
    return JsonResponse(
        {
            "ok": not has_errors(findings),
            "findings": _finding_dicts(findings),
            "errors": sum(1 for f in findings if f.is_error),
            "warnings": sum(1 for f in findings if not f.is_error),
        }
    )
