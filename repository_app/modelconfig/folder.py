"""Read what a model folder holds that the config rules depend on (``FolderFacts``).

Shared by the folder-level check and by ``validate_path`` on a single config.pbtxt, so
both infer the backend from the same files and give the same verdict.
"""

from __future__ import annotations

import re
from pathlib import Path

from .context import FolderFacts
from .python_model import model_py_auto_complete

_VERSION_RE = re.compile(r"^\d+$")


def numeric_version_dirs(path: Path) -> list[Path]:
    """Version folders (digits only, not hidden), in Triton's order: by name as text."""
    try:
        return sorted(
            (p for p in path.iterdir() if p.is_dir() and _VERSION_RE.match(p.name)),
            key=lambda p: p.name,
        )
    except OSError:
        return []


def folder_facts(path: Path, default_model_filename: str = "") -> FolderFacts:
    """Facts of the model folder ``path`` (the one holding config.pbtxt)."""
    versions = [v for v in numeric_version_dirs(path) if int(v.name) > 0]
    version_files: set[str] | None = None
    version_dir = versions[0] if versions else None
    if version_dir is not None:
        try:
            version_files = {p.name for p in version_dir.iterdir()}
        except OSError:
            version_files = set()
    model_py = default_model_filename or "model.py"
    return FolderFacts(
        path=path,
        version_files=version_files,
        is_dir=(lambda name: (version_dir / name).is_dir()) if version_dir else None,
        python_auto_complete=model_py_auto_complete([v / model_py for v in versions]),
    )
