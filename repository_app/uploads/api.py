"""REST endpoints of the upload protocol (docs/uploads.md); the browser uses the same ones.

POST   /api/v1/uploads/                       create: model, filename, size, ...
HEAD   /api/v1/uploads/<id>/                  Upload-Offset: where to resume
GET    /api/v1/uploads/<id>/                  the upload as JSON (offset, state, sha256)
PATCH  /api/v1/uploads/<id>/                  one chunk; header Upload-Offset
POST   /api/v1/uploads/<id>/complete[?wait=1] verify and publish
DELETE /api/v1/uploads/<id>/                  abort, staging removed
DELETE /api/v1/models/<name>/versions/<n>[?unload=1]
PUT    /api/v1/models/<name>/version-policy   {"policy": "latest", "num_versions": 2}
"""

from __future__ import annotations

import contextlib
from typing import Any

from django.conf import settings
from django.urls import reverse
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from registry import server_access
from registry.server_context import SERVER_PARAMETER, server_of
from registry.servers import with_server

from ..editor.rights import edit_refusal
from ..editor.saving import CodeChangeRefused, InvalidConfig, SaveConflict, SaveError
from ..models import Upload
from ..repository import RepositoryError
from . import chunks, deleting, publish, staging, version_policy
from .staging import UploadError


def upload_json(upload: Upload) -> dict[str, Any]:
    offset = (
        staging.current_offset(upload)
        if upload.state in (Upload.State.RECEIVING, Upload.State.PROCESSING)
        else upload.received
    )
    body: dict[str, Any] = {
        "id": str(upload.id),
        "server": upload.server,
        "model": upload.model,
        "new_model": upload.new_model,
        "backend": upload.backend,
        "requested_version": upload.requested_version,
        "version": upload.version,
        "filename": upload.filename,
        "is_archive": upload.is_archive,
        "size": upload.size,
        "offset": offset,
        "state": upload.state,
        "message": upload.message,
        "sha256": upload.sha256,
        "client_sha256": upload.client_sha256,
        "created_at": upload.created_at.isoformat() if upload.created_at else None,
        "finished_at": upload.finished_at.isoformat() if upload.finished_at else None,
        "chunk_size": settings.UPLOAD_CHUNK_BYTES,
        "max_chunk_size": settings.UPLOAD_MAX_CHUNK_BYTES,
        "url": reverse("api_upload", args=[upload.id]),
        "model_url": with_server(reverse("model_detail", args=[upload.model]), upload.server),
    }
    if upload.new_model and upload.state == Upload.State.PUBLISHED:
        body["editor_url"] = with_server(
            reverse("config_editor", args=[upload.model]), upload.server
        )
    return body


def error_parts(exc: UploadError) -> tuple[int, dict[str, Any], dict[str, str]]:
    """(status, JSON body, headers) of a refusal; 409s name the offset to resume from."""
    body: dict[str, Any] = {"message": exc.message, "field": exc.field, **exc.extra}
    headers = {}
    if "expected_offset" in exc.extra:
        headers["Upload-Offset"] = str(exc.extra["expected_offset"])
    return exc.status, body, headers


def error(exc: UploadError) -> Response:
    status, body, headers = error_parts(exc)
    return Response(body, status=status, headers=headers)


def get_owned(request: Any, upload_id: Any) -> Upload:
    """The caller's upload (admins see all); 404 otherwise, so ids cannot be probed, and
    for one to a server hidden from the caller (narrowed to none)."""
    return staging.check_owned(request.user, Upload.objects.filter(pk=upload_id).first())


class UploadSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    server = serializers.CharField(help_text="the Triton server whose repository it goes to")
    model = serializers.CharField()
    new_model = serializers.BooleanField()
    backend = serializers.CharField()
    requested_version = serializers.IntegerField(allow_null=True)
    version = serializers.IntegerField(allow_null=True)
    filename = serializers.CharField()
    is_archive = serializers.BooleanField()
    size = serializers.IntegerField()
    offset = serializers.IntegerField()
    state = serializers.CharField()
    message = serializers.CharField()
    sha256 = serializers.CharField()
    client_sha256 = serializers.CharField()
    chunk_size = serializers.IntegerField()
    max_chunk_size = serializers.IntegerField()
    url = serializers.CharField()
    model_url = serializers.CharField()


CreateSerializer = inline_serializer(
    "UploadCreate",
    {
        "model": serializers.CharField(),
        "filename": serializers.CharField(help_text="model.onnx, model.py, ... or an archive"),
        "size": serializers.IntegerField(help_text="bytes of the whole file"),
        "new_model": serializers.BooleanField(required=False),
        "backend": serializers.CharField(required=False, help_text="new models only"),
        "version": serializers.IntegerField(required=False, help_text="default: next free"),
        "sha256": serializers.CharField(required=False, help_text="checked at completion"),
    },
)


class UploadListView(APIView):
    @extend_schema(
        request=CreateSerializer,
        responses={201: UploadSerializer},
        parameters=[SERVER_PARAMETER],
        summary="Start an upload (into the repository of the server ?server= names)",
    )
    def post(self, request: Request) -> Response:
        data = request.data if isinstance(request.data, dict) else {}
        server = server_of(request)
        try:
            upload = staging.create_upload(
                request.user,
                server=server,
                model=data.get("model", ""),
                filename=data.get("filename", ""),
                size=data.get("size", ""),
                new_model=data.get("new_model", False),
                backend=data.get("backend", ""),
                version=data.get("version"),
                sha256=data.get("sha256", ""),
            )
        except UploadError as exc:
            if exc.status == 403:
                from team import audit

                audit.record(request.user, "upload", model_name=str(data.get("model", ""))[:128],
                             server=server.name, outcome="denied", detail=exc.message)  # fmt: skip
            return error(exc)
        response = Response(upload_json(upload), status=201)
        response["Location"] = reverse("api_upload", args=[upload.id])
        response["Upload-Offset"] = "0"
        return response

    @extend_schema(responses=UploadSerializer(many=True), summary="Your recent uploads")
    def get(self, request: Request) -> Response:
        uploads = (
            Upload.objects.all()
            if request.user.is_superuser
            else Upload.objects.filter(user=request.user)
        ).exclude(server__in=server_access.hidden_names(request.user))
        return Response([upload_json(u) for u in uploads.order_by("-created_at")[:50]])


class UploadDetailView(APIView):
    @extend_schema(responses=UploadSerializer, summary="An upload: offset to resume from, state")
    def get(self, request: Request, upload_id: str) -> Response:
        try:
            upload = get_owned(request, upload_id)
        except UploadError as exc:
            return error(exc)
        body = upload_json(upload)
        response = Response(body)
        response["Upload-Offset"] = str(body["offset"])
        response["Upload-Length"] = str(upload.size)
        response["Cache-Control"] = "no-store"
        return response

    @extend_schema(
        request={"application/octet-stream": bytes},
        parameters=[OpenApiParameter("Upload-Offset", int, OpenApiParameter.HEADER, required=True)],
        responses={200: UploadSerializer},
        summary="Append one chunk at Upload-Offset (409 with the expected offset otherwise)",
    )
    def patch(self, request: Request, upload_id: str) -> Response:
        try:
            offset = request.headers.get("Upload-Offset", request.query_params.get("offset", ""))
            length = request.META.get("CONTENT_LENGTH")
            # Read from the request as a stream: never request.body / request.data.
            upload = chunks.append_chunk(
                request.user, upload_id, offset, request._request, int(length) if length else None
            )
        except UploadError as exc:
            return error(exc)
        except ValueError:
            return error(
                UploadError("Content-Length must be a number", 400, field="Content-Length")
            )
        response = Response({"id": str(upload.id), "offset": upload.received, "size": upload.size})
        response["Upload-Offset"] = str(upload.received)
        return response

    @extend_schema(request=None, responses={204: None}, summary="Abort: remove the staged data")
    def delete(self, request: Request, upload_id: str) -> Response:
        try:
            upload = get_owned(request, upload_id)
            with staging.upload_lock(upload):
                upload.refresh_from_db()
                if upload.state != Upload.State.RECEIVING:
                    raise UploadError(f"the upload is {upload.get_state_display()}", 409)
                Upload.objects.filter(pk=upload.pk).update(
                    state=Upload.State.ABORTED, message="aborted by the user"
                )
            staging.remove_staging(upload)
        except UploadError as exc:
            return error(exc)
        return Response(status=204)


class UploadCompleteView(APIView):
    @extend_schema(
        request=None,
        parameters=[OpenApiParameter("wait", bool, description="publish before answering")],
        responses={201: UploadSerializer, 202: UploadSerializer},
        summary="Verify (sha256, names, archive, ONNX) and publish the version",
    )
    def post(self, request: Request, upload_id: str) -> Response:
        try:
            upload = get_owned(request, upload_id)
            if request.query_params.get("wait") in ("1", "true", "yes"):
                result = publish.complete(upload, request.user)
                body = upload_json(result.upload)
                body["config_generated"] = result.config_generated
                body["findings"] = [f.to_dict() for f in result.findings]
                return Response(body, status=201)
            publish.start_complete(upload, request.user)
        except UploadError as exc:
            return error(exc)
        upload.refresh_from_db()
        return Response(upload_json(upload), status=202)


class VersionDeleteView(APIView):
    @extend_schema(
        request=None,
        parameters=[
            OpenApiParameter("unload", bool, description="unload the model first"),
            SERVER_PARAMETER,
        ],
        responses={200: inline_serializer("VersionDeleted", {"message": serializers.CharField()})},
        summary="Delete a version (refused while loaded unless unload=1)",
    )
    def delete(self, request: Request, name: str, version: str) -> Response:
        unload = request.query_params.get("unload") in ("1", "true", "yes")
        server = server_of(request)
        try:
            deleted = deleting.delete_version(server, name, version, request.user, unload=unload)
        except UploadError as exc:
            return error(exc)
        return Response(
            {"model": name, "version": deleted.version, "unloaded": deleted.unloaded,
             "message": deleted.message}
        )  # fmt: skip


class VersionPolicyView(APIView):
    @extend_schema(
        request=inline_serializer(
            "VersionPolicy",
            {
                "policy": serializers.ChoiceField(["latest", "all", "specific"]),
                "num_versions": serializers.IntegerField(required=False),
                "versions": serializers.ListField(child=serializers.IntegerField(), required=False),
                "base_sha256": serializers.CharField(required=False),
            },
        ),
        responses={
            200: inline_serializer("VersionPolicySaved", {"message": serializers.CharField()})
        },
        parameters=[SERVER_PARAMETER],
        summary="Set version_policy in config.pbtxt (through the config editor's save)",
    )
    def put(self, request: Request, name: str) -> Response:
        server = server_of(request)
        if refused := edit_refusal(request, server):
            return error(UploadError(refused, 403))
        data = request.data if isinstance(request.data, dict) else {}
        try:
            result = version_policy.set_version_policy(
                server,
                name,
                str(data.get("policy", "")),
                user=request.user,
                base_sha256=data.get("base_sha256") or None,
                num_versions=data.get("num_versions"),
                versions=data.get("versions"),
            )
        except UploadError as exc:
            return error(exc)
        except RepositoryError as exc:
            return error(UploadError(str(exc), 404))
        except SaveConflict:
            return error(UploadError("config.pbtxt changed since you read it", 412))
        except InvalidConfig as exc:
            return error(UploadError(exc.findings[0].message, 422))
        except CodeChangeRefused as exc:
            return error(UploadError(exc.message, 403, field=exc.field))
        except SaveError as exc:
            return error(UploadError(exc.message, 500))
        sha = ""
        with contextlib.suppress(Exception):
            sha = result.revision.sha256 if result.revision else ""
        return Response(
            {"message": "version policy saved", "changed": result.changed, "sha256": sha}
        )
