"""A self-contained HTML report of a config search: Plotly inlined, no network needed.

The page holds the recommendation, the Pareto chart (every measured level, the front,
the best point, the constraint lines), throughput per concurrency for each candidate,
the ranked table, and every candidate's config.pbtxt (the saved config with its knobs
applied). Data goes in as JSON with "</" escaped, so no value can close the script.
"""

from __future__ import annotations

import html
import json
from typing import Any

from ..models import Search
from . import runner
from .objective import Constraints


def _json(value: Any) -> str:
    return json.dumps(value).replace("</", "<\\/")


def figures(snapshot: dict[str, Any]) -> dict[str, Any]:
    """Plotly figures (data + layout) for the Pareto chart and the per-candidate curves."""
    search = snapshot["search"]
    c = Constraints.from_json(search["constraints"])
    key = c.latency_key
    result = snapshot["result"]
    points = [
        (cand, lv)
        for cand in snapshot["candidates"]
        if cand["state"] == "measured"
        for lv in cand["levels"]
        if lv.get(key) is not None
    ]
    front = {(k, lvl) for k, lvl in result["front"]}

    def trace(items: list[tuple[dict, dict]], name: str, **style: Any) -> dict[str, Any]:
        return {
            "type": "scatter",
            "mode": style.pop("mode", "markers"),
            "name": name,
            "x": [lv[key] / 1000 for _, lv in items],
            "y": [lv["throughput"] for _, lv in items],
            "text": [
                f"{cand['description']} @ concurrency {lv['concurrency']:g}" for cand, lv in items
            ],
            **style,
        }

    on_front = sorted(
        [p for p in points if (p[0]["key"], p[1]["concurrency"]) in front], key=lambda p: p[1][key]
    )
    best = [p for p in points if p[0]["key"] == result.get("best_key")]
    current = [p for p in points if p[0]["baseline"]]
    shapes = []
    if c.latency_budget_ms:
        shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": c.latency_budget_ms,
                       "x1": c.latency_budget_ms, "y0": 0, "y1": 1,
                       "line": {"dash": "dash", "color": "#d92d20"}})  # fmt: skip
    if c.min_throughput:
        shapes.append({"type": "line", "xref": "paper", "yref": "y", "x0": 0, "x1": 1,
                       "y0": c.min_throughput, "y1": c.min_throughput,
                       "line": {"dash": "dash", "color": "#f79009"}})  # fmt: skip
    pareto = {
        "data": [
            trace(points, "measured", marker={"color": "#98a2b3", "size": 8}),
            trace(
                on_front,
                "Pareto front",
                mode="lines+markers",
                marker={"color": "#1570ef", "size": 10},
                line={"color": "#1570ef"},
            ),  # fmt: skip
            trace(
                current,
                "current config",
                marker={"symbol": "circle-open", "size": 14, "color": "#101828"},
            ),
            trace(best, "best", marker={"symbol": "star", "size": 16, "color": "#12b76a"}),
        ],
        "layout": {
            "margin": {"l": 60, "r": 15, "t": 10, "b": 45},
            "xaxis": {"title": {"text": f"{c.latency_label} latency (ms)"}, "rangemode": "tozero"},
            "yaxis": {"title": {"text": "throughput (infer/s)"}, "rangemode": "tozero"},
            "shapes": shapes,
            "legend": {"orientation": "h"},
        },
    }
    curves = {
        "data": [
            {
                "type": "scatter",
                "mode": "lines+markers",
                "name": cand["key"],
                "x": [lv["concurrency"] for lv in cand["levels"]],
                "y": [lv["throughput"] for lv in cand["levels"]],
            }
            for cand in snapshot["candidates"]
            if cand["state"] == "measured"
        ],
        "layout": {
            "margin": {"l": 60, "r": 15, "t": 10, "b": 45},
            "xaxis": {"title": {"text": "concurrency"}},
            "yaxis": {"title": {"text": "throughput (infer/s)"}, "rangemode": "tozero"},
        },
    }
    return {"pareto": pareto, "curves": curves}


def _fmt(value: float | None, scale: float = 1.0, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value / scale:,.{digits}f}"


def build(search: Search) -> str:
    """The whole report as one HTML string."""
    from plotly.offline import get_plotlyjs

    snapshot = runner.snapshot(search.pk)
    assert snapshot is not None
    info = snapshot["search"]
    c = Constraints.from_json(info["constraints"])
    rows = []
    for r in snapshot["result"]["rows"]:
        rows.append(
            "<tr>"
            + "".join(
                f"<td>{html.escape(str(v))}</td>"
                for v in (
                    r["rank"],
                    r["description"] + (" (current)" if r["baseline"] else ""),
                    r["state"]
                    + ("" if r["feasible"] or r["state"] != "measured" else ", misses constraints"),
                    _fmt(r["throughput"], digits=1),
                    _fmt(r["latency_us"], 1000),
                    _fmt(r["gpu_memory_bytes"], 2**20, 0) if r["gpu_memory_bytes"] else "n/a",
                    "; ".join(r["diff"]) or "(same as current)",
                    r["reason"],
                )
            )
            + "</tr>"
        )
    configs = []
    for cand in snapshot["candidates"]:
        try:
            text = runner.candidate_config_text(search, cand["key"])
        except Exception as exc:  # noqa: BLE001 - the report must still render
            text = f"(config unavailable: {exc})"
        configs.append(
            f"<details><summary>{html.escape(cand['key'])} — {html.escape(cand['description'])}"
            f"</summary><pre>{html.escape(text)}</pre></details>"
        )
    constraint_text = (
        ", ".join(
            part
            for part in (
                f"{c.latency_label} ≤ {c.latency_budget_ms:g} ms" if c.latency_budget_ms else "",
                f"throughput ≥ {c.min_throughput:g} infer/s" if c.min_throughput else "",
                f"GPU memory ≤ {c.gpu_memory_limit_mb:g} MB" if c.gpu_memory_limit_mb else "",
            )
            if part
        )
        or "none"
    )
    title = f"Config search #{info['id']} · {info['model']}"
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font: 14px system-ui, sans-serif; margin: 1.5rem; color: #101828; }}
table {{ border-collapse: collapse; width: 100%; }} td, th {{ border-bottom: 1px solid #eaecf0; padding: .3rem .5rem; text-align: left; vertical-align: top; }}
.chart {{ height: 420px; }} pre {{ background: #f9fafb; padding: .6rem; overflow: auto; }}
</style>
<script>{get_plotlyjs()}</script>
</head><body>
<h1>{html.escape(title)}</h1>
<p><strong id="recommendation">{html.escape(snapshot["result"]["recommendation"])}</strong></p>
<p>State: {html.escape(info["state"])} · mode {html.escape(info["mode"])} · objective {html.escape(info["objective"])} ·
constraints: {html.escape(constraint_text)} · current config: {html.escape(info["baseline_description"])} ·
concurrency {info["measure"]["start"]:g}:{info["measure"]["end"]:g}:{info["measure"]["step"]:g} ·
{len(snapshot["candidates"])} candidate runs · restore: {html.escape(info["restore_message"] or "pending")}</p>
<h2>Throughput vs {c.latency_label} latency</h2><div id="pareto" class="chart"></div>
<h2>Throughput per concurrency</h2><div id="curves" class="chart"></div>
<h2>Ranking</h2>
<table><tr><th>#</th><th>Candidate</th><th>State</th><th>Throughput (infer/s)</th><th>{c.latency_label} (ms)</th><th>GPU memory (MB)</th><th>Diff vs current</th><th>Note</th></tr>
{"".join(rows)}
</table>
<h2>Configs</h2>
{"".join(configs)}
<script>
const FIGURES = {_json(figures(snapshot))};
Plotly.newPlot("pareto", FIGURES.pareto.data, FIGURES.pareto.layout, {{displayModeBar: false}});
Plotly.newPlot("curves", FIGURES.curves.data, FIGURES.curves.layout, {{displayModeBar: false}});
</script>
</body></html>
"""
