"""config.pbtxt over the REST API: GET with an ETag, PUT with If-Match (412 on mismatch),
and validation. Same saving path as the editor (revision, audit, atomic write), on the
repository of the server ``?server=`` names."""

from __future__ import annotations

from typing import Any, cast

from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.exceptions import NotFound, PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from registry.server_context import SERVER_PARAMETER, server_of
from registry.servers import Server

from ..modelconfig.findings import Finding
from ..models import ConfigRevision
from ..repository import RepositoryError
from . import saving
from .reload_offer import reload_offer
from .rights import edit_refusal

MAX_BODY = 1024 * 1024

ConfigSerializer = inline_serializer(
    "Config",
    {
        "model": serializers.CharField(),
        "sha256": serializers.CharField(),
        "text": serializers.CharField(),
    },
)
ConfigSavedSerializer = inline_serializer(
    "ConfigSaved",
    {
        "model": serializers.CharField(),
        "sha256": serializers.CharField(),
        "text": serializers.CharField(),
        "changed": serializers.BooleanField(),
        "revision": serializers.IntegerField(allow_null=True),
        "findings": serializers.ListField(child=serializers.DictField()),
        "reload_where_loaded": serializers.JSONField(
            allow_null=True,
            help_text="null unless other servers share this repository: the servers where "
            "the model is loaded (servers), the others with why (not_offered), and the body "
            "of POST /api/v1/rollouts/ that reloads it there (rollout; null when none)",
        ),
    },
)
ConfigWriteSerializer = inline_serializer(
    "ConfigWrite",
    {"text": serializers.CharField(), "message": serializers.CharField(required=False)},
)


class FindingSerializer(serializers.Serializer):
    severity = serializers.CharField()
    rule = serializers.CharField()
    message = serializers.CharField()
    field = serializers.CharField()
    line = serializers.IntegerField(allow_null=True)
    col = serializers.IntegerField(allow_null=True)


def _current(name: str, server: Server) -> saving.CurrentConfig:
    try:
        current = saving.read_current(name, server)
    except RepositoryError as exc:
        raise NotFound(str(exc)) from exc
    if not current.exists:
        raise NotFound(f"model '{name}' has no config.pbtxt")
    return current


def _findings(findings: list[Finding]) -> list[dict[str, Any]]:
    return [
        {
            k: v
            for k, v in f.to_dict().items()
            if k in ("severity", "rule", "message", "field", "line", "col")
        }
        for f in findings
    ]


def _invalid(findings: list[Finding], status: int = 422) -> Response:
    first = next((f for f in findings if f.is_error), findings[0])
    where = f"line {first.line}: " if first.line else ""
    return Response(
        {
            "message": f"{where}{first.message}",
            "field": first.field or "text",
            "findings": _findings(findings),
        },
        status=status,
    )


def _body_text(request: Request) -> tuple[str | bytes, str]:
    if request.content_type.startswith("application/json"):
        data = request.data if isinstance(request.data, dict) else {}
        text = data.get("text")
        if not isinstance(text, str):
            raise serializers.ValidationError({"text": "send the config as a string in 'text'"})
        return text, str(data.get("message", ""))[:500]
    return request.body, request.headers.get("X-Config-Message", "")[:500]


class ConfigView(APIView):
    @extend_schema(
        responses=ConfigSerializer,
        parameters=[SERVER_PARAMETER],
        summary="The model's config.pbtxt (ETag: its sha256)",
    )
    def get(self, request: Request, name: str) -> Response:
        server = server_of(request)
        current = _current(name, server)
        etag = f'"{current.sha256}"'
        if request.headers.get("If-None-Match") == etag:
            return Response(status=304, headers={"ETag": etag})
        return Response(
            {"model": name, "sha256": current.sha256, "text": current.text}, headers={"ETag": etag}
        )

    @extend_schema(
        request=ConfigWriteSerializer,
        responses={200: ConfigSavedSerializer},
        parameters=[
            OpenApiParameter("If-Match", str, OpenApiParameter.HEADER, required=True),
            SERVER_PARAMETER,
        ],
        summary="Replace config.pbtxt (text kept exactly; refused with 412 if it changed)",
    )
    def put(self, request: Request, name: str) -> Response:
        server = server_of(request)
        if refused := edit_refusal(request, server):
            raise PermissionDenied(refused)
        _current(name, server)  # 404 for an unknown model before anything else
        expected = request.headers.get("If-Match", "").strip().strip('"')
        if not expected:
            return Response(
                {
                    "message": "send If-Match: the sha256 (ETag) of the config you edited",
                    "field": "If-Match",
                },
                status=428,
            )
        if len(request.body) > MAX_BODY:
            return Response({"message": "config larger than 1 MiB", "field": "text"}, status=413)
        text, message = _body_text(request)
        findings = saving.editor_findings(text, name, server)
        if any(f.is_error for f in findings):
            return _invalid(findings)
        as_text = text if isinstance(text, str) else saving.decode_for_display(text)
        try:
            # TextChoices members are str; untyped Django shows mypy a (value, label) tuple.
            result = saving.save_config(
                name, as_text, server=server, base_sha256=expected, author_id=request.user.pk,
                source=cast(str, ConfigRevision.Source.API), message=message,
            )  # fmt: skip
        except saving.SaveConflict as exc:
            return Response(
                {"message": "config.pbtxt changed since that ETag: GET it again and merge",
                 "field": "If-Match", "current_sha256": exc.current.sha256},
                status=412, headers={"ETag": f'"{exc.current.sha256}"'},
            )  # fmt: skip
        except saving.InvalidConfig as exc:
            return _invalid(exc.findings)
        except saving.CodeChangeRefused as exc:
            return Response({"message": exc.message, "field": exc.field}, status=403)
        except saving.SaveError as exc:
            return Response({"message": exc.message, "field": None}, status=507)
        sha = saving.sha256_hex(as_text.encode("utf-8"))
        # Several servers on this repository: where it is loaded, and the rollout that
        # reloads it there (offered, never run).
        offer = reload_offer(server, name, request.user) if result.changed else None
        return Response(
            {"model": name, "sha256": sha, "text": as_text, "changed": result.changed,
             # The per-model number the pages show ("revision #3"), not the primary key.
             "revision": result.revision.number if result.revision else None,
             "findings": _findings(result.findings),
             "reload_where_loaded": offer.as_json() if offer else None},
            headers={"ETag": f'"{sha}"'},
        )  # fmt: skip


class ConfigValidateView(APIView):
    @extend_schema(
        request=ConfigWriteSerializer,
        responses=inline_serializer(
            "Validation",
            {"ok": serializers.BooleanField(), "findings": FindingSerializer(many=True)},
        ),
        parameters=[SERVER_PARAMETER],
        summary="Validate a config.pbtxt text for this model without saving it",
    )
    def post(self, request: Request, name: str) -> Response:
        server = server_of(request)
        _current(name, server)
        if len(request.body) > MAX_BODY:
            return Response({"message": "config larger than 1 MiB", "field": "text"}, status=413)
        text, _ = _body_text(request)
        findings = saving.editor_findings(text, name, server)
        return Response(
            {"ok": not any(f.is_error for f in findings), "findings": _findings(findings)}
        )
