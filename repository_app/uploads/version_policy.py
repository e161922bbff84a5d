"""The version policy shortcut of the versions page and the API: ``version_policy`` set in
config.pbtxt through the config editor's save path, only its lines changed.
"""

from __future__ import annotations

from typing import Any

from registry.servers import Server

from ..repository import CONFIG_FILE
from . import names
from .staging import UploadError


def set_version_policy(
    server: Server,
    model: str,
    kind: str,
    *,
    user: Any,
    base_sha256: str | None = None,
    num_versions: object = None,
    versions: object = None,
) -> Any:
    """Set ``version_policy`` through the config editor's save path; returns its result.

    ``kind``: "latest" (with ``num_versions``), "all" or "specific" (with ``versions``, a
    list or a comma-separated string). ``base_sha256`` defaults to the file as it is now.
    """
    from ..editor import saving
    from ..modelconfig import parse_config
    from ..modelconfig.text_edit import CannotEditInPlace, edit_in_place

    current = saving.read_current(model, server)
    parsed = parse_config(current.data)
    if parsed.config is None:
        raise UploadError(f"{CONFIG_FILE} of '{model}' does not parse: fix it in the editor")
    config = parsed.config
    config.ClearField("version_policy")
    try:
        if kind == "latest":
            count = int(str(num_versions))
            if count < 1:
                raise ValueError
            config.version_policy.latest.num_versions = count
            summary = f"latest {count}"
        elif kind == "all":
            config.version_policy.all.SetInParent()
            summary = "all versions"
        elif kind == "specific":
            items = versions if isinstance(versions, list) else str(versions or "").split(",")
            numbers = sorted({names.parse_version(str(v).strip()) for v in items if str(v).strip()})
            if not numbers:
                raise ValueError
            config.version_policy.specific.versions.extend(numbers)
            summary = "versions " + ", ".join(str(n) for n in numbers)
        else:
            raise UploadError(f"unknown version policy {kind!r}: latest, all or specific")
    except (ValueError, names.InvalidName) as exc:
        detail = f": {exc}" if str(exc) else ""
        raise UploadError(
            "latest needs a number of versions of at least 1; specific needs version numbers"
            + detail
        ) from exc
    try:
        # Only the version_policy lines change; comments and layout stay.
        text = edit_in_place(current.text, config)
    except CannotEditInPlace as exc:
        raise UploadError(
            f"the version policy cannot be written into {CONFIG_FILE} in place ({exc.reason}); "
            "nothing was changed: set it in the config editor",
            409,
        ) from None
    return saving.save_config(
        model,
        text,
        server=server,
        base_sha256=base_sha256 or current.sha256,
        author_id=getattr(user, "pk", None),
        source="api" if base_sha256 is None else "form",
        message=f"version policy: {summary}",
    )
