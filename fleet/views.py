"""The fleet overview: a card per server and the models × servers matrix (``fleet``), with
``?label=NAME=VALUE`` filters (several: all must match); live through ``/ws/fleet/``
(``consumers.FleetConsumer``, static/js/fleet.js), resynced from ``fleet/states.json``."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET

from registry import server_access

from . import overview as fleet


def _overview(request: HttpRequest) -> tuple[dict[str, Any], str]:
    raw = request.GET.getlist("label")
    # A server narrowed to none for this user does not exist here either.
    every = server_access.visible_servers(request.user)
    try:
        wanted = fleet.parse_filter(raw)
    except ValueError as exc:
        return {"columns": [], "rows": [], "labels": fleet.all_labels(every),
                "hidden": len(every), "checks": {}}, f"label filter not applied: {exc}"  # fmt: skip
    return fleet.overview(wanted, every), ""


@login_required
@require_GET
def fleet_page(request: HttpRequest) -> HttpResponse:
    data, error = _overview(request)
    columns = data["columns"]
    model_url = reverse("model_detail", args=["__model__"])  # fleet.js fills the name in
    checks = data["checks"]
    matrix = [
        (model, reverse("model_detail", args=[model]),
         [(c, fleet.cell(c, model), fleet.check_mark(checks, c.name, model)) for c in columns])
        for model in data["rows"]
    ]  # fmt: skip
    chosen = set(request.GET.getlist("label"))
    return render(
        request,
        "repository/fleet.html",
        {
            "columns": columns,
            "matrix": matrix,
            "labels": [(label, label in chosen) for label in data["labels"]],
            "hidden": data["hidden"],
            "filter_error": error,
            "not_watched": fleet.NOT_WATCHED,
            "page_data": {
                "columns": [c.as_json() for c in columns],
                "labels": sorted(chosen) if not error else [],
                "modelUrl": model_url,
                "statesUrl": reverse("fleet_states_json"),
                "absent": fleet.ABSENT,
            },
        },
        status=400 if error else 200,
    )


@login_required
@require_GET
def fleet_states_json(request: HttpRequest) -> JsonResponse:
    """The fleet as the page shows it (``?label=`` as on the page), for clients that resync."""
    data, error = _overview(request)
    if error:
        return JsonResponse({"message": error, "field": "label"}, status=400)
    marks = [
        {"model": model, "server": server, **mark}
        for (model, server) in data["checks"]
        if (mark := fleet.check_mark(data["checks"], server, model)) is not None
    ]
    return JsonResponse({"columns": [c.as_json() for c in data["columns"]], "rows": data["rows"],
                         "checks": marks})  # fmt: skip
