"""Summaries of Triton's statistics extension and of its Prometheus metrics."""

from __future__ import annotations

from typing import Any

from .metrics import MetricSample

STAGES = ("queue", "compute_input", "compute_infer", "compute_output")


def _duration(stats: dict[str, Any], key: str) -> tuple[int, int]:
    entry = stats.get(key, {})
    return int(entry.get("count", 0)), int(entry.get("ns", 0))


def summarize_model_stats(entry: dict[str, Any]) -> dict[str, Any]:
    """One model version's statistics, in the units users read (counts, µs)."""
    inference = entry.get("inference_stats", {})
    inference_count = int(entry.get("inference_count", 0))
    execution_count = int(entry.get("execution_count", 0))
    success_count, _ = _duration(inference, "success")
    fail_count, _ = _duration(inference, "fail")
    summary: dict[str, Any] = {
        "version": entry.get("version", ""),
        "inference_count": inference_count,
        "execution_count": execution_count,
        # Average batch size as Triton's docs define it: inferences per execution.
        "avg_batch_size": round(inference_count / execution_count, 2) if execution_count else None,
        "success_count": success_count,
        "fail_count": fail_count,
    }
    for stage in STAGES:
        count, ns = _duration(inference, stage)
        summary[f"avg_{stage}_us"] = round(ns / count / 1000, 1) if count else None
    return summary


def summarize_all(model_stats: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    result: dict[str, list[dict[str, Any]]] = {}
    for entry in model_stats:
        result.setdefault(entry.get("name", ""), []).append(summarize_model_stats(entry))
    return result


# --- Prometheus metrics, as rates between two scrapes --------------------------------------

_COUNTERS = {
    "requests": ("nv_inference_request_success", "nv_inference_request_failure"),
    "inferences": ("nv_inference_count",),
    "queue_us": ("nv_inference_queue_duration_us",),
}


def _per_model(samples: list[MetricSample], names: tuple[str, ...]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for s in samples:
        if s.name in names and "model" in s.labels:
            totals[s.labels["model"]] = totals.get(s.labels["model"], 0.0) + s.value
    return totals


def derive_server_metrics(
    previous: list[MetricSample] | None, current: list[MetricSample], seconds: float
) -> dict[str, Any]:
    """Requests/s and average queue time per model, pending requests, and GPU figures."""
    models: dict[str, dict[str, float | None]] = {}
    pending = _per_model(current, ("nv_inference_pending_request_count",))
    for name in set(pending) | set(_per_model(current, _COUNTERS["requests"])):
        models[name] = {"pending": pending.get(name, 0.0), "requests_per_s": None, "queue_us": None}
    if previous is not None and seconds > 0:
        now = {k: _per_model(current, v) for k, v in _COUNTERS.items()}
        before = {k: _per_model(previous, v) for k, v in _COUNTERS.items()}
        for name, row in models.items():
            requests = now["requests"].get(name, 0) - before["requests"].get(name, 0)
            row["requests_per_s"] = round(max(requests, 0) / seconds, 2)
            inferences = now["inferences"].get(name, 0) - before["inferences"].get(name, 0)
            queue = now["queue_us"].get(name, 0) - before["queue_us"].get(name, 0)
            row["queue_us"] = round(queue / inferences, 1) if inferences > 0 else 0.0
    gpus: dict[str, dict[str, float]] = {}
    for s in current:
        if s.name in (
            "nv_gpu_utilization",
            "nv_gpu_memory_used_bytes",
            "nv_gpu_memory_total_bytes",
        ):
            gpu = gpus.setdefault(s.labels.get("gpu_uuid", "?"), {})
            gpu[s.name.removeprefix("nv_gpu_")] = s.value
    return {"models": models, "gpus": gpus, "gpu_metrics_present": bool(gpus)}
