"""A self-contained HTML report of a config search: Plotly inlined, no network needed.

The page holds which Triton ran the search (version, address, GPUs), when, with which
parameters, the recommendation, the Pareto chart of the two metrics candidates are
judged on (`objective.Metrics`: infer/s or responses/s, tokens/s, goodput, against the
request latency or the time to the first response; every measured level, the front
labelled with candidate and concurrency, one best point, the constraint lines),
throughput per concurrency for each candidate, the ranked table with each candidate's
spread over its re-measurements, the latency breakdown at each candidate's operating
point (and, on GPUs, its memory), as Model Analyzer's reports have them, and every
candidate's config.pbtxt. The page's skeleton (Plotly inlined, the figures' JSON, the
styles) is `report_html`'s, shared with the sweep report.
"""

from __future__ import annotations

import html
from typing import Any

from triton_api import gpus as triton_gpus

from .. import measure
from ..models import Search
from ..report_html import LEGEND, cells, fact_rows, fmt, page
from . import applying, reading
from .objective import INFER_RATE, Constraints, Metric, Metrics
from .space import Knobs


def _metrics(search: dict[str, Any]) -> Metrics:
    """The search's two metrics as `reading.search_json` names them."""
    named = search["metrics"]
    return Metrics(Metric(**named["throughput"]), Metric(**named["latency"]))


def _figure(lv: dict[str, Any], key: str) -> float | None:
    """A stored level's figure: a field, or a sub-record's (a streaming level's)."""
    value = lv.get(key)
    return value if value is not None else measure.Level.from_json(lv).figure(key)


def figures(snapshot: dict[str, Any]) -> dict[str, Any]:
    """Plotly figures (data + layout) for the Pareto chart and the per-candidate curves,
    on the search's two metrics."""
    search = snapshot["search"]
    c = Constraints.from_json(search["constraints"])
    m = _metrics(search)
    key, y_key = m.latency.key, m.throughput.key
    result = snapshot["result"]
    points = [
        (cand, {**lv, key: _figure(lv, key), y_key: _figure(lv, y_key)})
        for cand in snapshot["candidates"]
        if cand["state"] == "measured"
        for lv in (cand.get("effective_levels") or cand["levels"])
        if _figure(lv, key) is not None and _figure(lv, y_key) is not None
    ]

    def trace(
        items: list[tuple[dict, dict]], name: str, labelled: bool = False, **style: Any
    ) -> dict[str, Any]:
        data = {
            "type": "scatter",
            "mode": style.pop("mode", "markers"),
            "name": name,
            "x": [lv[key] / 1000 for _, lv in items],
            "y": [lv[y_key] for _, lv in items],
            "hovertext": [
                f"#{cand['seq']} {cand['description']} @ concurrency {lv['concurrency']:g}"
                for cand, lv in items
            ],
            **style,
        }
        if labelled:
            data["text"] = [f"#{cand['seq']} @{lv['concurrency']:g}" for cand, lv in items]
            data["textposition"] = "top center"
            data["mode"] += "+text"
        return data

    # The front as the server computed it (ranking.pareto_points), already sorted by latency.
    on_front = [
        (
            {"key": p["key"], "seq": p["seq"], "description": p["description"]},
            {"concurrency": p["concurrency"], y_key: p["throughput"], key: p["latency_us"]},
        )
        for p in result["front_points"]
    ]
    front_ids = {(cand["key"], lv["concurrency"]) for cand, lv in on_front}
    best_point = result.get("best_point")
    best = [
        p for p in points if best_point and (p[0]["key"], p[1]["concurrency"]) == tuple(best_point)
    ][:1]
    current = [p for p in points if p[0]["baseline"]]
    # The constraint lines on the axes they bound: the x axis's budget (the first
    # response's when it is the x axis), the floor (infer/s) when the y axis is infer/s.
    x_budget = c.first_response_budget_ms if key == c.first_response_key else c.latency_budget_ms
    y_floor = c.min_throughput if y_key == "throughput" else None
    shapes = []
    if x_budget:
        shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": x_budget,
                       "x1": x_budget, "y0": 0, "y1": 1,
                       "line": {"dash": "dash", "color": "#d92d20"}})  # fmt: skip
    if y_floor:
        shapes.append({"type": "line", "xref": "paper", "yref": "y", "x0": 0, "x1": 1,
                       "y0": y_floor, "y1": y_floor,
                       "line": {"dash": "dash", "color": "#f79009"}})  # fmt: skip
    pareto = {
        "data": [
            trace(points, "measured", marker={"color": "#98a2b3", "size": 8}),
            trace(
                on_front,
                "Pareto front",
                True,
                mode="lines+markers",
                marker={"color": "#1570ef", "size": 10},
                line={"color": "#1570ef"},
            ),  # fmt: skip
            trace(
                current,
                "current config",
                marker={"symbol": "circle-open", "size": 14, "color": "#101828"},
            ),
            # Labelled where the front's label does not already name it.
            trace(
                best,
                "best",
                bool(best) and (best[0][0]["key"], best[0][1]["concurrency"]) not in front_ids,
                marker={"symbol": "star", "size": 16, "color": "#12b76a"},
            ),
        ],
        "layout": {
            "margin": {"l": 60, "r": 15, "t": 40, "b": 45},
            "xaxis": {"title": {"text": f"{m.latency.label} latency (ms)"}, "rangemode": "tozero"},
            "yaxis": {
                "title": {"text": f"{m.throughput.label} ({m.throughput.unit})"},
                "rangemode": "tozero",
            },
            "shapes": shapes,
            # Above the plot: at the bottom a horizontal legend sits on the axis title.
            "legend": LEGEND,
        },
    }
    curves = {
        "data": [
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": cand["key"],
                "x": [lv["concurrency"] for lv in cand.get("effective_levels") or cand["levels"]],
                "y": [_figure(lv, y_key) for lv in cand.get("effective_levels") or cand["levels"]],
            }
            for cand in snapshot["candidates"]
            if cand["state"] == "measured"
        ],
        "layout": {
            "margin": {"l": 60, "r": 15, "t": 40, "b": 45},
            "legend": LEGEND,
            "xaxis": {"title": {"text": "concurrency"}},
            "yaxis": {
                "title": {"text": f"{m.throughput.label} ({m.throughput.unit})"},
                "rangemode": "tozero",
            },
        },
    }
    return {"pareto": pareto, "curves": curves}


def _environment_text(info: dict[str, Any]) -> list[tuple[str, str]]:
    env = info.get("environment") or {}
    gpus = env.get("gpus") or []
    gpu_text = (
        ", ".join(
            f"{g['uuid']}"
            + (
                f" ({g['memory_total_bytes'] / 2**30:.1f} GiB)"
                if g.get("memory_total_bytes")
                else ""
            )
            for g in gpus
        )
        if gpus
        else f"none reported ({triton_gpus.ABSENT})"
    )
    cpus = env.get("cpu_count")
    # Searches recorded before servers had names kept the address in "server".
    where = env.get("grpc_url") or env.get("server", "?")
    if env.get("grpc_url") and env.get("server") not in (None, "default"):
        where += f" (server {env['server']})"
    return [
        ("Triton", f"{env.get('triton_version') or 'version unknown'} at {where}"),
        ("Host", f"{env.get('host', '?')}" + (f", {cpus} CPU cores" if cpus else "")),
        ("GPUs", gpu_text),
    ]


# A streaming search's breakdown also holds the time to the first response.
FIRST_RESPONSE_KEYS = ("first_response_p50_us", "first_response_p95_us", "first_response_p99_us")


def _breakdown_rows(snapshot: dict[str, Any], gpus: bool, streams: bool = False) -> list[str]:
    """Each measured candidate at its operating point: client latency and Triton's split
    (and over streams, the first response's percentiles)."""
    by_key = {cand["key"]: cand for cand in snapshot["candidates"]}
    rows = []
    for r in snapshot["result"]["rows"]:
        cand = by_key.get(r["key"])
        if cand is None or r["concurrency"] is None:
            continue
        levels = cand.get("effective_levels") or cand["levels"]
        lv = next((x for x in levels if x["concurrency"] == r["concurrency"]), None)
        if lv is None:
            continue
        avg, server = lv.get("avg_us"), lv.get("server_request_us")
        network = max(0.0, avg - server) if avg is not None and server is not None else None
        values = [
            f"#{cand['seq']} {cand['description']}",
            f"{r['concurrency']:g}",
            *(fmt(lv.get(k), 1000) for k in ("p50_us", "p95_us", "p99_us", "avg_us")),
            *(fmt(_figure(lv, k), 1000) for k in (FIRST_RESPONSE_KEYS if streams else ())),
            *(
                fmt(lv.get(k), 1000)
                for k in (
                    "queue_us",
                    "compute_input_us",
                    "compute_infer_us",
                    "compute_output_us",
                    "server_request_us",
                )
            ),
            fmt(network, 1000),
            fmt(lv.get("avg_batch"), digits=1),
        ]
        if gpus:
            memory = cand.get("gpu_memory_bytes")
            values.append(fmt(memory, 2**20, 0) if memory else "n/a")
        rows.append(cells(values))
    return rows


def _space_text(space: dict[str, Any], baseline: Knobs) -> str:
    """The searched knobs, in the words of the model's scheduler."""
    head = (
        f"{space.get('kind')} counts {space.get('counts')} · max_batch_size "
        f"{space.get('max_batch_sizes') or 'current'}"
    )
    if baseline.sequence == "oldest":
        delays = space.get("delays_us") or "current"
        return f"{head} · sequence batcher kept (oldest), its delays µs {delays}"
    if baseline.sequence:
        return f"{head} · sequence batcher kept ({baseline.sequence})"
    return (
        f"{head} · batching {'off, ' if space.get('batching_off') else ''}"
        f"{'on' if space.get('batching_on') else ''} · delays µs "
        f"{space.get('delays_us') or 'current'} · preferred {space.get('preferred')}"
    )


def build(search: Search) -> str:
    """The whole report as one HTML string."""
    snapshot = reading.snapshot(search.pk)
    assert snapshot is not None
    info = snapshot["search"]
    c = Constraints.from_json(info["constraints"])
    m = _metrics(info)
    streams = m.latency.key == c.first_response_key
    # infer/s beside the throughput-like metric when that is another one.
    rate = m.throughput != INFER_RATE
    gpus = bool((info.get("environment") or {}).get("gpus")) or any(
        r["gpu_memory_bytes"] for r in snapshot["result"]["rows"]
    )
    rows = []
    for r in snapshot["result"]["rows"]:
        values = [
            r["rank"],
            f"#{r.get('seq', '')} " + r["description"] + (" (current)" if r["baseline"] else ""),
            r["state"]
            + ("" if r["feasible"] or r["state"] != "measured" else ", misses constraints"),
            fmt(r["throughput"], digits=1),
            *([fmt(r.get("infer_per_s"), digits=1)] if rate else []),
            fmt(r["latency_us"], 1000),
            "n/a" if r["concurrency"] is None else f"{r['concurrency']:g}",
            (r.get("spread_text") or "one measurement")
            + (" · tied with the best" if r.get("tied") else ""),
        ]
        if gpus:
            values.append(fmt(r["gpu_memory_bytes"], 2**20, 0) if r["gpu_memory_bytes"] else "n/a")
        values += ["; ".join(r["diff"]) or "(same as current)", r["reason"]]
        rows.append(cells(values))
    configs = []
    for cand in snapshot["candidates"]:
        try:
            text = applying.candidate_config_text(search, cand["key"])
        except Exception as exc:  # noqa: BLE001 - the report must still render
            text = f"(config unavailable: {exc})"
        configs.append(
            f"<details><summary>#{cand['seq']} {html.escape(cand['key'])} — "
            f"{html.escape(cand['description'])}</summary><pre>{html.escape(text)}</pre></details>"
        )
    measure = info["measure"]
    space = info["space"]
    confirm = info.get("confirm") or {}
    budget_from = info.get("budget_from") or ""
    parameters = [
        ("Mode", f"{info['mode']} · objective {info['objective']}"),
        (
            "Judged on",
            f"{m.throughput.label} ({m.throughput.unit}) and {m.latency.label} latency",
        ),
        (
            "Constraints",
            reading.constraints_text(c) + (f" (budget: {budget_from})" if budget_from else ""),
        ),
        (
            "Measured at",
            f"concurrency {info.get('range_text') or ''} · windows "
            f"{measure.get('measurement_window_ms')} ms · max windows {measure.get('max_windows')}"
            f" · stability {measure.get('stability_percentage') or 0:g}% · "
            f"percentile {c.latency_label}"
            + (f" · {info['measured_how']}" if info.get("measured_how") else ""),
        ),
        (
            "Re-measured",
            f"the top {confirm.get('top')} and the current config, "
            f"{confirm.get('rounds')} alternating rounds"
            if confirm.get("top") and (confirm.get("rounds") or 0) > 1
            else "no (each candidate measured once)",
        ),
        ("Space", _space_text(space, Knobs.from_json(info["baseline"]))),
        ("Current config", info["baseline_description"]),
        (
            "When",
            f"created {info.get('created_at') or '?'} · started {info.get('started_at') or '?'}"
            f" · finished {info.get('finished_at') or 'not yet'} · by "
            f"{info.get('created_by') or 'the command line'}",
        ),
        (
            "Outcome",
            f"{info['state']} · {len(snapshot['candidates'])} candidate runs · restore: "
            f"{info['restore_message'] or 'pending'}",
        ),
    ]
    facts = fact_rows([*_environment_text(info), *parameters])
    gpu_head = "<th>GPU memory (MB)</th>" if gpus else ""
    rate_head = "<th>Throughput (infer/s)</th>" if rate else ""
    first_head = "".join(f"<th>first response {p}</th>" for p in ("p50", "p95", "p99") if streams)
    tput_head = html.escape(f"{m.throughput.label.capitalize()} ({m.throughput.unit})")
    lat_head = html.escape(m.latency.label)
    title = f"Config search #{info['id']} · {info['model']}"
    # Only scatter traces: Plotly's basic bundle, which `page` inlines when installed, has them.
    body = f"""<p><strong id="recommendation">{html.escape(snapshot["result"]["recommendation"])}</strong></p>
<table id="facts">{facts}</table>
<h2>{html.escape(m.throughput.label.capitalize())} vs {lat_head} latency</h2><div id="pareto" class="chart"></div>
<h2>{html.escape(m.throughput.label.capitalize())} per concurrency</h2><div id="curves" class="chart"></div>
<h2>Ranking</h2>
<table id="ranking"><tr><th>Rank</th><th>Candidate</th><th>State</th><th>{tput_head}</th>{rate_head}<th>{lat_head} (ms)</th><th>Concurrency</th><th>Spread</th>{gpu_head}<th>Diff vs current</th><th>Note</th></tr>
{"".join(rows)}
</table>
<h2>Latency breakdown at each candidate's operating point (ms)</h2>
<table id="breakdown"><tr><th>Candidate</th><th>Concurrency</th><th>p50</th><th>p95</th><th>p99</th><th>avg</th>{first_head}<th>queue</th><th>compute input</th><th>compute infer</th><th>compute output</th><th>Triton total</th><th>network + client</th><th>avg batch</th>{gpu_head}</tr>
{"".join(_breakdown_rows(snapshot, gpus, streams))}
</table>
<h2>Configs</h2>
{"".join(configs)}"""
    return page(title, body, figures(snapshot))
