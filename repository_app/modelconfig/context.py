"""Shared inputs of the rule modules: the parsed config plus what we know around it."""

from __future__ import annotations

from dataclasses import dataclass, field

from tritonclient.grpc import model_config_pb2

from .backends import BackendFields, complete_backend_fields
from .findings import Finding, Severity
from .parsing import FieldLocator


@dataclass(frozen=True)
class ServerFacts:
    """Facts about the Triton server the config will load on (for server-level rules)."""

    gpu_ids: list[int] = field(default_factory=list)


@dataclass
class RuleContext:
    """Everything a rule may look at; ``strict`` mirrors ``--disable-auto-complete-config``."""

    config: model_config_pb2.ModelConfig
    locator: FieldLocator = field(default_factory=FieldLocator)
    folder_name: str | None = None
    server: ServerFacts | None = None
    strict: bool = False
    fields: BackendFields | None = None

    def __post_init__(self) -> None:
        if self.fields is None:
            c = self.config
            self.fields = complete_backend_fields(c.platform, c.backend, c.default_model_filename)

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

    def finding(self, severity: Severity, rule: str, message: str, field_path: str = "") -> Finding:
        """A finding positioned at ``field_path`` (or its nearest written ancestor)."""
        line, col = self.locator.locate(field_path) if field_path else (None, None)
        return Finding(severity, rule, message, field_path, line, col)
