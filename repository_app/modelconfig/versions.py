"""What each Triton release accepts, for judging a config against the target server.

Triton's own version (``server_metadata()["version"]``, e.g. ``2.51.0`` for container
release 24.10) decides:

- which ModelConfig fields its protobuf knows: an older server fails to parse a newer
  field ("no field named ..."), whatever its value (common repo, model_config.proto);
- which platforms it knows (``torch_aoti`` with ``model.pt2``: core 2.67);
- the model-name checks of explicit loads (core model_repository_manager.cc
  ``ValidateModelName``: 2.67 refuses names containing ``..`` or ``/``; 2.68 trims
  whitespace and refuses only ``..`` itself or a ``/``).

With no version known the newest release is assumed. Releases before 2.40 are judged as 2.40.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from .backends import PYTORCH_AOTI_FILENAME, TORCH_AOTI
from .context import RuleContext, TritonVersion
from .findings import ERROR, WARNING, Finding

OLDEST_KNOWN: TritonVersion = (2, 40)
NEWEST_KNOWN: TritonVersion = (2, 73)
# Triton core version -> NGC container release, for messages (server repo TRITON_VERSION).
RELEASES: dict[TritonVersion, str] = {
    (2, 42): "24.01",
    (2, 49): "24.08",
    (2, 52): "24.11",
    (2, 63): "25.11",
    (2, 67): "26.03",
    (2, 68): "26.04",
}


@dataclass(frozen=True)
class NewField:
    """A ModelConfig field and the first release whose protobuf has it."""

    pattern: re.Pattern[str]  # over FieldLocator paths (index-free for matching)
    label: str
    since: TritonVersion


NEW_FIELDS = [
    NewField(re.compile(r"^runtime$"), "runtime", (2, 42)),
    NewField(
        re.compile(r"^(input|output)\[\d+\]\.is_non_linear_format_io$"),
        "is_non_linear_format_io",
        (2, 49),
    ),
    NewField(re.compile(r"^model_metrics$"), "model_metrics", (2, 52)),
    NewField(
        re.compile(r"^ensemble_scheduling\.max_inflight_requests$"),
        "ensemble_scheduling.max_inflight_requests",
        (2, 63),
    ),
]
TORCH_AOTI_SINCE: TritonVersion = (2, 67)
NAME_CHECK_SINCE: TritonVersion = (2, 67)
NAME_CHECK_RELAXED: TritonVersion = (2, 68)

_VERSION_RE = re.compile(r"^\s*v?(\d+)\.(\d+)(?:\.\d+)?(?:[-.\w]*)\s*$")


def parse_triton_version(text: str) -> TritonVersion:
    """``"2.51"``, ``"2.51.0"`` or ``"2.73.0dev"`` -> ``(2, 51)``; ValueError otherwise.

    A container release (``24.10``) is refused with the hint to give Triton's own version.
    """
    m = _VERSION_RE.match(text or "")
    if not m:
        raise ValueError(f"'{text}' is not a Triton version: give it as X.Y, e.g. 2.51")
    major, minor = int(m.group(1)), int(m.group(2))
    if major >= 20:
        raise ValueError(
            f"'{text}' looks like a container release (YY.MM); give Triton's own version "
            "instead, e.g. 2.51 for release 24.10 (tritonserver --version, or the server "
            "metadata's 'version')"
        )
    if major != 2:
        raise ValueError(f"'{text}' is not a Triton 2.x version: give it as X.Y, e.g. 2.51")
    return major, minor


def version_text(version: TritonVersion) -> str:
    release = RELEASES.get(version)
    return f"{version[0]}.{version[1]}" + (f" (release {release})" if release else "")


def check_server_version(ctx: RuleContext) -> Iterator[Finding]:
    """Fields, platforms and model names the target release does not accept."""
    version = ctx.server.version if ctx.server is not None else None
    if version is not None:
        yield from _new_fields(ctx, version)
        yield from _torch_aoti(ctx, version)
    yield from _model_name(ctx, version)


def _written_paths(ctx: RuleContext) -> list[str]:
    if ctx.locator.positions:
        return list(ctx.locator.positions)
    # A parsed config without positions: fall back to what is set.
    c, paths = ctx.config, []
    if c.runtime:
        paths.append("runtime")
    for kind, ios in (("input", c.input), ("output", c.output)):
        paths += [
            f"{kind}[{i}].is_non_linear_format_io"
            for i, io in enumerate(ios)
            if io.is_non_linear_format_io
        ]
    if c.HasField("model_metrics"):
        paths.append("model_metrics")
    if c.ensemble_scheduling.max_inflight_requests:
        paths.append("ensemble_scheduling.max_inflight_requests")
    return paths


def _new_fields(ctx: RuleContext, version: TritonVersion) -> Iterator[Finding]:
    server = version_text(version)
    for path in _written_paths(ctx):
        for new in NEW_FIELDS:
            if version < new.since and new.pattern.match(path):
                yield ctx.finding(
                    ERROR,
                    "version.field-too-new",
                    f"'{new.label}' was added in Triton {version_text(new.since)}, but the "
                    f"server is Triton {server}, whose config parser does not know it and "
                    "refuses the whole file: remove it, or run Triton "
                    f"{new.since[0]}.{new.since[1]} or newer",
                    path,
                )


def _torch_aoti(ctx: RuleContext, version: TritonVersion) -> Iterator[Finding]:
    if version >= TORCH_AOTI_SINCE:
        return
    c = ctx.config
    if c.platform == TORCH_AOTI or ctx.platform == TORCH_AOTI:
        where = "platform" if c.platform else "default_model_filename"
        yield ctx.finding(
            ERROR,
            "version.platform-too-new",
            f"platform '{TORCH_AOTI}' ({PYTORCH_AOTI_FILENAME}, the PyTorch backend's "
            f"AOTInductor models) was added in Triton {version_text(TORCH_AOTI_SINCE)}, but the "
            f"server is Triton {version_text(version)}, which refuses it (unexpected platform "
            "type): run Triton 2.67 or newer, or export the model as TorchScript "
            '(platform: "pytorch_libtorch", model.pt)',
            where if ctx.locator.has(where) or not ctx.locator.positions else "",
        )


def _model_name(ctx: RuleContext, version: TritonVersion | None) -> Iterator[Finding]:
    """ValidateModelName (explicit loads) as the target release runs it."""
    name = ctx.config.name or ctx.folder_name
    if name is None:
        return
    path = "name" if ctx.config.name else ""
    effective = version or NEWEST_KNOWN
    if effective < NAME_CHECK_SINCE:
        return
    trimmed = name.strip(" \t\n\v\f\r")
    if effective >= NAME_CHECK_RELAXED:
        if not trimmed:
            yield ctx.finding(
                ERROR,
                "model.name-invalid",
                "Model name cannot be empty. Please enter a valid name to deploy: give the "
                "model a name made of letters, digits, '_', '-' or '.'",
                path,
            )
        elif trimmed == ".." or "/" in trimmed:
            yield ctx.finding(ERROR, "model.name-invalid", _traversal(name), path)
        elif ".." in name and version is None:
            yield ctx.finding(
                WARNING,
                "model.name-dots",
                f"model name '{name}' contains '..': Triton 2.67 refuses to load it (2.68 and "
                "later accept it); rename it if the server may be 2.67",
                path,
            )
        return
    if not name:
        message = "model name must not be empty: give the model a name"
    elif not trimmed:
        message = "model name must not contain only whitespace characters: give the model a name"
    elif ".." in name or "/" in name:
        message = (
            _traversal(name)
            + " (Triton 2.67 refuses any '..' in the name; 2.68 and later only '..' itself)"
        )
    else:
        return
    yield ctx.finding(ERROR, "model.name-invalid", message, path)


def _traversal(name: str) -> str:
    return (
        f"invalid model name '{name}', model name must not contain path traversal characters: "
        "rename the model (and its folder) without '/' or '..'"
    )
