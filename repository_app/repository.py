"""The model repository on disk: model folders, their parsed configs, versions and files.

Only reads here. Configs are parsed with the validator's parser and cached per
(path, size, mtime), so listing 500 models re-parses only what changed.
"""

from __future__ import annotations

import hashlib
import os
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from tritonclient.grpc import model_config_pb2

from .modelconfig.parsing import parse_config

CONFIG_FILE = "config.pbtxt"
KIND_NAMES = {v: k for k, v in model_config_pb2.ModelInstanceGroup.Kind.items()}


class RepositoryError(Exception):
    """A bad model name or a missing folder, with a message fit for a user."""


@dataclass
class ModelFolder:
    name: str
    path: Path
    config: model_config_pb2.ModelConfig | None
    config_error: str = ""
    versions: list[int] = field(default_factory=list)

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


def check_model_name(name: str) -> None:
    """Triton's folder rules, and no way out of the repository."""
    if not name or name in (".", "..") or name.startswith("."):
        raise RepositoryError(
            f"invalid model name {name!r}: it must not be empty or start with '.'"
        )
    if "/" in name or "\\" in name or "\x00" in name:
        raise RepositoryError(f"invalid model name {name!r}: no path separators or NUL bytes")
    if len(name.encode()) > 255:
        raise RepositoryError("invalid model name: longer than 255 bytes")


_cache: dict[Path, tuple[tuple[int, int], model_config_pb2.ModelConfig | None, str]] = {}
_cache_lock = threading.Lock()


def read_config(path: Path) -> tuple[model_config_pb2.ModelConfig | None, str]:
    """(config, "") or (None, the first error as `line:col: message`)."""
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


def _versions(path: Path) -> list[int]:
    found = []
    with os.scandir(path) as entries:
        for entry in entries:
            # Triton's rule: a version folder is a positive integer without leading zeros.
            if entry.is_dir() and entry.name.isdigit() and not entry.name.startswith("0"):
                found.append(int(entry.name))
    return sorted(found)


def scan(root: Path) -> list[ModelFolder]:
    """Every model folder under root (hidden folders skipped), sorted by name."""
    if not root.is_dir():
        return []
    models = []
    with os.scandir(root) as entries:
        for entry in entries:
            if not entry.is_dir() or entry.name.startswith("."):
                continue
            models.append(_folder(Path(entry.path)))
    return sorted(models, key=lambda m: m.name)


def _folder(path: Path) -> ModelFolder:
    config, error = read_config(path / CONFIG_FILE)
    return ModelFolder(path.name, path, config, error, _versions(path))


def get_model(root: Path, name: str) -> ModelFolder:
    check_model_name(name)
    path = root / name
    if not path.is_dir():
        raise RepositoryError(f"no model folder '{name}' in {root}")
    return _folder(path)


def version_folders(model: ModelFolder) -> list[VersionFolder]:
    result = []
    for number in model.versions:
        vpath = model.path / str(number)
        files = []
        for dirpath, dirnames, filenames in os.walk(vpath):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for filename in sorted(filenames):
                fpath = Path(dirpath) / filename
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


def sha256_of(path: Path) -> str:
    """The file's sha256, from the digest cache when size and mtime are unchanged."""
    from .models import FileDigest

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
