"""Rules on one model folder: its config.pbtxt (every single-config rule, with what the folder
tells them), its version folders, the versions the policy loads and their model files.

``load_model_dir`` keeps what the cross-model rules (``repository_rules``) need in a
``ModelEntry``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as pb

from ..naming import unsafe_name_reason
from .backends import complete_backend_fields
from .context import FolderFacts, RuleContext, ServerFacts
from .findings import ERROR, WARNING, Finding, sort_findings
from .folder import folder_facts
from .onnx_io import cross_check_onnx, model_file_problem
from .parsing import FieldLocator, ParseResult
from .rule_set import run_rules
from .templates import drop_templated, parse_for_validation

_VERSION_RE = re.compile(r"^\d+$")

# Files each backend loads from a version folder (besides default_model_filename).
_COMPANION_FILES = {"openvino": ("model.bin",)}
_BACKENDS_WITH_FILES = frozenset(
    {"tensorrt", "onnxruntime", "pytorch", "openvino", "python", "dali", "tensorflow"}
)


@dataclass
class ModelEntry:
    """One model folder after its own checks."""

    name: str
    path: Path
    config: pb.ModelConfig | None
    locator: FieldLocator = field(default_factory=FieldLocator)
    versions: list[int] = field(default_factory=list)  # numeric version folders
    loaded_versions: list[int] = field(default_factory=list)  # per the version policy
    backend: str = ""
    platform: str = ""
    findings: list[Finding] = field(default_factory=list)
    folder: FolderFacts | None = None
    shapes_checked: bool = False  # the model file's shapes were compared with the config

    @property
    def config_path(self) -> Path:
        return self.path / "config.pbtxt"

    def add(self, finding: Finding) -> None:
        """Attach ``finding``, positioned in config.pbtxt when it names a field."""
        if finding.file is None:
            target = self.config_path if finding.field or finding.line else self.path
            if finding.field and finding.line is None:
                line, col = self.locator.locate(finding.field)
                finding = Finding(
                    finding.severity, finding.rule, finding.message, finding.field, line, col
                )
            finding = finding.with_file(str(target))
        self.findings.append(finding)


def _version_folders(entry: ModelEntry) -> Iterator[Finding]:
    try:
        children = sorted(
            p for p in entry.path.iterdir() if p.is_dir() and not p.name.startswith(".")
        )
    except OSError as exc:
        yield Finding(ERROR, "folder.unreadable", f"cannot list {entry.path}: {exc}")
        return
    for child in children:
        if not _VERSION_RE.match(child.name):
            yield Finding(
                WARNING,
                "version.not-numeric",
                f"folder '{child.name}' is not a version number, so Triton ignores it: rename it "
                "to a positive integer (1, 2, ...) or move it out of the model folder",
                file=str(child),
            )
            continue
        if child.name != "0" and child.name.startswith("0"):
            yield Finding(
                ERROR,
                "version.leading-zero",
                f"version folder '{child.name}' has a leading zero; Triton reads it as version "
                f"{int(child.name)}, which clashes with or hides folder '{int(child.name)}': "
                f"rename it to '{int(child.name)}'",
                file=str(child),
            )
        if int(child.name) == 0:
            yield Finding(
                ERROR,
                "version.zero",
                "version folder '0' is not a valid version (versions start at 1): rename it to '1'",
                file=str(child),
            )
            continue
        entry.versions.append(int(child.name))
    entry.versions = sorted(set(entry.versions))


def _select_versions(entry: ModelEntry) -> Iterator[Finding]:
    """Versions the version policy loads; none available is a load failure."""
    config = entry.config or pb.ModelConfig()
    policy = config.version_policy
    which = policy.WhichOneof("policy_choice")
    if which == "all":
        loaded = list(entry.versions)
    elif which == "specific":
        loaded = [v for v in entry.versions if v in set(policy.specific.versions)]
        for v in policy.specific.versions:
            if v > 0 and v not in entry.versions:
                yield Finding(
                    ERROR,
                    "version.specific-missing",
                    f"version_policy asks for version {v} of '{entry.name}' but folder "
                    f"{entry.name}/{v}/ does not exist: create it or drop {v} from the policy",
                    "version_policy.specific",
                )
    else:
        count = policy.latest.num_versions if which == "latest" else 1
        loaded = entry.versions[-count:] if count > 0 else []
    entry.loaded_versions = loaded
    if not loaded:
        yield Finding(
            ERROR,
            "version.none-available",
            f"at least one version must be available under the version policy of model "
            f"'{entry.name}': add a version folder such as {entry.name}/1/ holding the model "
            "file" + (" (or widen version_policy)" if entry.versions else ""),
        )


def _model_files(entry: ModelEntry) -> Iterator[Finding]:
    if entry.backend not in _BACKENDS_WITH_FILES or entry.platform == "ensemble":
        return
    config = entry.config or pb.ModelConfig()
    filename = (
        config.default_model_filename
        or complete_backend_fields(entry.platform, entry.backend, "").default_model_filename
    )
    if not filename:
        return
    wanted = (
        filename,
        *(_COMPANION_FILES.get(entry.backend, ()) if filename == "model.xml" else ()),
    )
    if config.cc_model_filenames:
        return  # per-GPU file names; too many combinations to check statically
    broken: set[int] = set()
    for version in entry.loaded_versions:
        folder = entry.path / str(version)
        for name in wanted:
            problem = model_file_problem(folder / name)
            if problem is not None:
                rule, text = problem
                broken.add(version)
                yield Finding(ERROR, rule, text, file=str(folder / name))
                continue
            if not (folder / name).exists():
                hint = (
                    "add it, or set default_model_filename if your file has another name"
                    if name == filename
                    else "add it next to model.xml"
                )
                yield Finding(
                    ERROR,
                    "version.model-file-missing",
                    f"version folder {entry.name}/{version}/ has no '{name}', the file the "
                    f"{entry.backend} backend loads: {hint}",
                    file=str(folder),
                )
    if entry.backend == "onnxruntime" and entry.loaded_versions:
        newest = entry.loaded_versions[-1]
        onnx_path = entry.path / str(newest) / filename
        if newest not in broken and onnx_path.is_file() and (config.input or config.output):
            found = list(cross_check_onnx(config, onnx_path))
            entry.shapes_checked = not any(f.rule == "onnx.unreadable" for f in found)
            yield from found


def load_model_dir(
    path: Path, *, server: ServerFacts | None = None, strict: bool = False
) -> ModelEntry:
    """Parse and check one model folder; the result keeps what cross-model rules need."""
    entry = ModelEntry(path.name, path, None)
    unsafe = unsafe_name_reason(path.name)
    if unsafe:
        entry.add(
            Finding(
                ERROR if strict else WARNING,
                "model.unsafe-name",
                f"model folder name {path.name!r}: {unsafe}; Triton's Python backend puts the "
                "model path into a shell command unquoted, and the dashboard never loads such "
                "a folder: rename it",
                file=str(path),
            )
        )
    try:
        data: bytes | None = entry.config_path.read_bytes()
    except FileNotFoundError:
        data = None
    except OSError as exc:
        entry.add(
            Finding(
                ERROR,
                "file.unreadable",
                f"cannot read config.pbtxt: {exc}",
                file=str(entry.config_path),
            )
        )
        return entry
    template: ParseResult | None = None
    if data is None:
        entry.add(
            Finding(
                WARNING if not strict else ERROR,
                "model.config-missing",
                f"model folder '{entry.name}' has no config.pbtxt; Triton can only generate one "
                "for backends that auto-complete (onnxruntime, tensorrt, openvino, tensorflow, "
                "python): add a config.pbtxt",
            )
        )
        config = pb.ModelConfig()
    else:
        parsed = parse_for_validation(data)
        template = parsed if parsed.template is not None else None
        entry.locator = parsed.locator
        for f in parsed.findings:
            entry.add(f.with_file(str(entry.config_path)))
        if parsed.config is None:
            return entry
        config = parsed.config
    entry.config = config

    for f in _version_folders(entry):
        entry.add(f)
    entry.folder = folder_facts(entry.path, config.default_model_filename)
    fields = complete_backend_fields(
        config.platform,
        config.backend,
        config.default_model_filename,
        model_name=entry.name,
        version_files=entry.folder.version_files,
        is_dir=entry.folder.is_dir,
    )
    entry.platform, entry.backend = fields.platform, fields.backend
    ctx = RuleContext(
        config,
        entry.locator,
        folder_name=entry.name,
        server=server,
        strict=strict,
        fields=fields,
        folder=entry.folder,
    )
    for f in run_rules(ctx):
        entry.add(f)
    for f in _select_versions(entry):
        entry.add(f)
    for f in _model_files(entry):
        entry.add(f)
    if entry.shapes_checked:
        # The model file settled the question "is that leading -1 the batch dimension?":
        # onnx.input-dims says so where it is; elsewhere the -1 is a real variable size.
        entry.findings = [f for f in entry.findings if f.rule != "io.batch-dim-in-dims"]
    if template is not None:
        entry.findings = drop_templated(entry.findings, template)
    entry.findings = sort_findings(entry.findings)
    return entry
