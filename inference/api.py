"""``/api/v1/models/<name>/try``: what the Try form asks for (GET), one request sent
(POST), and a sent request's outputs whole (``/api/v1/try-results/<token>/<output>``).

Sending needs the role that controls models on the server (Operators, Admins), checked
before the body is read; a Viewer may read the form's description. A bad input is a 400
naming its field, before anything is sent; Triton's own refusal is a 409 with its text.
"""

from __future__ import annotations

from typing import Any

from django.http import FileResponse, Http404, StreamingHttpResponse
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound, PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from registry import server_access
from registry.server_context import SERVER_PARAMETER, server_of
from repository_app.control import CONTROL_PERMISSION
from repository_app.naming import InvalidModelName, check_model_name
from team import audit
from triton_api.client import TritonError

from . import checks, results, snippets, tracing, trying
from .check_job import result_json
from .models import Check
from .tensors import BadInput
from .trace_job import session_json

CANNOT_TRY = "your role cannot send requests to models (Operators and Admins can)"
CANNOT_CHECK = "your role cannot keep or run checks (Operators and Admins can)"
CANNOT_TRACE = "your role cannot change trace settings (Operators and Admins can)"

TryBody = inline_serializer(
    "TryRequest",
    {
        "inputs": serializers.DictField(
            help_text='per input: {"mode": "values|random|zeros|json|npy|omit", "values": '
            'text, JSON or base64 .npy, "dims": "4,16" for dimensions the model leaves open}'
        ),
        "batch": serializers.IntegerField(required=False, help_text="when the model batches"),
        "outputs": serializers.ListField(child=serializers.CharField(), required=False),
        "sequence": serializers.DictField(
            required=False, help_text='sequence models: {"correlation_id", "start", "end"}'
        ),
    },
)
Tried = inline_serializer(
    "Tried",
    {
        "model": serializers.CharField(),
        "version": serializers.CharField(),
        "latency_ms": serializers.FloatField(),
        "outputs": serializers.ListField(child=serializers.DictField()),
        "statistics": serializers.ListField(child=serializers.DictField()),
        "result": serializers.CharField(help_text="names the whole outputs for the downloads"),
        "copy": serializers.DictField(help_text="curl, python, perf_analyzer (or why not)"),
    },
)


def _controls(request: Request, message: str, audited: str = "", model: str = "") -> Any:
    """The request's server, when its user may control models there; else 403 (audited as
    ``audited`` when given), before anything of the body is read."""
    server = server_of(request)
    refused = server_access.refusal(request.user, CONTROL_PERMISSION, server, message)
    if refused:
        if audited:
            audit.record(request.user, audited, model_name=model, server=server.name,
                         outcome="denied", detail=refused)  # fmt: skip
        raise PermissionDenied(refused)
    return server


def _name(name: str) -> str:
    try:
        check_model_name(name)
    except InvalidModelName as exc:
        raise NotFound(str(exc)) from None
    return name


def copies(server: Any, name: str, request: trying.TryRequest) -> dict[str, Any]:
    """The request to copy as curl, Python and perf_analyzer input (or why not)."""
    why = snippets.too_large(request.inputs)
    if why:
        return {"refused": why}
    return {
        "curl": snippets.curl(server, name, request.inputs, request.outputs),
        "python": snippets.python(server, name, request.inputs, request.outputs),
        "perf_analyzer": snippets.perf_analyzer_input(request.inputs, request.batch),
    }


class TryView(APIView):
    @extend_schema(
        parameters=[SERVER_PARAMETER],
        responses={200: inline_serializer("TryForm", {"model": serializers.DictField()})},
        summary="What a request to this model holds (its inputs and outputs)",
    )
    def get(self, request: Request, name: str) -> Response:
        server = server_of(request)
        try:
            io = trying.model_io(server, _name(name))
        except TritonError as exc:
            return Response({"message": exc.message, "field": None}, status=409)
        return Response({"model": io.as_json()})

    @extend_schema(
        request=TryBody,
        parameters=[SERVER_PARAMETER],
        responses={200: Tried},
        summary="Send one request to the model and read its outputs",
    )
    def post(self, request: Request, name: str) -> Response:
        server = _controls(request, CANNOT_TRY)
        name = _name(name)
        try:
            io = trying.model_io(server, name)
        except TritonError as exc:
            return Response({"message": exc.message, "field": None}, status=409)
        body = request.data
        if not isinstance(body, dict):
            raise ValidationError({"message": "the body is a JSON object", "field": None})
        try:
            sent = trying.parse(io, body)
        except BadInput as exc:
            return Response({"message": exc.message, "field": exc.field}, status=400)
        try:
            tried = trying.send(server, io, sent, request.user)
        except TritonError as exc:  # Triton's own words
            return Response({"message": exc.message, "field": None}, status=409)
        return Response(
            {**tried.as_json(), "copy": copies(server, name, sent)}, status=status.HTTP_200_OK
        )


class TryResultView(APIView):
    """One output of your own recent Try, whole: ``.npy`` or JSON (Triton's shape)."""

    @extend_schema(
        parameters=[
            OpenApiParameter("as", str, enum=["npy", "json"], description="npy (default) or json")
        ],
        responses={(200, "application/octet-stream"): bytes},
        summary="A tried request's output, whole",
    )
    def get(self, request: Request, token: str, output: str) -> Any:
        try:
            kept = results.output(request.user, token, output)
        except results.NoResult:
            raise Http404(
                "no such result (they are kept for an hour, for whoever sent them)"
            ) from None
        if request.query_params.get("as", "npy") == "json":
            response = StreamingHttpResponse(
                results.as_json_chunks(kept), content_type="application/json"
            )
            response["Content-Disposition"] = f'attachment; filename="{_file_name(output)}.json"'
            return response
        return FileResponse(
            kept.path.open("rb"), as_attachment=True, filename=f"{_file_name(output)}.npy"
        )


def _file_name(output: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in output)[:100] or "output"


# --- checks -------------------------------------------------------------------------------------


def check_json(check: Any, last: Any = None, *, full: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": check.pk,
        "model": check.model,
        "name": check.name,
        "outputs": list(check.expected),
        "tolerance": check.tolerance,
        "created_by": check.username,
        "created_at": check.created_at.isoformat(),
        "last_run": result_json(last) if last is not None else None,
    }
    if full:
        out |= {"request": check.request, "expected": check.expected}
    return out


class CheckListView(APIView):
    """A model's checks, each with its last run on the server (Viewers too); ``?export=1``:
    whole, with their requests and kept outputs. POST keeps a Try result as a check."""

    @extend_schema(
        parameters=[SERVER_PARAMETER, OpenApiParameter("export", bool)],
        responses={200: inline_serializer("Checks", {"checks": serializers.ListField()})},
        summary="A model's checks and their last results",
    )
    def get(self, request: Request, name: str) -> Response:
        server = server_of(request)
        latest = checks.latest(_name(name), server)
        full = request.query_params.get("export") in ("1", "true", "yes")
        rows = [
            check_json(c, latest.get((c.pk, server.name)), full=full)
            for c in Check.objects.filter(model=name)
        ]
        return Response({"model": name, "server": server.name, "checks": rows})

    @extend_schema(
        request=inline_serializer(
            "CheckNew",
            {
                "name": serializers.CharField(),
                "result": serializers.CharField(help_text="a Try result of yours"),
                "tolerance": serializers.DictField(required=False),
            },
        ),
        parameters=[SERVER_PARAMETER],
        responses={201: inline_serializer("CheckSaved", {"check": serializers.DictField()})},
        summary="Keep a tried request and its answer as a check",
    )
    def post(self, request: Request, name: str) -> Response:
        server = _controls(request, CANNOT_CHECK)
        body = request.data if isinstance(request.data, dict) else {}
        try:
            check = checks.save(
                request.user, server, _name(name), str(body.get("name", "")),
                str(body.get("result", "")), body.get("tolerance"),
            )  # fmt: skip
        except checks.CheckRefused as exc:
            return Response({"message": exc.message, "field": exc.field}, status=400)
        return Response({"check": check_json(check)}, status=status.HTTP_201_CREATED)


class CheckRunView(APIView):
    @extend_schema(
        request=None,
        parameters=[SERVER_PARAMETER],
        responses={202: inline_serializer("ChecksQueued", {"runs": serializers.ListField()})},
        summary="Run a model's checks on the server (jobs)",
    )
    def post(self, request: Request, name: str) -> Response:
        server = _controls(request, CANNOT_CHECK)
        runs = checks.queue_runs(server, _name(name), request.user, "on demand")
        if not runs:
            return Response({"message": f"{name} has no checks", "field": None}, status=404)
        return Response({"runs": [result_json(r) for r in runs]}, status=status.HTTP_202_ACCEPTED)


class CheckDetailView(APIView):
    @extend_schema(request=None, parameters=[SERVER_PARAMETER], responses={204: None},
                   summary="Delete a check")  # fmt: skip
    def delete(self, request: Request, pk: int) -> Response:
        server = _controls(request, CANNOT_CHECK)
        check = Check.objects.filter(pk=pk).first()
        if check is None:
            raise NotFound("no such check")
        checks.delete(request.user, server, check)
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- trace ------------------------------------------------------------------------------------


class TraceView(APIView):
    """A model's tracing on a server: its settings in Triton, the last session, and the
    traced requests since it began, as timelines (Viewers too). POST turns tracing on for
    the next ``count`` requests, for at most ``minutes`` (a job); ``/stop`` turns it off."""

    @extend_schema(
        parameters=[SERVER_PARAMETER],
        responses={200: inline_serializer("Trace", {"timelines": serializers.ListField()})},
        summary="A model's traced requests, as timelines",
    )
    def get(self, request: Request, name: str) -> Response:
        return Response(tracing.state(server_of(request), _name(name)))

    @extend_schema(
        request=inline_serializer(
            "TraceOn",
            {
                "count": serializers.IntegerField(help_text="trace the next N requests (1 to 100)"),
                "minutes": serializers.IntegerField(
                    required=False, help_text="at most (1 to TRACE_MAX_MINUTES)"
                ),
            },
        ),
        parameters=[SERVER_PARAMETER],
        responses={202: inline_serializer("TraceQueued", {"session": serializers.DictField()})},
        summary="Trace a model's next requests",
    )
    def post(self, request: Request, name: str) -> Response:
        server = _controls(request, CANNOT_TRACE, "trace.on", name)
        body = request.data if isinstance(request.data, dict) else {}
        try:
            session = tracing.start(
                server, _name(name), request.user, body.get("count"), body.get("minutes")
            )
        except tracing.TraceRefused as exc:
            return Response({"message": exc.message, "field": exc.field}, status=exc.status)
        return Response({"session": session_json(session)}, status=status.HTTP_202_ACCEPTED)


class TraceStopView(APIView):
    @extend_schema(request=None, parameters=[SERVER_PARAMETER],
                   responses={200: inline_serializer("TraceStopped", {"message": serializers.CharField()})},
                   summary="Turn a model's tracing off now")  # fmt: skip
    def post(self, request: Request, name: str) -> Response:
        server = _controls(request, CANNOT_TRACE, "trace.off", name)
        return Response({"message": tracing.stop(server, _name(name), request.user)})
