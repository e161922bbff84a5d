"""The model repository on disk: model folders, their parsed configs, versions and files.

Only reads here. Configs are parsed with the validator's parser and cached per
(path, size, mtime), so listing 500 models re-parses only what changed.

Paths are resolved before they are used: a model folder, config.pbtxt or model file that
is a symbolic link to somewhere outside its model repository is refused (``model_folder``,
``read_config``) or listed without being read (``version_folders``), so nobody reads or
writes outside the repository through a link planted in it.

A repository outside MODEL_REPOSITORY_ROOTS (a server stored before the setting changed,
or before it existed) is not read at all: ``scan`` and ``model_names`` list nothing (and log
why) and ``model_folder`` and ``sha256_of`` refuse it (``check_root``), so a server's
repository is checked when it is read, not only when it is stored.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from tritonclient.grpc import model_config_pb2

from registry.server_rules import outside_roots

from .disk import version_numbers
from .modelconfig.parsing import parse_config
from .naming import RepositoryError, check_model_name, unsafe_name_reason

__all__ = ["RepositoryError", "check_model_name", "check_root"]
log = logging.getLogger(__name__)
OUTSIDE = "a symbolic link to outside the model repository: the dashboard does not follow it"
# Shown to any reader: no server paths.
OUTSIDE_ROOTS = (
    "this server's model repository is outside MODEL_REPOSITORY_ROOTS: the dashboard neither "
    "lists nor reads it until an Admin moves it there (the Servers page)"
)

CONFIG_FILE = "config.pbtxt"
KIND_NAMES = {v: k for k, v in model_config_pb2.ModelInstanceGroup.Kind.items()}


@dataclass
class ModelFolder:
    name: str
    path: Path
    config: model_config_pb2.ModelConfig | None
    config_error: str = ""
    versions: list[int] = field(default_factory=list)
    # Why the dashboard will not load, edit or upload to it ("" for a safe name).
    unsafe_name: str = ""
    # Errors the validator finds in config.pbtxt as it is on disk (the list's badge).
    validator_errors: int = 0

    @property
    def backend(self) -> str:
        if self.config is None:
            return ""
        return self.config.backend or self.config.platform

    @property
    def max_batch_size(self) -> int | None:
        return None if self.config is None else self.config.max_batch_size

    @property
    def dynamic_batching(self) -> bool:
        return self.config is not None and self.config.HasField("dynamic_batching")

    @property
    def instances(self) -> str:
        return instance_summary(self.config) if self.config is not None else ""


@dataclass
class ModelFile:
    relpath: str
    size: int
    mtime: datetime
    path: Path
    sha256: str = ""
    outside: bool = False  # a link out of the repository: listed, never read


@dataclass
class VersionFolder:
    number: int
    path: Path
    files: list[ModelFile]


def instance_summary(config: model_config_pb2.ModelConfig) -> str:
    """`2 × KIND_GPU [0]`, one part per instance group; Triton's default when none."""
    if not config.instance_group:
        return "default (1 per GPU, else 1 × CPU)"
    parts = []
    for group in config.instance_group:
        count = group.count if group.count > 0 else 1
        text = f"{count} × {KIND_NAMES.get(group.kind, str(group.kind))}"
        if group.gpus:
            text += f" [{', '.join(str(g) for g in group.gpus)}]"
        parts.append(text)
    return ", ".join(parts)


_cache: dict[Path, tuple[tuple[int, int], model_config_pb2.ModelConfig | None, str]] = {}
_cache_lock = threading.Lock()


def leaves(path: Path, root: Path) -> bool:
    """Whether ``path``, with every link resolved, lies outside ``root``."""
    try:
        real, base = path.resolve(), root.resolve()
    except (OSError, RuntimeError):  # a link loop
        return True
    return real != base and base not in real.parents


def check_root(root: Path) -> None:
    """RepositoryError (OUTSIDE_ROOTS) when ``root`` is not a model repository the dashboard
    may read: outside MODEL_REPOSITORY_ROOTS, every link resolved (server_rules)."""
    if outside_roots(root):
        raise RepositoryError(OUTSIDE_ROOTS)


def model_folder(name: str, root: Path) -> Path:
    """``root/name`` for a model name in the safe set whose folder exists inside the
    repository; RepositoryError (its message fit for a user, without the server's paths)
    otherwise. The one place a model name becomes a folder."""
    check_model_name(name)
    check_root(root)
    path = Path(root) / name
    if path.is_symlink() and leaves(path, Path(root)):
        raise RepositoryError(f"model folder '{name}' is {OUTSIDE}")
    if not path.is_dir():
        raise RepositoryError(f"no model folder '{name}' in the model repository")
    return path


def read_config(path: Path) -> tuple[model_config_pb2.ModelConfig | None, str]:
    """(config, "") or (None, the first error as `line:col: message`)."""
    if path.is_symlink() and leaves(path, path.parent.parent):
        return None, f"{CONFIG_FILE} is {OUTSIDE}"
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None, f"{CONFIG_FILE} is missing"
    key = (stat.st_size, stat.st_mtime_ns)
    with _cache_lock:
        cached = _cache.get(path)
    if cached and cached[0] == key:
        return cached[1], cached[2]
    try:
        data = path.read_bytes()
    except OSError as exc:
        return None, f"cannot read {CONFIG_FILE}: {exc.strerror}"
    result = parse_config(data)
    error = ""
    if result.config is None:
        first = next((f for f in result.findings if f.is_error), None)
        error = _describe(first) if first else "unparsable"
    with _cache_lock:
        _cache[path] = (key, result.config, error)
    return result.config, error


def _describe(finding) -> str:  # type: ignore[no-untyped-def]
    where = f"{finding.line}:{finding.col}: " if finding.line else ""
    return f"{where}{finding.message}"


def _model_entries(root: Path) -> list[os.DirEntry[str]]:
    """The model folders under root: every folder but hidden ones; none outside
    MODEL_REPOSITORY_ROOTS (the page lists nothing rather than fail)."""
    if outside_roots(root):
        log.warning("not listing the model repository %s: %s", root, OUTSIDE_ROOTS)
        return []
    if not root.is_dir():
        return []
    with os.scandir(root) as entries:
        return [e for e in entries if e.is_dir() and not e.name.startswith(".")]


def model_names(root: Path) -> list[str]:
    """The names ``scan`` lists, sorted, without reading any folder (the fleet's rows)."""
    return sorted(entry.name for entry in _model_entries(root))


def scan(root: Path) -> list[ModelFolder]:
    """Every model folder under root (hidden folders skipped), sorted by name. Folders
    with unsafe names or linked out of the repository are listed with the reason."""
    models = []
    for entry in _model_entries(root):
        path = Path(entry.path)
        if entry.is_symlink() and leaves(path, root):
            models.append(
                ModelFolder(entry.name, path, None, f"the folder is {OUTSIDE}",
                            unsafe_name=unsafe_name_reason(entry.name))
            )  # fmt: skip
            continue
        models.append(_folder(path))
    return sorted(models, key=lambda m: m.name)


def dependants(root: Path, name: str) -> list[str]:
    """The ensembles of the repository whose ensemble_scheduling steps use model ``name``,
    directly or through another ensemble, sorted: Triton unloads them with it."""
    steps: dict[str, set[str]] = {}
    for entry in _model_entries(root):
        path = Path(entry.path)
        if entry.is_symlink() and leaves(path, root):
            continue
        config, _ = read_config(path / CONFIG_FILE)
        if config is not None and config.HasField("ensemble_scheduling"):
            steps[entry.name] = {step.model_name for step in config.ensemble_scheduling.step}
    found: set[str] = set()
    todo = [name]
    while todo:
        used = todo.pop()
        for ensemble, models in steps.items():
            if used in models and ensemble not in found and ensemble != name:
                found.add(ensemble)
                todo.append(ensemble)
    return sorted(found)


def _folder(path: Path) -> ModelFolder:
    config, error = read_config(path / CONFIG_FILE)
    return ModelFolder(
        path.name,
        path,
        config,
        error,
        version_numbers(path),
        unsafe_name_reason(path.name),
        validator_errors(path / CONFIG_FILE) if config is not None else 0,
    )


_errors_cache: dict[Path, tuple[tuple[int, int], int]] = {}


def validator_errors(path: Path) -> int:
    """How many errors the validator finds in the file (text rules, no server facts),
    cached per (size, mtime) like the parsed config."""
    from .modelconfig import validate_text

    try:
        stat = path.stat()
        key = (stat.st_size, stat.st_mtime_ns)
        with _cache_lock:
            cached = _errors_cache.get(path)
        if cached and cached[0] == key:
            return cached[1]
        count = sum(
            1 for f in validate_text(path.read_bytes(), folder_name=path.parent.name) if f.is_error
        )
    except OSError:
        return 0
    with _cache_lock:
        _errors_cache[path] = (key, count)
    return count


def get_model(root: Path, name: str) -> ModelFolder:
    return _folder(model_folder(name, root))


def version_folders(model: ModelFolder) -> list[VersionFolder]:
    """Each version's files. os.walk does not descend into linked folders; a file or a
    version folder linked out of the repository is listed (``outside``), never read."""
    root = model.path.parent
    result = []
    for number in model.versions:
        vpath = model.path / str(number)
        files = []
        if vpath.is_symlink() and leaves(vpath, root):
            result.append(VersionFolder(number, vpath, [_outside(vpath, vpath)]))
            continue
        for dirpath, dirnames, filenames in os.walk(vpath):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for filename in sorted(filenames):
                fpath = Path(dirpath) / filename
                if fpath.is_symlink() and leaves(fpath, root):
                    files.append(_outside(fpath, vpath))
                    continue
                try:
                    stat = fpath.stat()
                except OSError:
                    continue
                files.append(
                    ModelFile(
                        str(fpath.relative_to(vpath)),
                        stat.st_size,
                        datetime.fromtimestamp(stat.st_mtime, tz=UTC),
                        fpath,
                    )
                )
        result.append(VersionFolder(number, vpath, files))
    return result


def _outside(path: Path, vpath: Path) -> ModelFile:
    rel = str(path.relative_to(vpath)) if path != vpath else "."
    return ModelFile(rel, 0, datetime.fromtimestamp(0, tz=UTC), path, outside=True)


def sha256_of(path: Path, root: Path) -> str:
    """The file's sha256 (a file of the repository at ``root``), from the digest cache when
    size and mtime are unchanged."""
    from .models import FileDigest

    check_root(Path(root))
    if path.is_symlink() and leaves(path, Path(root)):
        raise RepositoryError(f"{path.name} is {OUTSIDE}")
    stat = path.stat()
    cached = FileDigest.objects.filter(path=str(path)).first()
    if cached and cached.size == stat.st_size and cached.mtime_ns == stat.st_mtime_ns:
        return cached.sha256
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    FileDigest.objects.update_or_create(
        path=str(path),
        defaults={"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": digest.hexdigest()},
    )
    return digest.hexdigest()


def _dtype(value: int) -> str:
    return model_config_pb2.DataType.Name(value).removeprefix("TYPE_")


def _dims(dims) -> str:  # type: ignore[no-untyped-def]
    return "[" + ", ".join(str(d) for d in dims) + "]"


def version_policy_text(config: model_config_pb2.ModelConfig) -> str:
    policy = config.version_policy
    which = policy.WhichOneof("policy_choice")
    if which == "all":
        return "all versions"
    if which == "specific":
        return "versions " + ", ".join(str(v) for v in policy.specific.versions)
    num = policy.latest.num_versions if which == "latest" else 1
    return f"latest {num or 1}"


def config_overview(config: model_config_pb2.ModelConfig) -> dict[str, object]:
    """The config as a user reads it: tensors, batching, instances, version policy."""

    def tensors(items) -> list[dict[str, object]]:  # type: ignore[no-untyped-def]
        return [
            {
                "name": t.name,
                "data_type": _dtype(t.data_type),
                "dims": _dims(t.dims),
                "reshape": _dims(t.reshape.shape) if t.HasField("reshape") else "",
                "optional": getattr(t, "optional", False),
            }
            for t in items
        ]

    batching: dict[str, object] | None = None
    if config.HasField("dynamic_batching"):
        db = config.dynamic_batching
        batching = {
            "preferred_batch_size": list(db.preferred_batch_size),
            "max_queue_delay_microseconds": db.max_queue_delay_microseconds,
            "preserve_ordering": db.preserve_ordering,
            "priority_levels": db.priority_levels,
        }
    return {
        "backend": config.backend or config.platform or "(not set)",
        "max_batch_size": config.max_batch_size,
        "inputs": tensors(config.input),
        "outputs": tensors(config.output),
        "dynamic_batching": batching,
        "sequence_batching": config.HasField("sequence_batching"),
        "ensemble": config.HasField("ensemble_scheduling"),
        "instances": instance_summary(config),
        "version_policy": version_policy_text(config),
        "parameters": {k: v.string_value for k, v in config.parameters.items()},
    }
