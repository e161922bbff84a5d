"""REST API of the servers the dashboard manages: ``/api/v1/servers/`` (list, create) and
``/api/v1/servers/<name>/`` (get, patch, delete). Thin over ``server_admin`` (the checks,
the permission, the audit) and ``fleet`` (health and version). No answer ever holds the
API key: ``api_key_set`` says whether there is one."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound, PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from common.api_errors import errors_response
from registry import server_access, servers
from registry.server_rules import InvalidServer
from registry.servers import Server, UnknownServer

from . import overview as fleet
from . import server_admin
from .server_admin import NotAllowed, Refused


class ServerStatusSerializer(serializers.Serializer):
    up = serializers.BooleanField()
    watched = serializers.BooleanField(help_text="whether a poller watches it (live states)")
    reason = serializers.CharField(help_text="why it is down; empty while up")
    version = serializers.CharField(help_text="Triton's version; empty when not known")


class ServerSerializer(serializers.Serializer):
    name = serializers.CharField()
    grpc_url = serializers.CharField()
    http_url = serializers.CharField()
    metrics_url = serializers.CharField()
    repository = serializers.CharField(help_text="the model repository as the dashboard sees it")
    labels = serializers.DictField(child=serializers.CharField())
    api_key_set = serializers.BooleanField(help_text="whether a restricted-API key is stored")
    api_key_header = serializers.CharField()
    require_local_worker = serializers.BooleanField(
        help_text="jobs run only on a worker consuming triton.<name>, else they wait"
    )
    from_env = serializers.BooleanField(
        help_text="the server 'default', defined by TRITON_*: not editable here"
    )
    shares_repository_with = serializers.ListField(child=serializers.CharField())
    status = ServerStatusSerializer()


class ServerWriteSerializer(serializers.Serializer):
    """What a create (name and grpc_url required) or a change (any subset, not the name)
    takes; the checks are server_rules', each refusal on its field."""

    name = serializers.CharField(required=False)
    grpc_url = serializers.CharField(required=False, help_text="host:port")
    http_url = serializers.CharField(
        required=False, help_text="host:port; on create, default <gRPC host>:8000"
    )
    metrics_url = serializers.CharField(
        required=False, help_text="on create, default http://<gRPC host>:8002/metrics"
    )
    repository = serializers.CharField(
        required=False, help_text="absolute path; on create, default MODEL_REPOSITORY"
    )
    labels = serializers.DictField(child=serializers.CharField(), required=False)
    api_key = serializers.CharField(
        required=False, write_only=True, allow_blank=True,
        help_text="stored, never returned; on change, \"\" clears it and absent keeps it",
    )  # fmt: skip
    api_key_header = serializers.CharField(required=False)
    require_local_worker = serializers.BooleanField(required=False)


ERROR = inline_serializer(
    "ServerError",
    {
        "message": serializers.CharField(),
        "field": serializers.CharField(allow_null=True),
        "errors": serializers.DictField(
            child=serializers.ListField(child=serializers.CharField()), required=False
        ),
    },
)
REMOVED = inline_serializer(
    "ServerRemoved",
    {
        "message": serializers.CharField(),
        "intents_deleted": serializers.IntegerField(),
        "history_points_deleted": serializers.IntegerField(),
    },
)


def _json(column: fleet.Column, shares: list[str]) -> dict[str, Any]:
    body = column.server.as_json()
    body["api_key_header"] = column.server.api_key_header
    body["shares_repository_with"] = shares
    body["status"] = {
        "up": column.up,
        "watched": column.watched,
        "reason": column.reason,
        "version": column.version,
    }
    return body


def _described(user: Any, shown: list[Server]) -> list[dict[str, Any]]:
    """Each server's JSON; the servers it shares a repository with are those the reader may
    see (a hidden server is never named)."""
    every = server_access.visible_servers(user)
    keys = {s.name: servers.repository_key(s) for s in every}
    return [
        _json(c, [o for o in keys if o != c.name and keys[o] == keys[c.name]])
        for c in fleet.columns(shown)
    ]


def _body(request: Request) -> dict[str, Any]:
    if not isinstance(request.data, dict):
        raise InvalidServer({"body": "send a JSON object of the server's fields"})
    return dict(request.data)


def _get(request: Request, name: str) -> Server:
    """The server, or 404 as if it did not exist when the reader's narrowing hides it."""
    try:
        return server_access.check_visible(request.user, servers.get(name))
    except UnknownServer as exc:
        raise NotFound(exc.message) from None


def _refused(exc: Exception) -> Response:
    if isinstance(exc, NotAllowed):
        raise PermissionDenied(exc.message)
    if isinstance(exc, InvalidServer):
        return errors_response({field: [message] for field, message in exc.errors.items()})
    if isinstance(exc, UnknownServer):
        raise NotFound(exc.message)
    return Response({"message": str(exc), "field": None}, status=status.HTTP_409_CONFLICT)


class ServerListView(APIView):
    @extend_schema(
        responses=ServerSerializer(many=True), summary="Every Triton server, with its health"
    )
    def get(self, request: Request) -> Response:
        return Response(_described(request.user, server_access.visible_servers(request.user)))

    @extend_schema(
        request=ServerWriteSerializer,
        responses={201: ServerSerializer, 400: ERROR, 403: ERROR},
        summary="Add a Triton server (Admins)",
        description="It is not contacted: one that does not answer is added and shown down.",
    )
    def post(self, request: Request) -> Response:
        # The role first, before the body is parsed: a non-Admin's body is never read.
        try:
            server_admin.require(request.user, "server.add", "")
        except NotAllowed as exc:
            return _refused(exc)
        named = request.data.get("name") if isinstance(request.data, dict) else ""
        try:
            server_admin.require(request.user, "server.add", str(named or "")[:40])
            server = server_admin.create(request.user, _body(request))
        except (NotAllowed, InvalidServer) as exc:
            return _refused(exc)
        return Response(_described(request.user, [server])[0], status=status.HTTP_201_CREATED)


class ServerDetailView(APIView):
    @extend_schema(responses={200: ServerSerializer, 404: ERROR}, summary="One Triton server")
    def get(self, request: Request, name: str) -> Response:
        return Response(_described(request.user, [_get(request, name)])[0])

    @extend_schema(
        request=ServerWriteSerializer,
        responses={200: ServerSerializer, 400: ERROR, 403: ERROR, 404: ERROR, 409: ERROR},
        summary="Change a Triton server (Admins; not its name, not 'default')",
    )
    def patch(self, request: Request, name: str) -> Response:
        server = _get(request, name)
        try:
            server_admin.require(request.user, "server.change", name, server)
            server, _ = server_admin.update(request.user, name, _body(request))
        except (NotAllowed, InvalidServer, Refused, UnknownServer) as exc:
            return _refused(exc)
        return Response(_described(request.user, [server])[0])

    @extend_schema(
        request=None,
        responses={200: REMOVED, 403: ERROR, 404: ERROR, 409: ERROR},
        summary="Remove a Triton server (Admins; refused while it has queued or running work)",
    )
    def delete(self, request: Request, name: str) -> Response:
        _get(request, name)
        try:
            removed = server_admin.remove(request.user, name)
        except (NotAllowed, Refused, UnknownServer) as exc:
            return _refused(exc)
        return Response(
            {"message": removed.message, "intents_deleted": removed.intents,
             "history_points_deleted": removed.history_points}
        )  # fmt: skip
