"""The Triton servers the dashboard manages besides the environment's ``default``."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import models


class TritonServer(models.Model):
    """A Triton server besides the environment's ``default`` (registry.servers reads
    these rows). The API key is stored to be sent, never shown: not in ``str``/``repr``,
    not in any JSON (``servers.Server.as_json``)."""

    name = models.CharField(max_length=40, unique=True)
    grpc_url = models.CharField(max_length=255)
    # grpc_url without case or surrounding space: one server per gRPC address.
    grpc_key = models.CharField(max_length=255, unique=True, editable=False)
    http_url = models.CharField(max_length=255)
    metrics_url = models.CharField(max_length=1024)
    api_key = models.CharField(max_length=256, blank=True)
    api_key_header = models.CharField(max_length=64, default="dashboard-key")
    labels = models.JSONField(default=dict, blank=True)
    # The model repository as the dashboard host sees it (absolute path).
    repository = models.CharField(max_length=1024)
    # An admin's choice: this server's jobs run only on a worker consuming its own queue
    # (triton.<name>, on its GPU host), never from the dashboard's host (profiler_app.queues).
    require_local_worker = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        # The table kept its name when the model moved here from repository_app.
        db_table = "repository_app_tritonserver"
        ordering = ["name"]

    def __str__(self) -> str:
        return f"{self.name} ({self.grpc_url})"

    def __repr__(self) -> str:
        return f"<TritonServer {self.name} {self.grpc_url}>"

    def save(self, *args: Any, **kwargs: Any) -> None:
        from .server_rules import grpc_key

        self.grpc_key = grpc_key(self.grpc_url)
        super().save(*args, **kwargs)

    def clean_fields(self, exclude: Any = None) -> None:
        # server_rules owns every field's checks (lengths included), with one message each.
        owned = {"name", "grpc_url", "http_url", "metrics_url", "api_key", "api_key_header",
                 "labels", "repository", "require_local_worker"}  # fmt: skip
        super().clean_fields(exclude={*(exclude or ()), *owned})

    def clean(self) -> None:
        """The one set of checks (server_rules), each refusal on its field."""
        from .server_rules import InvalidServer, check

        try:
            cleaned = check(
                {
                    "name": self.name,
                    "grpc_url": self.grpc_url,
                    "http_url": self.http_url,
                    "metrics_url": self.metrics_url,
                    "api_key": self.api_key,
                    "api_key_header": self.api_key_header,
                    "labels": self.labels,
                    "repository": self.repository,
                    "require_local_worker": self.require_local_worker,
                },
                exclude_pk=self.pk,
            )
        except InvalidServer as exc:
            raise ValidationError(exc.errors) from None
        for field, value in cleaned.items():
            setattr(self, field, str(value) if field == "repository" else value)
