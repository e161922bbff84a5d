"""Perf sweeps over the REST API: create (a JSON body of perf_analyzer's flags, started by
`sweeps.start_sweep` as the page's form and the command line start theirs), list, detail,
points, cancel and exports."""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from common.api_errors import errors_response
from registry import server_access, servers
from registry.server_context import server_of
from registry.servers import Server
from repository_app.naming import is_safe_model_name, unsafe_name_message
from team import audit

from . import export, jobs, kind_rules, sweep_read, sweeps
from .forms import SweepForm, SweepLabelForm
from .measure_api import SweepPointSerializer
from .models import Sweep
from .permissions import (
    CANNOT_RUN,
    RUN_PERMISSION,
    hidden_servers,
    management_refusal,
    run_refusal,
    sweep_server,
    visible_or_404,
)

# The measurement's flags, for the sweep's and the search's schema alike.
MEASUREMENT_FIELDS: dict[str, serializers.Field] = {
    "concurrency_range": serializers.CharField(required=False, help_text="A:B:S"),
    "percentile": serializers.CharField(required=False),
    "measurement_interval": serializers.IntegerField(required=False),
    "stability_percentage": serializers.FloatField(required=False),
    "max_trials": serializers.IntegerField(required=False),
}
# perf_analyzer's sequence flags, taken by a sweep and by a config search alike.
SEQUENCE_FIELDS = {
    "sequence_length": serializers.IntegerField(
        required=False, help_text="sequence models: requests per sequence (default 20)"
    ),
    "sequence_length_variation": serializers.FloatField(
        required=False, help_text="sequence models: percent (default 20)"
    ),
    "sequence_id_range": serializers.CharField(
        required=False, help_text="sequence models: START:END, END excluded"
    ),
}
SweepCreateSerializer = inline_serializer(
    "SweepCreate",
    {
        "model": serializers.CharField(),
        "mode": serializers.ChoiceField(["concurrency", "request_rate"], required=False),
        **MEASUREMENT_FIELDS,
        "request_rate_range": serializers.CharField(required=False, help_text="A:B:S"),
        "batch_size": serializers.IntegerField(required=False),
        "latency_threshold": serializers.FloatField(required=False),
        "engine": serializers.ChoiceField(["builtin", "perf_analyzer"], required=False),
        "protocol": serializers.ChoiceField(["grpc", "http"], required=False),
        "request_distribution": serializers.ChoiceField(["constant", "poisson"], required=False),
        "max_threads": serializers.IntegerField(required=False),
        "input_data": serializers.JSONField(
            required=False,
            help_text='"random", "zeros", or a perf_analyzer --input-data document '
            '({"data": [{"INPUT0": [...]}, ...]})',
        ),
        "shape": serializers.CharField(required=False, help_text="NAME:d1,d2 ..."),
        "rounds": serializers.IntegerField(
            required=False,
            help_text="measure every level this many times, alternating with the other "
            "levels (median and spread per level)",
        ),
        "streaming": serializers.BooleanField(
            required=False, help_text="gRPC streaming: needed by (and only for) decoupled models"
        ),
        **SEQUENCE_FIELDS,
        "num_of_sequences": serializers.IntegerField(
            required=False,
            help_text="sequence models, request-rate mode: sequences live at once (default 4)",
        ),
        "goodput": serializers.CharField(
            required=False,
            help_text="AIPerf's --goodput objectives in ms, e.g. 'time_to_first_token:200 "
            "inter_token_latency:30 request_latency:500' (built-in engine)",
        ),
        "token_output": serializers.CharField(
            required=False,
            help_text="streaming: the output whose elements per response count tokens "
            "(default: one response is one token)",
        ),
        "load_hosts": serializers.IntegerField(
            required=False,
            help_text="built-in engine: hosts that generate each level's load, this sweep's "
            "worker and N - 1 more workers of its queue (default 1)",
        ),
        "trace_sample": serializers.IntegerField(
            required=False,
            help_text="requests of each level traced by Triton, their median timeline kept "
            "with the level (0, the default: none)",
        ),
        "name": serializers.CharField(required=False, help_text="optional"),
        "note": serializers.CharField(required=False, help_text="optional"),
        "server": serializers.CharField(
            required=False,
            help_text="the Triton server to run on (default: ?server=, else default)",
        ),
    },
)


class JobPlacementSerializer(serializers.Serializer):
    """Where a job's task went and why, and who claimed it (`jobs.placement_json`)."""

    server_queue = serializers.CharField(help_text="the server's own Celery queue, triton.<name>")
    queue = serializers.CharField(
        help_text="the queue its task was sent to (delivered from, once claimed); empty while "
        "it is held for a worker on its server's own queue"
    )
    routing = serializers.CharField(help_text="why it went there, in words")
    waiting_for_worker = serializers.BooleanField(
        help_text="held: its server requires its own worker and none consumes its queue"
    )
    worker = serializers.CharField(help_text="the Celery worker that claimed it")
    worker_host = serializers.CharField(help_text="that worker's host (its hostname)")


class SweepSerializer(serializers.Serializer):
    """A sweep as `sweep_read.sweep_json` returns it (a test holds the two to the same fields)."""

    id = serializers.IntegerField()
    kind = serializers.ChoiceField(Sweep.Kind.choices)
    model = serializers.CharField()
    version = serializers.CharField()
    server = serializers.CharField(help_text="the Triton server's name")
    server_facts = serializers.DictField(
        help_text="the server when the sweep last started: Triton version, GPU count and uuids"
    )
    engine = serializers.ChoiceField(Sweep.Engine.choices)
    state = serializers.ChoiceField(Sweep.State.choices)
    error = serializers.CharField()
    params = serializers.DictField(help_text="the sweep's parameters as stored")
    command = serializers.CharField(help_text="perf_analyzer's invocations, one per line")
    config_sha256 = serializers.CharField()
    created_by = serializers.CharField()
    created_at = serializers.DateTimeField(allow_null=True)
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    heartbeat_at = serializers.DateTimeField(allow_null=True)
    heartbeat_stale = serializers.BooleanField(
        help_text="running, but no heartbeat for 20 s: its worker seems gone"
    )
    cancel_requested = serializers.BooleanField()
    levels_total = serializers.IntegerField()
    queue_position = serializers.IntegerField(allow_null=True)
    placement = JobPlacementSerializer()
    summary = serializers.DictField(help_text="knee, recommendation and caveat")
    name = serializers.CharField()
    note = serializers.CharField()
    rounds = serializers.IntegerField()
    server_now = serializers.DateTimeField()
    windows_before_start = serializers.IntegerField()
    model_kind = serializers.CharField(
        help_text='the model\'s kind when the sweep was created, e.g. "sequence (direct)"'
    )


class SweepCreatedSerializer(SweepSerializer):
    """A sweep just queued: the sweep, and what it takes without being told."""

    notes = serializers.ListField(
        child=serializers.CharField(),
        help_text="e.g. a sequence model without sequence flags: perf_analyzer's defaults apply",
    )


def _require_run(request: Request, server: Server) -> None:
    """The run permission on the server of the sweep at hand (a narrowing there refuses)."""
    if refused := run_refusal(request.user, server, CANNOT_RUN):
        raise PermissionDenied(refused)


def _sweep_or_404(request: Request, pk: int, **fields: Any) -> Sweep:
    """The sweep, unless there is none or its server is hidden from the caller."""
    rows = Sweep.objects.select_related("created_by")
    return visible_or_404(request.user, get_object_or_404(rows, pk=pk, **fields))


class SweepListView(APIView):
    @extend_schema(
        responses=SweepSerializer(many=True),
        parameters=[
            OpenApiParameter("model", str),
            OpenApiParameter("server", str, description="only this server's sweeps"),
        ],
        summary="Sweeps, newest first",
    )
    def get(self, request: Request) -> Response:
        rows = (
            Sweep.objects.filter(kind=Sweep.Kind.SWEEP)
            .exclude(server__in=hidden_servers(request.user))
            .select_related("created_by")
        )
        if request.query_params.get("model"):
            rows = rows.filter(model=request.query_params["model"])
        if request.query_params.get("server"):
            rows = rows.filter(server=server_of(request).name)
        return Response([sweep_read.sweep_json(s) for s in rows[:200]])

    @extend_schema(
        request=SweepCreateSerializer,
        responses={201: SweepCreatedSerializer},
        summary="Queue a sweep",
    )
    def post(self, request: Request) -> Response:
        # The role first, before the body is parsed: a Viewer's body is never read. (The
        # server named in the body is checked once it is read.)
        if not server_access.allowed_somewhere(request.user, RUN_PERMISSION):
            raise PermissionDenied(CANNOT_RUN)
        data = request.data if isinstance(request.data, dict) else {}
        body = dict(data.items())  # a QueryDict gives its last values, as a form reads them
        server = server_named_in(request, body.pop("server", None))
        _require_run(request, server)
        model = data.get("model")
        if not isinstance(model, str) or not model:
            raise serializers.ValidationError({"model": "name the model to benchmark"})
        if not is_safe_model_name(model):
            raise serializers.ValidationError({"model": unsafe_name_message(model)})
        labels = SweepLabelForm(body)
        refused = {} if labels.is_valid() else {f: m[0] for f, m in labels.errors.items()}
        # The page's defaults where the body says nothing.
        defaults = {"mode": "concurrency", "request_rate_range": ""}
        flags = {**defaults, **SweepForm.preset_initial("default"), **body}
        try:
            sweep = sweeps.start_sweep(
                server,
                flags,
                request.user,
                engine=str(body.get("engine", "builtin")),
                refused=refused,
                **labels.cleaned_data,
            )
        except sweeps.SweepRefused as exc:
            # A JSON document's refusals keep the field they had when it went through the
            # form as an upload.
            document = isinstance(body.get("input_data"), dict | list)
            return errors_response(
                {
                    ("input_data_file" if flag == "input_data" and document else flag): [message]
                    for flag, message in exc.errors.items()
                }
            )
        except jobs.QueueUnavailable as exc:
            return Response({"message": str(exc), "field": None}, status=503)
        notes = kind_rules.notes(sweeps.params_of(sweep), sweep.model_kind)
        return Response(
            {**sweep_read.sweep_json(sweep), "notes": notes}, status=status.HTTP_201_CREATED
        )


def server_named_in(request: Request, named: object) -> Server:
    """The server a sweep or a search is created on: the body's ``server`` field, else ``?server=``
    (the default server when neither names one). A body's unknown server is a 404 on the
    field; one that contradicts ``?server=`` is a 400 rather than a guess."""
    from rest_framework.exceptions import NotFound

    if named is None or named == "":
        return server_of(request)
    if not isinstance(named, str):
        raise serializers.ValidationError({"server": "name the server as a string"})
    if request.query_params.get("server") and request.query_params["server"] != named:
        raise serializers.ValidationError(
            {"server": f"the body names {named!r}, ?server= {request.query_params['server']!r}"}
        )
    try:
        return server_access.check_visible(request.user, servers.get(named))
    except servers.UnknownServer as exc:
        raise NotFound({"server": exc.message}) from None


class SweepDetailView(APIView):
    @extend_schema(responses=SweepSerializer, summary="One sweep")
    def get(self, request: Request, pk: int) -> Response:
        return Response(sweep_read.sweep_json(_sweep_or_404(request, pk, kind=Sweep.Kind.SWEEP)))


class SweepPointsView(APIView):
    @extend_schema(
        responses=inline_serializer(
            "SweepPoints",
            {
                "seq": serializers.IntegerField(),
                "points": SweepPointSerializer(many=True),
            },
        ),
        summary="Every stored window and level summary (window -1) of a sweep",
    )
    def get(self, request: Request, pk: int) -> Response:
        _sweep_or_404(request, pk)
        data = sweep_read.snapshot(pk)
        if data is None:
            get_object_or_404(Sweep, pk=pk)
        return Response(data)


class SweepCancelView(APIView):
    @extend_schema(
        request=None, responses=inline_serializer("Message", {"message": serializers.CharField()})
    )
    def post(self, request: Request, pk: int) -> Response:
        sweep = _sweep_or_404(request, pk)
        _require_run(request, sweep_server(sweep))
        if message := management_refusal(
            request.user, sweep, "sweep.cancel", target=f"sweep #{pk}"
        ):
            return Response({"message": message, "field": None}, status=403)
        try:
            message = jobs.cancel(pk)
        except jobs.JobError as exc:
            return Response({"message": str(exc), "field": None}, status=409)
        audit.record(
            request.user,
            "sweep.cancel",
            model_name=sweep.model,
            server=sweep.server,
            target=f"sweep #{pk}",
        )
        return Response({"message": message})


class SweepExportView(APIView):
    fmt = "csv"

    @extend_schema(responses={(200, "text/csv"): str, (200, "application/json"): dict})
    def get(self, request: Request, pk: int) -> HttpResponse | Response:
        sweep = _sweep_or_404(request, pk)
        if self.fmt == "csv":
            return HttpResponse(export.to_csv(sweep), content_type="text/csv")
        return Response(export.to_json(sweep))
