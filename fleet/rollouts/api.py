"""Rollouts over the REST API: start one (a JSON body: the action, the model, and the servers
chosen one way: ``servers``, ``label`` or ``repository_of``), read one, list them."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from registry import server_access
from repository_app import control
from repository_app.control import CANNOT_CONTROL
from team import audit

from ..models import Rollout
from . import runner
from .choose import ChoiceError, choose

FIELDS = ("action", "model", "servers", "label", "repository_of", "note")


class RolloutTargetSerializer(serializers.Serializer):
    server = serializers.CharField()
    state = serializers.ChoiceField(runner.TARGET_STATES)
    reason = serializers.CharField(
        help_text='why it failed, in a word: "unreachable", "not permitted", "no model", '
        '"not explicit", "busy", "refused", "failed", "cancelled", "interrupted"; "" otherwise'
    )
    message = serializers.CharField(help_text="Triton's (or the dashboard's) text")
    started_at = serializers.DateTimeField(allow_null=True)
    ended_at = serializers.DateTimeField(allow_null=True)
    placement = serializers.DictField(
        help_text="where its job went and why, and the worker (and host) that ran it"
    )


class RolloutSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    action = serializers.ChoiceField(control.ACTIONS)
    model = serializers.CharField()
    chosen = serializers.CharField(help_text="how the servers were chosen, in words")
    by = serializers.CharField()
    state = serializers.ChoiceField(Rollout.State.values)
    summary = serializers.CharField(help_text='e.g. "partial: 3 loaded, 1 failed (d: refused)"')
    created_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    counts = serializers.DictField(child=serializers.IntegerField())
    targets = RolloutTargetSerializer(many=True)
    url = serializers.CharField(help_text="the rollout's page")


RolloutCreateSerializer = inline_serializer(
    "RolloutCreate",
    {
        "action": serializers.ChoiceField(control.ACTIONS),
        "model": serializers.CharField(),
        "servers": serializers.ListField(
            child=serializers.CharField(), required=False, help_text="hand-picked servers"
        ),
        "label": serializers.CharField(
            required=False, help_text="every server with this label, NAME=VALUE"
        ),
        "repository_of": serializers.CharField(
            required=False, help_text="every server on the repository this server serves from"
        ),
        "note": serializers.ChoiceField(
            list(runner.NOTES), required=False, help_text="why these servers (described)"
        ),
    },
)


def _error(message: str, field: str | None, code: int) -> Response:
    return Response({"message": message, "field": field}, status=code)


def _value(data: Any, name: str) -> Any:
    if isinstance(data, dict):
        return data.get(name)
    return data.getlist(name) if name == "servers" else data.get(name)  # a form's QueryDict


class RolloutListView(APIView):
    @extend_schema(
        responses=RolloutSerializer(many=True),
        parameters=[OpenApiParameter("model", str, description="only this model's rollouts")],
        summary="The latest rollouts (100), newest first",
    )
    def get(self, request: Request) -> Response:
        rollouts = runner.seen_by(request.user).prefetch_related("targets")
        if request.query_params.get("model"):
            rollouts = rollouts.filter(model=request.query_params["model"])
        return Response([runner.rollout_json(r) for r in rollouts[:100]])

    @extend_schema(
        request=RolloutCreateSerializer,
        responses={200: RolloutSerializer, 201: RolloutSerializer, 202: RolloutSerializer},
        parameters=[
            OpenApiParameter(
                "wait", bool, description="wait for every server's outcome (200) instead of 201"
            )
        ],
        summary="Load, unload or reload a model on several servers (a rollout)",
    )
    def post(self, request: Request) -> Response:
        # The role first, before the body is parsed: a Viewer's body is never read (the
        # servers it names are checked one by one once it is read).
        if not server_access.allowed_somewhere(request.user, runner.CONTROL_PERMISSION):
            audit.record(request.user, "rollout", outcome="denied", detail=CANNOT_CONTROL)
            return _error(CANNOT_CONTROL, None, 403)
        data = request.data
        if not hasattr(data, "get"):
            return _error("send a JSON object", None, 400)
        unknown = sorted(set(data) - set(FIELDS))
        if unknown:
            return _error(
                f"unknown field; choose the servers with servers, label or repository_of "
                f"(fields: {', '.join(FIELDS)})",
                unknown[0],
                400,
            )
        try:
            runner.check_request(data.get("action"), data.get("model"))
            choice = choose(
                servers=_value(data, "servers"),
                label=data.get("label"),
                repository_of=data.get("repository_of"),
                user=request.user,
            )
            rollout = runner.create(
                data.get("action"),
                data.get("model"),
                choice,
                request.user,
                note=str(data.get("note") or ""),
            )
        except ChoiceError as exc:
            return _error(exc.message, exc.field, 404 if exc.unknown else 400)
        except runner.RolloutRefused as exc:
            return _error(exc.message, exc.field, exc.status)
        wait = request.query_params.get("wait") in ("1", "true", "yes")
        runner.launch(rollout)
        # ?wait=1: the workers run it; this request only reads until it has ended (202
        # with the rollout as it is when it takes longer than a load may).
        ended = wait and runner.wait(rollout, runner.WAIT_S)
        body = runner.snapshot(rollout.pk)
        code = status.HTTP_201_CREATED
        if wait:
            code = status.HTTP_200_OK if ended else status.HTTP_202_ACCEPTED
        return Response(
            body,
            status=code,
            headers={"Location": f"/api/v1/rollouts/{rollout.pk}/"},
        )


class RolloutDetailView(APIView):
    @extend_schema(responses=RolloutSerializer, summary="One rollout: each server's state")
    def get(self, request: Request, pk: int) -> Response:
        body = runner.snapshot_for(request.user, pk)
        if body is None:
            raise NotFound(f"no rollout #{pk}")
        return Response(body)


class RolloutActionView(APIView):
    """Cancel (queued servers end now; a running load ends with its action) or resume (the
    failed, cancelled and interrupted servers are queued again) a rollout."""

    what = "cancel"

    @extend_schema(request=None, responses=RolloutSerializer, summary="Cancel or resume a rollout")
    def post(self, request: Request, pk: int) -> Response:
        # The role first, before anything else is read.
        if not server_access.allowed_somewhere(request.user, runner.CONTROL_PERMISSION):
            audit.record(
                request.user, f"rollout {self.what}", target=f"rollout #{pk}",
                outcome="denied", detail=CANNOT_CONTROL,
            )  # fmt: skip
            return _error(CANNOT_CONTROL, None, 403)
        rollout = runner.seen_by(request.user).filter(pk=pk).first()
        if rollout is None:
            raise NotFound(f"no rollout #{pk}")
        try:
            runner.act_on(rollout, self.what, request.user)
        except runner.RolloutRefused as exc:
            return _error(exc.message, exc.field, exc.status)
        return Response(runner.snapshot(rollout.pk))
