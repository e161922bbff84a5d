"""A stored sweep as perf_analyzer's CSV or as JSON, and config diffs between sweeps."""

from __future__ import annotations

import csv
import difflib
import io
from collections.abc import Sequence
from typing import Any

from . import measure, repeats, sweep_plan, sweep_read, verdict
from .engine.perf_analyzer_csv import levels_csv
from .models import Sweep, SweepPoint

# After perf_analyzer's columns, where the sweep's levels have intervals (the built-in
# engine's, `measure.INTERVAL`): each level's interval of its median throughput (infer/s) and
# chosen latency (µs), the windows it is over, its confidence, and how the level settled
# ("rule", "interval" or empty: it did not).
INTERVAL_CSV_COLUMNS = (
    "Throughput Low",
    "Throughput High",
    "Latency Low",
    "Latency High",
    "Interval Windows",
    "Interval Confidence",
    "Settled By",
)


def to_csv(sweep: Sweep) -> str:
    """perf_analyzer's --verbose-csv columns, µs, sorted by level: the stored level rows,
    in the one shape of a measurement; then INTERVAL_CSV_COLUMNS where levels have them."""
    rows = SweepPoint.objects.filter(sweep=sweep, window=SweepPoint.LEVEL)
    params = sweep_plan.params_of(sweep)
    levels = [measure.Level.from_point(p) for p in rows]
    text = levels_csv(levels, params.mode, streaming=params.streaming, goodput=bool(params.goodput))
    intervals = {f"{lv.level:g}": measure.interval_of(lv) for lv in levels}
    if not any(intervals.values()):
        return text  # perf_analyzer's sweeps, and those stored before intervals
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    table = list(csv.reader(io.StringIO(text)))
    writer.writerow([*table[0], *INTERVAL_CSV_COLUMNS])
    for row in table[1:]:
        writer.writerow([*row, *_interval_cells(intervals.get(row[0]))])
    return out.getvalue()


def _interval_cells(interval: measure.LevelInterval | None) -> list[str]:
    if interval is None:
        return [""] * len(INTERVAL_CSV_COLUMNS)
    latency = interval.latency
    return [
        f"{interval.low:g}",
        f"{interval.high:g}",
        "" if latency is None else str(round(latency[0])),
        "" if latency is None else str(round(latency[1])),
        str(interval.windows),
        f"{interval.confidence:g}",
        interval.settled_by or "",
    ]


def to_json(sweep: Sweep) -> dict[str, Any]:
    data = sweep_read.snapshot(sweep.pk) or {}
    data.pop("group", None)
    data.pop("seq", None)
    data["sweep"]["config_text"] = sweep.config_text
    return data


def config_diff(base: Sweep, other: Sweep) -> str:
    """Unified diff of the config.pbtxt each sweep started with ('' when identical)."""
    return "".join(
        difflib.unified_diff(
            base.config_text.splitlines(keepends=True),
            other.config_text.splitlines(keepends=True),
            fromfile=f"sweep #{base.pk} config.pbtxt ({base.config_sha256[:12]})",
            tofile=f"sweep #{other.pk} config.pbtxt ({other.config_sha256[:12]})",
        )
    )


def _chosen_key(sweep: Sweep) -> str:
    pct = sweep_plan.params_of(sweep).percentile
    return "avg_us" if pct == "avg" else f"p{int(pct)}_us"


def level_deltas(
    base: Sweep, other: Sweep, base_levels: list[dict[str, Any]], other_levels: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Per level both sweeps measured: each one's median and spread of throughput and of
    its chosen latency, and the difference in words (`repeats.difference`)."""
    key_a, key_b = _chosen_key(base), _chosen_key(other)
    theirs = {p["level"]: p for p in other_levels if verdict.measured(p)}
    rows = []
    for a in base_levels:
        b = theirs.get(a["level"])
        if b is None or not verdict.measured(a):
            continue
        tput_a, tput_b = repeats.Spread.of_level(a), repeats.Spread.of_level(b)
        lat_a, lat_b = repeats.Spread.of_level(a, key_a), repeats.Spread.of_level(b, key_b)
        rows.append(
            {
                "level": a["level"],
                "base": {"throughput": tput_a.to_json(), "latency": lat_a.to_json(1000, 2)},
                "other": {"throughput": tput_b.to_json(), "latency": lat_b.to_json(1000, 2)},
                "stable": a.get("stable") is not False and b.get("stable") is not False,
                "throughput": repeats.difference(tput_a, tput_b),
                "latency": repeats.difference(lat_a, lat_b)
                if key_a == key_b
                else {"text": "different percentiles", "delta": None, "real": None},
            }
        )
    return rows


NOT_RECORDED = "not recorded"


def _gib(value: object) -> str:
    return f"{value / 2**30:.1f} GiB" if isinstance(value, int | float) and value > 0 else "?"


def server_facts_text(sweep: Sweep) -> dict[str, str]:
    """What the compare lists of the server a sweep ran on (`Sweep.server_facts`, recorded
    when it started), as words; NOT_RECORDED where the sweep did not record it. Triton's
    metrics name no GPU model: a label (gpu=H200) is where the model is said."""
    facts = sweep.server_facts or {}
    gpus = facts.get("gpus") if isinstance(facts.get("gpus"), list) else None
    texts = {
        "server": sweep.server,
        "address": str(facts.get("grpc_url") or NOT_RECORDED),
        "Triton version": str(facts.get("triton_version") or NOT_RECORDED),
        "GPUs": str(facts["gpu_count"]) if "gpu_count" in facts else NOT_RECORDED,
        "GPU memory": ", ".join(
            _gib(g.get("memory_total_bytes")) for g in gpus if isinstance(g, dict)
        )
        if gpus
        else ("none" if gpus == [] else NOT_RECORDED),
    }
    labels = facts.get("labels")
    if isinstance(labels, dict):
        texts.update({f"label {key}": str(value) for key, value in labels.items()})
    return texts


def server_differences(rows: Sequence[Sweep]) -> list[dict[str, Any]]:
    """The server facts that differ between the compared sweeps (old → new), one row per
    fact with each sweep's value; a label one sweep lacks counts as a difference ("—",
    or NOT_RECORDED for a sweep that recorded no labels)."""
    texts = [server_facts_text(s) for s in rows]
    names = list(dict.fromkeys(name for text in texts for name in text))
    differing = []
    for name in names:
        values = [
            text.get(name)
            or ("—" if isinstance((s.server_facts or {}).get("labels"), dict) else NOT_RECORDED)
            for s, text in zip(rows, texts, strict=True)
        ]
        if len(set(values)) > 1:
            differing.append({"fact": name, "values": values})
    return differing


def _same_server(a: Sweep, b: Sweep) -> bool:
    """The same server, as it was: its name, and Triton's version and GPU count where both
    sweeps recorded them (before and after an upgrade is not the same server)."""
    fa, fb = a.server_facts or {}, b.server_facts or {}
    return a.server == b.server and all(
        fa.get(key) == fb.get(key)
        for key in ("triton_version", "gpu_count")
        if key in fa and key in fb
    )


def _same_setup(a: Sweep, b: Sweep) -> bool:
    """The same server, model, config.pbtxt and load (mode, batch, protocol, window
    settings): an engine ratio across servers would measure the servers, not the engines."""
    pa, pb = sweep_plan.params_of(a), sweep_plan.params_of(b)
    return (
        _same_server(a, b)
        and a.model == b.model
        and a.config_sha256 == b.config_sha256
        and (pa.mode, pa.batch_size, pa.protocol, pa.percentile, pa.version)
        == (pb.mode, pb.batch_size, pb.protocol, pb.percentile, pb.version)
    )


def engine_ratios(items: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Built-in engine / perf_analyzer, per common level, for each pair of compared sweeps
    that measured the same model and config with the same load on the same server."""
    pairs = []
    for ours in items:
        for ref in items:
            a, b = ours["row"], ref["row"]
            if a.engine != Sweep.Engine.BUILTIN or b.engine != Sweep.Engine.PERF_ANALYZER:
                continue
            if not _same_setup(a, b):
                continue
            key = _chosen_key(a)
            theirs = {p["level"]: p for p in ref["levels"] if verdict.measured(p)}
            levels = []
            for p in ours["levels"]:
                q = theirs.get(p["level"])
                if q is None or not verdict.measured(p):
                    continue
                lat_p, lat_q = p.get(key), q.get(key)
                levels.append(
                    {
                        "level": p["level"],
                        "throughput_ratio": p["throughput"] / q["throughput"]
                        if q["throughput"]
                        else None,
                        "latency_ratio": lat_p / lat_q if lat_p and lat_q else None,
                        "stable": p.get("stable") is not False and q.get("stable") is not False,
                    }
                )
            if levels:
                pairs.append({"builtin": a.pk, "perf_analyzer": b.pk, "levels": levels})
    return pairs


def compare(sweep_list: Sequence[Sweep]) -> dict[str, Any]:
    """The sweeps old → new (by creation), each with its level rows, the config diff and
    the per-level differences against the oldest, and the engines' ratio where a built-in
    and a perf_analyzer sweep measured the same model and config on the same server; the
    server facts that differ between the sweeps (servers, Triton versions, GPUs, labels)."""
    ordered = sorted(sweep_list, key=lambda s: (s.created_at, s.pk))
    base = ordered[0]
    items: list[dict[str, Any]] = [
        {
            "row": s,
            "levels": [
                measure.point_json(p)
                for p in SweepPoint.objects.filter(sweep=s, window=SweepPoint.LEVEL)
            ],
        }
        for s in ordered
    ]
    base_levels = items[0]["levels"]
    return {
        "sweeps": [
            {
                "sweep": sweep_read.sweep_json(item["row"]),
                "title": item["row"].title,
                "server": item["row"].server,
                "created": f"{item['row'].created_at:%Y-%m-%d %H:%M}",
                "range_text": item["row"].range_text,
                "levels": item["levels"],
                "diff": config_diff(base, item["row"]) if item["row"].pk != base.pk else "",
                "deltas": level_deltas(base, item["row"], base_levels, item["levels"])
                if item["row"].pk != base.pk
                else [],
            }
            for item in items
        ],
        "engine_ratios": engine_ratios(items),
        "servers": sorted({s.server for s in ordered}),
        "server_differences": server_differences(ordered),
    }


def summary_text(sweep: Sweep) -> str:
    """perf_analyzer-style summary for the command line."""
    params = sweep_plan.params_of(sweep)
    label = "Concurrency" if params.mode == "concurrency" else "Request Rate"
    lines = [
        "*** Measurement Settings ***",
        f"  Batch size: {params.batch_size}",
        f"  Measurement window: {params.measurement_window_ms} msec",
        f"  Stabilizing using {params.latency_label} latency",
        "",
    ]
    for p in SweepPoint.objects.filter(sweep=sweep, window=SweepPoint.LEVEL):
        name = "Request concurrency" if params.mode == "concurrency" else "Request Rate"
        lines.append(f"{name}: {p.level:g}")
        lines.append("  Client: ")
        lines.append(f"    Request count: {p.requests}")
        lines.append(f"    Throughput: {p.throughput:.2f} infer/sec")
        level = measure.Level.from_point(p)
        interval = measure.interval_of(level)
        if interval is not None:
            settled = {
                "rule": "settled by the 3-window rule",
                "interval": "settled by this interval",
            }.get(interval.settled_by or "", "did not settle")
            lines.append(
                f"    Interval: {interval.low:.2f}..{interval.high:.2f} infer/sec "
                f"({interval.confidence * 100:.0f}% over {interval.windows} windows; {settled})"
            )
        spread = repeats.Spread.of_level(measure.point_json(p))
        if spread.rounds > 1:
            lines.append(
                f"    Rounds: {spread.rounds} (median shown; throughput "
                f"{spread.low:.2f}..{spread.high:.2f}, ± {(spread.half_range or 0) * 100:.0f}%)"
            )
        if (p.extra or {}).get("behind_schedule"):
            # perf_analyzer's wording for the same condition ("delayed" requests).
            lines.append(
                f"    WARNING: requests were delayed: sent {p.extra['send_rate']:.1f}/sec of "
                f"{p.level:g}/sec (every load thread was waiting for a reply)"
            )
        stream = level.stream
        if stream and stream.output_token_throughput is not None:  # the built-in engine's
            lines.append(
                f"    Output token throughput: {stream.output_token_throughput:.2f} "
                f"tokens/sec ({stream.tokens_per_request or 0:.1f} per request)"
            )
        good = level.goodput
        if good and good.goodput is not None:
            share = good.good_share
            met = (
                f" ({share * 100:.0f}% of requests met every objective)"
                if share is not None
                else ""
            )
            lines.append(f"    Goodput: {good.goodput:.2f} requests/sec{met}")
        if p.avg_us is not None:
            lines.append(f"    Avg latency: {p.avg_us:.0f} usec")
        for pct in (50, 90, 95, 99):
            value = getattr(p, f"p{pct}_us")
            if value is not None:
                lines.append(f"    p{pct} latency: {value:.0f} usec")
        if p.server_request_us is not None:
            lines.append("  Server: ")
            lines.append(
                f"    Avg request latency: {p.server_request_us:.0f} usec (queue "
                f"{p.queue_us or 0:.0f} usec + compute input {p.compute_input_us or 0:.0f} usec "
                f"+ compute infer {p.compute_infer_us or 0:.0f} usec + compute output "
                f"{p.compute_output_us or 0:.0f} usec)"
            )
        if not p.stable:
            lines.append("  (not stable within the window limit)")
        lines.append("")
    kind = "Average" if params.percentile == "avg" else params.latency_label
    lines.append(f"Inferences/Second vs. Client {kind} Batch Latency")
    for p in SweepPoint.objects.filter(sweep=sweep, window=SweepPoint.LEVEL):
        lat = sweep_read.latency_value(p, params.percentile)
        lat_text = f"{lat:.0f} usec" if lat is not None else "n/a"
        lines.append(
            f"{label}: {p.level:g}, throughput: {p.throughput:.2f} infer/sec, latency {lat_text}"
        )
    summary = sweep.summary or sweep_read.knee_summary(sweep)
    lines.append("")
    lines.append(summary.get("recommendation", ""))
    for key in ("sureness_text", "caveat", "host_note"):  # older summaries lack the first
        if summary.get(key):
            lines.append(summary[key])
    return "\n".join(lines) + "\n"
