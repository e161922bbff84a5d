"""Reading a search back, for its page, the REST API, the report and its events: the search
and each candidate as JSON, the constraints and the measurement in words, what a run
changes (its events carry it), and a snapshot of it all with the ranking.
"""

from __future__ import annotations

from typing import Any

from repository_app import events

from .. import jobs
from ..models import Search, SearchCandidate
from . import objective
from .ranking import summarize
from .scoring import constraints_of, effective_levels, metrics_of
from .space import Knobs, diff


def candidate_json(candidate: SearchCandidate, search: Search) -> dict[str, Any]:
    knobs = Knobs.from_json(candidate.knobs)
    baseline = Knobs.from_json(search.baseline)
    return {
        "key": candidate.key,
        "seq": candidate.seq,
        "baseline": candidate.baseline,
        "state": candidate.state,
        "knobs": candidate.knobs,
        "description": knobs.describe(),
        "diff": diff(baseline, knobs),
        "levels": candidate.levels,
        "rounds": candidate.rounds or [],
        # The levels it is judged on (medians of its rounds when re-measured).
        "effective_levels": effective_levels(candidate),
        "gpu_memory_bytes": candidate.gpu_memory_bytes,
        "error": candidate.error,
    }


def constraints_text(c: objective.Constraints) -> str:
    """'p95 ≤ 15 ms, throughput ≥ 500 infer/s', or 'none'."""
    parts = [
        f"{c.latency_label} ≤ {c.latency_budget_ms:g} ms" if c.latency_budget_ms else "",
        f"{c.first_response_label} ≤ {c.first_response_budget_ms:g} ms"
        if c.first_response_budget_ms
        else "",
        f"throughput ≥ {c.min_throughput:g} infer/s" if c.min_throughput else "",
        f"GPU memory ≤ {c.gpu_memory_limit_mb:g} MB" if c.gpu_memory_limit_mb else "",
    ]
    return ", ".join(p for p in parts if p) or "none"


def measured_how(params: dict[str, Any], baseline: Knobs) -> str:
    """How each candidate is measured beyond the load, from the stored parameters: 'over
    gRPC streams (goodput objectives first_response:200 ms)', 'in sequences of 20 requests
    ± 20%', or '' for plain requests."""
    if params.get("streaming"):
        parts = [
            f"tokens: elements of {params['token_output']}" if params.get("token_output") else "",
            f"goodput objectives {params['goodput']} ms" if params.get("goodput") else "",
        ]
        extra = "; ".join(p for p in parts if p)
        return "over gRPC streams" + (f" ({extra})" if extra else "")
    goodput = f"goodput objectives {params['goodput']} ms" if params.get("goodput") else ""
    if baseline.sequence:
        ids = params.get("sequence_id_range") or ""
        text = (
            f"in sequences of {params.get('sequence_length', 20)} requests "
            f"± {float(params.get('sequence_length_variation', 20)):g}%"
            + (f", ids {ids}" if ids else "")
        )
        return text + (f" ({goodput})" if goodput else "")
    return goodput


def search_json(search: Search) -> dict[str, Any]:
    carrier = search.sweep
    return {
        "id": search.pk,
        "sweep": carrier.pk,
        "server": carrier.server,
        "model": search.model,
        "mode": search.mode,
        "objective": search.objective,
        **jobs.lifecycle_json(carrier),
        "planned_runs": carrier.levels_total,
        "space": search.space,
        **running_json(search),
        "measure": {
            k: carrier.params.get(k)
            for k in (
                "start",
                "end",
                "step",
                "measurement_window_ms",
                "max_windows",
                "stability_percentage",
                "percentile",
                "streaming",
                "goodput",
                "token_output",
                "sequence_length",
                "sequence_length_variation",
                "sequence_id_range",
            )
        },
        "range_text": carrier.range_text,
        "measured_how": measured_how(carrier.params, Knobs.from_json(search.baseline)),
        "confirm": {
            "top": int(carrier.params.get("confirm_top") or 0),
            "rounds": int(carrier.params.get("confirm_rounds") or 0),
        },
        "environment": search.environment,
        "baseline": search.baseline,
        "baseline_description": Knobs.from_json(search.baseline).describe(),
        "was_loaded": search.was_loaded,
        "restore_pending": search.restore_pending,
        "applied_key": search.applied_key,
        "created_at": search.created_at.isoformat() if search.created_at else None,
    }


def running_json(search: Search) -> dict[str, Any]:
    """What a run changes in `search_json` (a budget taken from the current config's knee,
    the restore's message): each `search.result` event carries it beside the ranking, so
    the page redraws from events alone."""
    return {
        "constraints": search.constraints,
        # What candidates are judged on, named for axes, columns and sentences.
        "metrics": metrics_of(search).to_json(),
        "constraints_text": constraints_text(constraints_of(search)),
        "budget_from": search.constraints.get("budget_from", ""),
        "restore_message": search.restore_message,
    }


def snapshot(search_id: int) -> dict[str, Any] | None:
    """The search, its candidates and ranking, and the group's seq (read first)."""
    search = (
        Search.objects.select_related("sweep", "sweep__created_by").filter(pk=search_id).first()
    )
    if search is None:
        return None
    seq = events.current_seq(search.sweep.group)
    candidates = [candidate_json(c, search) for c in search.candidates.all()]
    return {
        "group": search.sweep.group,
        "seq": seq,
        "search": search_json(search),
        "candidates": candidates,
        "result": summarize(search),
    }
