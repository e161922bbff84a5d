"""Public API of the config.pbtxt validator.

- ``validate_text(text, *, folder_name=None, server=None, strict=False) -> list[Finding]``
  checks one config.pbtxt given as ``str`` or ``bytes``; never raises.
- ``validate_config(config, ...) -> list[Finding]`` does the same for a parsed
  ``ModelConfig`` (no positions).
- ``validate_model_dir(path, *, server=None, strict=False) -> list[Finding]`` adds the
  folder rules: name equals folder, version folders, model files, ONNX cross-check.
- ``validate_repository(path, *, server=None, strict=False) -> dict[str, list[Finding]]``
  validates every model folder (keyed by folder name) plus cross-model ensemble rules;
  findings that concern the repository itself are keyed by ``""``.
- ``validate_path(path, ...) -> dict[str, list[Finding]]`` auto-detects a config file,
  a model folder (holds config.pbtxt) or a repository; keys are display paths.

``server`` (``ServerFacts``) enables server rules such as GPU ids that do not exist, and
judges against the server's Triton version (fields and platforms newer than it, its
model-name checks). ``strict=True`` mirrors ``tritonserver --disable-auto-complete-config``:
fields Triton could otherwise fill from the model file (data_type, dims) become required;
the backend is still inferred from the version folder's file names and a
``model.<backend>`` folder name, as Triton does. ``folder`` (``FolderFacts``) gives
``validate_text`` what the model folder holds, so a single file gets the verdict its
folder gets. A template (``${name}`` placeholders) gets one finding per placeholder and
the rest is checked around them. Findings carry ``file`` (the config or folder),
``field``, ``line``, ``col``.
"""

from __future__ import annotations

from pathlib import Path

from tritonclient.grpc import model_config_pb2

from .backends import BackendFields
from .context import FolderFacts, RuleContext, ServerFacts
from .findings import Finding, sort_findings
from .folder_rules import load_model_dir
from .parsing import FieldLocator, ParseResult
from .repository_rules import validate_repository_dir
from .rule_set import run_rules
from .templates import drop_templated, parse_for_validation

__all__ = [
    "FolderFacts",
    "ServerFacts",
    "validate_config",
    "validate_model_dir",
    "validate_path",
    "validate_repository",
    "validate_text",
]


def validate_config(
    config: model_config_pb2.ModelConfig,
    *,
    folder_name: str | None = None,
    server: ServerFacts | None = None,
    strict: bool = False,
    locator: FieldLocator | None = None,
    fields: BackendFields | None = None,
    folder: FolderFacts | None = None,
) -> list[Finding]:
    """Validate an already parsed ModelConfig (positions only when ``locator`` is given)."""
    ctx = RuleContext(
        config,
        locator or FieldLocator(),
        folder_name=folder_name,
        server=server,
        strict=strict,
        fields=fields,
        folder=folder,
    )
    return sort_findings(run_rules(ctx))


def validate_text(
    text: str | bytes,
    *,
    folder_name: str | None = None,
    server: ServerFacts | None = None,
    strict: bool = False,
    folder: FolderFacts | None = None,
) -> list[Finding]:
    """Parse and validate config.pbtxt text; syntax problems come back as findings."""
    return _validate_parsed(
        parse_for_validation(text),
        folder_name=folder_name,
        server=server,
        strict=strict,
        folder=folder,
    )


def _validate_parsed(
    parsed: ParseResult,
    *,
    folder_name: str | None,
    server: ServerFacts | None,
    strict: bool,
    folder: FolderFacts | None,
) -> list[Finding]:
    if parsed.config is None:
        return sort_findings(parsed.findings)
    found = validate_config(
        parsed.config,
        folder_name=folder_name,
        server=server,
        strict=strict,
        locator=parsed.locator,
        folder=folder,
    )
    return sort_findings(parsed.findings + drop_templated(found, parsed))


def validate_model_dir(
    path: str | Path, *, server: ServerFacts | None = None, strict: bool = False
) -> list[Finding]:
    """Validate one model folder: its config.pbtxt and the files next to it."""
    return load_model_dir(Path(path), server=server, strict=strict).findings


def validate_repository(
    path: str | Path, *, server: ServerFacts | None = None, strict: bool = False
) -> dict[str, list[Finding]]:
    """Validate every model folder of a repository plus cross-model (ensemble) rules."""
    return validate_repository_dir(Path(path), server=server, strict=strict)


def validate_path(
    path: str | Path, *, server: ServerFacts | None = None, strict: bool = False
) -> dict[str, list[Finding]]:
    """Validate a config file, a model folder or a repository, whichever ``path`` is."""
    p = Path(path)
    if p.is_file():
        try:
            data = p.read_bytes()
        except OSError as exc:
            return {
                str(p): [
                    Finding("error", "file.unreadable", f"cannot read {p}: {exc}", file=str(p))
                ]
            }
        in_model_folder = p.name == "config.pbtxt"
        parsed = parse_for_validation(data)
        folder = None
        if in_model_folder:
            from .folder import folder_facts

            filename = parsed.config.default_model_filename if parsed.config else ""
            folder = folder_facts(p.absolute().parent, filename)
        findings = _validate_parsed(
            parsed,
            folder_name=p.absolute().parent.name if in_model_folder else None,
            server=server,
            strict=strict,
            folder=folder,
        )
        return {str(p): [f.with_file(str(p)) for f in findings]}
    if (p / "config.pbtxt").is_file():
        return {str(p): validate_model_dir(p, server=server, strict=strict)}
    if p.is_dir():
        return {
            (str(p / name) if name else str(p)): findings
            for name, findings in validate_repository(p, server=server, strict=strict).items()
        }
    return {
        str(p): [
            Finding(
                "error",
                "file.missing",
                f"{p} does not exist: pass a config.pbtxt, a model folder or a repository folder",
                file=str(p),
            )
        ]
    }
