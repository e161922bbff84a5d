"""Shared inputs of the rule modules: the parsed config plus what we know around it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tritonclient.grpc import model_config_pb2

from .backends import BackendFields, complete_backend_fields
from .findings import Finding, Severity
from .parsing import FieldLocator

TritonVersion = tuple[int, int]


@dataclass(frozen=True)
class ServerFacts:
    """Facts about the Triton server the config will load on (for server-level rules).

    ``gpu_ids`` counts only when ``gpus_known`` (a server whose metrics did not answer,
    or a ``--triton-version`` without ``--gpus``, says nothing about its GPUs).
    ``version`` is Triton's own (core) version, e.g. ``(2, 51)`` for release 24.10;
    None judges against the newest release the validator knows.
    """

    gpu_ids: list[int] = field(default_factory=list)
    gpus_known: bool = True
    version: TritonVersion | None = None


@dataclass(frozen=True)
class FolderFacts:
    """What the model folder around a config.pbtxt holds, for the rules that depend on it.

    ``version_files`` lists the first version folder (the one Triton inspects to infer
    the backend; None when there is no version folder); ``python_auto_complete`` tells
    whether model.py defines ``auto_complete_config`` (None: no model.py, or we cannot tell).
    """

    path: Path
    version_files: set[str] | None = None
    is_dir: Callable[[str], bool] | None = None
    python_auto_complete: bool | None = None

    @property
    def name(self) -> str:
        return self.path.name


@dataclass
class RuleContext:
    """Everything a rule may look at; ``strict`` mirrors ``--disable-auto-complete-config``."""

    config: model_config_pb2.ModelConfig
    locator: FieldLocator = field(default_factory=FieldLocator)
    folder_name: str | None = None
    server: ServerFacts | None = None
    strict: bool = False
    fields: BackendFields | None = None
    folder: FolderFacts | None = None

    def __post_init__(self) -> None:
        if self.fields is None:
            c = self.config
            if self.folder is not None:
                self.fields = complete_backend_fields(
                    c.platform,
                    c.backend,
                    c.default_model_filename,
                    model_name=self.folder_name or self.folder.name,
                    version_files=self.folder.version_files,
                    is_dir=self.folder.is_dir,
                )
            else:
                # Text only: a "model.<backend>" folder name still names a custom backend,
                # but without the version folder we cannot say that nothing else would.
                name = self.folder_name if self.folder_name and "." in self.folder_name else None
                self.fields = complete_backend_fields(
                    c.platform, c.backend, c.default_model_filename, model_name=name
                )

    @property
    def name(self) -> str:
        """The model name as Triton uses it (config name, else the folder name)."""
        return self.config.name or self.folder_name or "<unnamed>"

    @property
    def platform(self) -> str:
        assert self.fields is not None
        return self.fields.platform

    @property
    def backend(self) -> str:
        assert self.fields is not None
        return self.fields.backend

    @property
    def is_ensemble(self) -> bool:
        return self.platform == "ensemble"

    @property
    def gpu_facts(self) -> ServerFacts | None:
        """The server facts when they include the server's GPUs (else None)."""
        return self.server if self.server is not None and self.server.gpus_known else None

    @property
    def python_auto_complete(self) -> bool | None:
        """Whether model.py defines auto_complete_config (None: unknown)."""
        return self.folder.python_auto_complete if self.folder is not None else None

    def finding(self, severity: Severity, rule: str, message: str, field_path: str = "") -> Finding:
        """A finding positioned at ``field_path`` (or its nearest written ancestor)."""
        line, col = self.locator.locate(field_path) if field_path else (None, None)
        return Finding(severity, rule, message, field_path, line, col)
