"""REST API for the model repository and Triton control (thin: same modules as the pages).
Every view is about the server ``?server=NAME`` names (the default one when absent)."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound, PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from registry import server_access
from registry.server_context import SERVER_PARAMETER, server_of
from registry.servers import Server
from registry.triton_clients import get_client
from triton_api.client import TritonError
from triton_api.statistics import summarize_all

from . import control, repository
from .control import CANNOT_CONTROL, CONTROL_PERMISSION
from .status import group_index, merge, state_json


class VersionStateSerializer(serializers.Serializer):
    version = serializers.CharField()
    state = serializers.CharField()
    reason = serializers.CharField()


class ModelStateSerializer(serializers.Serializer):
    state = serializers.CharField(
        help_text="READY, LOADING, UNLOADING, UNAVAILABLE or 'not loaded'"
    )
    label = serializers.CharField(
        help_text="what a person reads: the state, or 'unloaded' after a deliberate unload"
    )
    tone = serializers.ChoiceField(["ok", "busy", "error", "neutral"])
    versions = VersionStateSerializer(many=True)
    reason = serializers.CharField()


class ModelSerializer(serializers.Serializer):
    name = serializers.CharField()
    on_disk = serializers.BooleanField()
    backend = serializers.CharField()
    versions_on_disk = serializers.ListField(child=serializers.IntegerField())
    max_batch_size = serializers.IntegerField(allow_null=True)
    dynamic_batching = serializers.BooleanField()
    instances = serializers.CharField()
    config_error = serializers.CharField()
    triton = ModelStateSerializer()


class ActionSerializer(serializers.Serializer):
    model = serializers.CharField()
    action = serializers.CharField()
    ok = serializers.BooleanField()
    message = serializers.CharField()
    previous_serving = serializers.BooleanField(required=False)
    states = ModelStateSerializer(required=False)


def _row_json(row: Any) -> dict[str, Any]:
    folder = row.folder
    return {
        "name": row.name,
        "on_disk": folder is not None,
        "backend": folder.backend if folder else "",
        "versions_on_disk": folder.versions if folder else [],
        "max_batch_size": folder.max_batch_size if folder else None,
        "dynamic_batching": bool(folder and folder.dynamic_batching),
        "instances": folder.instances if folder else "",
        "config_error": folder.config_error if folder else "",
        "triton": row.as_json(),
    }


def _index(server: Server) -> list | None:
    try:
        return get_client(server).repository_index()
    except TritonError:
        return None


class ModelListView(APIView):
    @extend_schema(
        responses=ModelSerializer(many=True),
        parameters=[SERVER_PARAMETER],
        summary="Every model on disk or in Triton",
    )
    def get(self, request: Request) -> Response:
        server = server_of(request)
        rows = merge(repository.scan(server.repository), _index(server))
        return Response([_row_json(r) for r in sorted(rows, key=lambda r: r.name)])


class ModelDetailView(APIView):
    @extend_schema(
        responses=ModelSerializer,
        parameters=[SERVER_PARAMETER],
        summary="One model, with statistics when loaded",
    )
    def get(self, request: Request, name: str) -> Response:
        server = server_of(request)
        try:
            repository.check_model_name(name)
        except repository.RepositoryError as exc:
            raise NotFound(str(exc)) from exc
        rows = {r.name: r for r in merge(repository.scan(server.repository), _index(server))}
        if name not in rows:
            raise NotFound(f"no model '{name}' on disk or in Triton")
        body = _row_json(rows[name])
        try:
            stats = get_client(server).model_statistics(name)
            body["statistics"] = summarize_all(stats).get(name, [])
        except TritonError:
            body["statistics"] = []
        return Response(body)

    @extend_schema(
        request=None,
        parameters=[
            OpenApiParameter("unload", bool, description="unload the model first"),
            SERVER_PARAMETER,
        ],
        responses={200: inline_serializer("ModelDeleted", {"message": serializers.CharField()})},
        summary="Delete a model folder (Admins; refused while loaded unless unload=1)",
    )
    def delete(self, request: Request, name: str) -> Response:
        from .uploads import deleting
        from .uploads.api import error
        from .uploads.staging import UploadError

        unload = request.query_params.get("unload") in ("1", "true", "yes")
        try:
            deleted = deleting.delete_model(server_of(request), name, request.user, unload=unload)
        except UploadError as exc:
            return error(exc)
        return Response({"model": name, "unloaded": deleted.unloaded, "message": deleted.message})


class ModelStateView(APIView):
    @extend_schema(
        responses=ModelStateSerializer,
        parameters=[SERVER_PARAMETER],
        summary="Triton's state of one model",
    )
    def get(self, request: Request, name: str) -> Response:
        try:
            states = group_index(get_client(server_of(request)).repository_index()).get(name, [])
        except TritonError as exc:
            return Response({"message": exc.message, "field": None}, status=503)
        return Response(state_json(states))


class ModelActionView(APIView):
    action_name = "load"

    @extend_schema(
        request=None,
        responses={200: ActionSerializer, 202: ActionSerializer},
        parameters=[
            OpenApiParameter(
                "wait", bool, description="wait for the outcome (200) instead of 202 at once"
            ),
            SERVER_PARAMETER,
        ],
        summary="Load, unload or reload a model",
    )
    def post(self, request: Request, name: str) -> Response:
        server = server_of(request)
        refused = server_access.refusal(request.user, CONTROL_PERMISSION, server, CANNOT_CONTROL)
        if refused:
            from team import audit

            audit.record(
                request.user,
                self.action_name,
                model_name=name,
                server=server.name,
                outcome="denied",
                detail=refused,
            )
            raise PermissionDenied(refused)
        try:
            repository.check_model_name(name)
            if not control.model_exists(server, name):
                raise NotFound(f"no model '{name}' on disk or in Triton")
            if request.query_params.get("wait") in ("1", "true", "yes"):
                outcome = control.act(
                    server,
                    self.action_name,
                    name,
                    request.user.get_username(),
                    user_id=request.user.pk,
                )
                code = status.HTTP_200_OK if outcome.ok else status.HTTP_409_CONFLICT
                return Response(
                    {"model": name, "action": self.action_name, "ok": outcome.ok,
                     "message": outcome.message, "previous_serving": outcome.previous_serving,
                     "states": outcome.states},
                    status=code,
                )  # fmt: skip
            control.start_action(
                server, self.action_name, name, request.user.get_username(), user_id=request.user.pk
            )
        except (control.ActionRefused, repository.RepositoryError) as exc:
            return Response({"message": str(exc), "field": None}, status=409)
        return Response(
            {"model": name, "action": self.action_name, "ok": True,
             "message": f"{self.action_name} of {name} started"},
            status=status.HTTP_202_ACCEPTED,
        )  # fmt: skip


class VersionFileSerializer(serializers.Serializer):
    path = serializers.CharField()
    size = serializers.IntegerField()
    modified = serializers.DateTimeField()
    sha256 = serializers.CharField()


class VersionOnDiskSerializer(serializers.Serializer):
    version = serializers.IntegerField()
    state = serializers.CharField()
    files = VersionFileSerializer(many=True)


class VersionListView(APIView):
    @extend_schema(
        responses=VersionOnDiskSerializer(many=True),
        parameters=[SERVER_PARAMETER],
        summary="Versions on disk, their files and Triton state",
    )
    def get(self, request: Request, name: str) -> Response:
        server = server_of(request)
        try:
            folder = repository.get_model(server.repository, name)
        except repository.RepositoryError as exc:
            raise NotFound(str(exc)) from exc
        index = _index(server) or []
        states = {s.version: s.state for s in index if s.name == name}
        return Response(
            [
                {
                    "version": v.number,
                    "state": states.get(str(v.number)) or "not loaded",
                    "files": [
                        {
                            "path": f.relpath,
                            "size": f.size,
                            "modified": f.mtime,
                            "sha256": ""
                            if f.outside
                            else repository.sha256_of(f.path, server.repository),
                        }
                        for f in v.files
                    ],  # fmt: skip
                }
                for v in repository.version_folders(folder)
            ]
        )
