"""Config searches over the REST API: create (the page's form rules), list, detail (with
candidates and ranking), cancel, resume and apply."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from common.api_errors import form_error_response
from registry import server_access
from registry.servers import Server
from repository_app.control import CONTROL_PERMISSION
from team import audit

from .. import kind_presets
from ..api import MEASUREMENT_FIELDS, SEQUENCE_FIELDS, server_named_in
from ..measure_api import SearchLevelSerializer
from ..models import Search
from ..permissions import (
    RUN_PERMISSION,
    hidden_servers,
    management_refusal,
    sweep_server,
    visible_or_404,
)
from . import applying, confirm, creating, reading, runner, target
from .errors import SearchError
from .forms import SearchForm
from .space import knobs_of

SearchCreateSerializer = inline_serializer(
    "SearchCreate",
    {
        "model": serializers.CharField(),
        "server": serializers.CharField(
            required=False,
            help_text="the Triton server to search on (default: ?server=, else default)",
        ),
        "mode": serializers.ChoiceField(["quick", "grid"], required=False),
        "objective": serializers.ChoiceField(
            ["max_throughput", "min_latency", "max_response_throughput", "max_goodput"],
            required=False,
            help_text="max_response_throughput: a decoupled model's responses/s (tokens/s "
            "with token_output); max_goodput: the requests/s meeting the goodput objectives",
        ),
        "kind": serializers.ChoiceField(["KIND_CPU", "KIND_GPU"], required=False),
        "counts": serializers.CharField(required=False, help_text="1:4 or 1,2,4"),
        "max_batch_sizes": serializers.CharField(required=False, help_text="8,16,32"),
        "batching_off": serializers.BooleanField(required=False),
        "batching_on": serializers.BooleanField(required=False),
        "delays": serializers.CharField(required=False, help_text="µs: 0,100,500"),
        "preferred": serializers.CharField(required=False, help_text="none; 4,8; 16"),
        **MEASUREMENT_FIELDS,
        **SEQUENCE_FIELDS,
        "goodput": serializers.CharField(
            required=False,
            help_text="AIPerf's --goodput objectives in ms, e.g. 'request_latency:50' or "
            "'time_to_first_token:200 inter_token_latency:30' (decoupled models)",
        ),
        "token_output": serializers.CharField(
            required=False, help_text="decoupled models: the output whose elements are tokens"
        ),
        "latency_budget": serializers.FloatField(
            required=False, help_text="ms, the request latency (to the final response)"
        ),
        "first_response_budget": serializers.FloatField(
            required=False,
            help_text="ms, decoupled models: the time to the first response at the percentile",
        ),
        "min_throughput": serializers.FloatField(required=False),
        "gpu_memory_limit": serializers.FloatField(required=False),
        "max_runs": serializers.IntegerField(required=False),
        "confirm_top": serializers.IntegerField(
            required=False, help_text="re-measure this many top candidates (0: off)"
        ),
        "confirm_rounds": serializers.IntegerField(
            required=False, help_text="alternating rounds of re-measurement (0 or 2+)"
        ),
    },
)
Snapshot = inline_serializer(
    "SearchSnapshot",
    {
        "seq": serializers.IntegerField(),
        "search": serializers.DictField(),
        "candidates": serializers.ListField(
            child=inline_serializer(
                "SearchCandidate",
                {
                    "key": serializers.CharField(),
                    "state": serializers.CharField(),
                    "levels": SearchLevelSerializer(many=True),
                    "effective_levels": SearchLevelSerializer(many=True),
                },
            )
        ),
        "result": serializers.DictField(),
    },
)
Message = inline_serializer("SearchMessage", {"message": serializers.CharField()})


def _require(request: Request, perm: str, server: Server, *, repository: bool = False) -> None:
    """``perm`` on the server at hand (a write to its repository: on every server of it)."""
    check = server_access.repository_refusal if repository else server_access.refusal
    if refused := check(request.user, perm, server, "your role cannot do this"):
        raise PermissionDenied(refused)


def _search_or_404(request: Request, pk: int) -> Search:
    """The search, unless there is none or its server is hidden from the caller."""
    search = get_object_or_404(Search.objects.select_related("sweep__created_by"), pk=pk)
    visible_or_404(request.user, search.sweep, "search")
    return search


class SearchListView(APIView):
    @extend_schema(
        responses=inline_serializer("SearchList", {"search": serializers.DictField()}),
        parameters=[OpenApiParameter("model", str)],
        summary="Config searches, newest first",
    )
    def get(self, request: Request) -> Response:
        rows = Search.objects.exclude(sweep__server__in=hidden_servers(request.user))
        rows = rows.select_related("sweep", "sweep__created_by")
        if request.query_params.get("model"):
            rows = rows.filter(model=request.query_params["model"])
        return Response([reading.search_json(s) for s in rows[:200]])

    @extend_schema(
        request=SearchCreateSerializer, responses={201: Snapshot}, summary="Queue a search"
    )
    def post(self, request: Request) -> Response:
        # The role first, before the body is parsed; then the server the body names (or
        # ?server=), as for a sweep.
        if not server_access.allowed_somewhere(request.user, RUN_PERMISSION):
            raise PermissionDenied("your role cannot do this")
        data = request.data if isinstance(request.data, dict) else {}
        server = server_named_in(request, data.get("server"))
        _require(request, RUN_PERMISSION, server)
        model = data.get("model")
        if not isinstance(model, str) or not model:
            raise serializers.ValidationError({"model": "name the model to search configs for"})
        try:
            base, _, sha = target.saved_config(server, model)
        except SearchError as exc:
            return Response({"message": str(exc), "field": "model"}, status=404)
        # The page's defaults: counts up to the server's size, the budget and concurrency
        # from the latest sweep of this config (else the budget is measured first).
        initial, _, _, _ = SearchForm.defaults_for(server, model, knobs_of(base), sha)
        defaults = {
            "mode": "quick", "objective": "max_throughput", "concurrency_range": "4:8:4",
            "measurement_interval": 1000, "max_trials": 5, "stability_percentage": 10,
            "percentile": "95", "confirm_top": confirm.DEFAULT_TOP,
            "confirm_rounds": confirm.DEFAULT_ROUNDS, **initial,
        }  # fmt: skip
        kind, _ = kind_presets.model_kind(server, model)
        form = SearchForm(
            {**defaults, **{k: v for k, v in data.items() if k not in ("model", "server")}},
            model=model,
            server=server,
            kind=kind,
        )
        if not form.is_valid() or form.search_request is None:
            return form_error_response(form)
        try:
            search = creating.create_search(form.search_request, user=request.user)
        except SearchError as exc:
            return Response({"message": str(exc), "field": None}, status=400)
        return Response(reading.snapshot(search.pk), status=status.HTTP_201_CREATED)


class SearchDetailView(APIView):
    @extend_schema(
        responses=Snapshot,
        summary="One search: candidates, ranking, recommendation",
        operation_id="searches_detail",
    )
    def get(self, request: Request, pk: int) -> Response:
        _search_or_404(request, pk)
        data = reading.snapshot(pk)
        if data is None:
            get_object_or_404(Search, pk=pk)
        return Response(data)


class SearchCancelView(APIView):
    action = "cancel"

    @extend_schema(request=None, responses=Message)
    def post(self, request: Request, pk: int) -> Response:
        search = _search_or_404(request, pk)
        _require(request, RUN_PERMISSION, sweep_server(search.sweep))
        if message := management_refusal(
            request.user, search.sweep, f"search.{self.action}", target=f"search #{pk}",
            noun="search",
        ):  # fmt: skip
            return Response({"message": message, "field": None}, status=403)
        try:
            message = runner.cancel(search) if self.action == "cancel" else runner.resume(search)
        except SearchError as exc:
            return Response({"message": str(exc), "field": None}, status=409)
        audit.record(
            request.user,
            f"search.{self.action}",
            model_name=search.model,
            server=search.sweep.server,
            target=f"search #{pk}",
        )
        return Response({"message": message})


class SearchApplyView(APIView):
    @extend_schema(
        request=inline_serializer("SearchApply", {"key": serializers.CharField()}),
        responses=Message,
        summary="Save a measured candidate to config.pbtxt (revision, audit) and reload",
    )
    def post(self, request: Request, pk: int) -> Response:
        search = _search_or_404(request, pk)
        _require(request, CONTROL_PERMISSION, sweep_server(search.sweep), repository=True)
        key = request.data.get("key", "") if isinstance(request.data, dict) else ""
        try:
            message = applying.apply_candidate(search, str(key), request.user)
        except SearchError as exc:
            return Response({"message": str(exc), "field": None}, status=409)
        return Response({"message": message})
