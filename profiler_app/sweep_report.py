"""A self-contained HTML report of a sweep, as a config search has (`report_html` is their
shared skeleton: Plotly inlined, no network needed).

The page holds the verdict (the recommendation and its caveat, as the sweep page shows
them), which Triton ran the sweep (server, address, version, GPUs, the worker's host), when
and by whom, its parameters, the charts the sweep page draws of the levels (throughput,
latency, throughput against latency, the latency breakdown; goodput, streaming, tokens and
sequence positions where the sweep measured them), the levels table and the config.pbtxt
the sweep started with. It is built from the stored rows only: nothing is measured, and a
running sweep's report holds its levels so far.
"""

from __future__ import annotations

import html
from datetime import datetime
from typing import Any

from django.utils import timezone

from . import export, kind_rules, measure, sweep_plan, sweep_read, verdict
from .models import Sweep, SweepPoint
from .params import SweepParams
from .report_html import LEGEND, cells, fact_rows, fmt, page

COLORS = {"p50": "#12b76a", "p90": "#2e90fa", "p95": "#f79009", "p99": "#d92d20", "avg": "#667085"}
POSITION_COLORS = {"first": "#12b76a", "middle": "#667085", "last": "#d92d20"}
MARGIN = {"l": 55, "r": 15, "t": 40, "b": 45}
BREAKDOWN = (
    ("queue", "queue_us"),
    ("compute input", "compute_input_us"),
    ("compute infer", "compute_infer_us"),
    ("compute output", "compute_output_us"),
)


def _ms(us: float | None) -> float | None:
    return None if us is None else us / 1000


def _extra(point: dict[str, Any], key: str) -> Any:
    return (point.get("extra") or {}).get(key)


def _chosen_key(params: SweepParams) -> str:
    return "avg_us" if params.percentile == "avg" else f"p{int(params.percentile)}_us"


def _spread_text(point: dict[str, Any]) -> str:
    spreads = [
        v
        for v in (_extra(point, "throughput_spread"), _extra(point, "latency_spread"))
        if v is not None
    ]
    return f" (spread {round(100 * max(spreads))}%)" if spreads else ""


def _layout(x_title: str, y_title: str, **more: Any) -> dict[str, Any]:
    return {
        "margin": MARGIN,
        "showlegend": True,
        "legend": LEGEND,
        "xaxis": {"title": {"text": x_title}},
        "yaxis": {"title": {"text": y_title}, "rangemode": "tozero"},
        **more,
    }


def levels_of(sweep: Sweep) -> list[dict[str, Any]]:
    """The sweep's level rows (window -1) as the page and the exports show them, by level."""
    rows = SweepPoint.objects.filter(sweep=sweep, window=SweepPoint.LEVEL).order_by("level")
    return [measure.point_json(p) for p in rows]


def summary_of(sweep: Sweep) -> dict[str, Any]:
    """The verdict the sweep page shows: the stored one once finished, else from the levels
    so far."""
    return sweep.summary if sweep.finished and sweep.summary else sweep_read.knee_summary(sweep)


def figures(
    sweep: Sweep, levels: list[dict[str, Any]], summary: dict[str, Any]
) -> dict[str, dict[str, Any]]:
    """Plotly figures (data + layout) of the measured levels, as static/js/sweep.js draws
    them: a level that did not settle is drawn hollow."""
    params = sweep_plan.params_of(sweep)
    good = [p for p in levels if verdict.measured(p)]
    x = [p["level"] for p in good]
    x_title = "request rate (infer/s)" if params.mode == "request_rate" else "concurrency"
    key, label = _chosen_key(params), params.latency_label
    symbols = ["circle-open" if p.get("stable") is False else "circle" for p in good]
    hover = ["did not settle" + _spread_text(p) if p.get("stable") is False else "" for p in good]
    knee = [p for p in good if p["level"] == summary.get("knee_level")]
    best = [p for p in good if p["level"] == summary.get("best_level")]
    unsettled = (
        [
            {
                "type": "scatter", "x": [None], "y": [None], "mode": "markers",
                "name": "hollow: did not settle",
                "marker": {"symbol": "circle-open", "size": 9, "color": "#667085"},
            }
        ]
        if any(p.get("stable") is False for p in good)
        else []
    )  # fmt: skip

    def spread(p: dict[str, Any]) -> float:
        rounds = [r["throughput"] for r in _extra(p, "rounds") or [] if "throughput" in r]
        return (max(rounds) - min(rounds)) / 2 if len(rounds) > 1 else 0.0

    bars = [spread(p) for p in good]
    out: dict[str, dict[str, Any]] = {}
    out["throughput"] = {
        "data": [
            {
                "type": "scatter", "mode": "lines+markers", "name": "throughput",
                "x": x, "y": [p["throughput"] for p in good], "text": hover,
                "marker": {"symbol": symbols, "size": 9},
                "error_y": {"type": "data", "array": bars, "visible": any(bars)},
            },
            {
                "type": "scatter", "mode": "markers", "name": "knee",
                "x": [p["level"] for p in knee], "y": [p["throughput"] for p in knee],
                "marker": {"size": 14, "symbol": "star", "color": "#d92d20"},
            },
            {
                "type": "scatter", "mode": "markers", "name": "best within budget",
                "x": [p["level"] for p in best], "y": [p["throughput"] for p in best],
                "marker": {"size": 12, "symbol": "diamond-open", "color": "#12b76a"},
            },
            *unsettled,
        ],
        "layout": _layout(x_title, "infer/s"),
    }  # fmt: skip
    budget = params.latency_threshold_ms
    shapes = (
        [
            {
                "type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": budget, "y1": budget,
                "line": {"dash": "dash", "color": "#d92d20"},
            }
        ]
        if budget
        else []
    )  # fmt: skip
    out["latency"] = {
        "data": [
            *(
                {
                    "type": "scatter", "mode": "lines+markers", "name": name,
                    "x": x, "y": [_ms(p.get(f"{name}_us")) for p in good], "text": hover,
                    "line": {"color": COLORS[name]},
                    "marker": {"symbol": symbols, "size": 8, "color": COLORS[name]},
                }
                for name in ("p50", "p95", "p99")
            ),
            *(
                [
                    {
                        "type": "scatter", "mode": "markers", "name": "knee",
                        "x": [knee[0]["level"]], "y": [_ms(knee[0].get(key))],
                        "marker": {"size": 14, "symbol": "star", "color": "#d92d20"},
                    }
                ]
                if knee
                else []
            ),
            *unsettled,
        ],
        "layout": _layout(
            x_title, "ms" + (f" (budget {budget:g} ms)" if budget else ""), shapes=shapes
        ),
    }  # fmt: skip
    out["tput_latency"] = {
        "data": [
            {
                "type": "scatter", "mode": "lines+markers+text", "name": label,
                "x": [_ms(p.get(key)) for p in good], "y": [p["throughput"] for p in good],
                "text": [f"{level:g}" for level in x], "hovertext": hover,
                "textposition": "top center", "marker": {"symbol": symbols, "size": 9},
            },
            *unsettled,
        ],
        "layout": _layout(f"{label} latency (ms)", "infer/s"),
    }  # fmt: skip
    network = [
        None
        if p.get("avg_us") is None or p.get("server_request_us") is None
        else max(0.0, (p["avg_us"] - p["server_request_us"]) / 1000)
        for p in good
    ]
    out["breakdown"] = {
        "data": [
            *(
                {"type": "bar", "name": name, "x": x, "y": [_ms(p.get(field)) for p in good]}
                for name, field in BREAKDOWN
            ),
            {"type": "bar", "name": "network + client", "x": x, "y": network},
        ],
        "layout": {**_layout(x_title, "avg ms"), "barmode": "stack"},
    }
    measured = [measure.Level.from_json(p) for p in good]
    if any(lv.figure("goodput") is not None for lv in measured):
        batch = params.batch_size or 1
        out["goodput"] = {
            "data": [
                {
                    "type": "scatter", "mode": "lines+markers", "name": "requests/s",
                    "x": x, "y": [p["throughput"] / batch for p in good],
                    "line": {"color": "#667085"},
                },
                {
                    "type": "scatter", "mode": "lines+markers",
                    "name": f"goodput: {params.goodput}", "x": x,
                    "y": [lv.figure("goodput") for lv in measured], "line": {"color": "#12b76a"},
                },
            ],
            "layout": _layout(x_title, "requests/s"),
        }  # fmt: skip
    if params.streaming:
        out.update(_streaming(params, measured, x, x_title))
    if sweep.sequence and sweep.engine == Sweep.Engine.BUILTIN:
        out.update(_positions(measured, x, x_title))
    return out


def _streaming(
    params: SweepParams, good: list[measure.Level], x: list[float], x_title: str
) -> dict[str, dict[str, Any]]:
    """First-response and inter-response times, responses/s, and tokens/s where the sweep
    counted tokens from a tensor (otherwise they are the responses)."""

    def times(prefix: str) -> list[dict[str, Any]]:
        return [
            {
                "type": "scatter", "mode": "lines+markers", "name": name, "x": x,
                "y": [_ms(lv.figure(f"{prefix}_{name}_us")) for lv in good],
                "line": {"color": COLORS[name]},
            }
            for name in ("p50", "p90", "p95", "p99")
        ]  # fmt: skip

    def line(name: str, field: str) -> dict[str, Any]:
        y = [lv.figure(field) for lv in good]
        return {"type": "scatter", "mode": "lines+markers", "name": name, "x": x, "y": y}

    out = {
        "first_response": {"data": times("first_response"), "layout": _layout(x_title, "ms")},
        "inter_response": {"data": times("inter_response"), "layout": _layout(x_title, "ms")},
        "responses": {
            "data": [
                line(
                    "responses/s"
                    if params.token_output
                    else "responses/s (tokens/s where one response is one token)",
                    "response_throughput",
                )
            ],
            "layout": _layout(x_title, "responses/s"),
        },
    }
    if params.token_output and any(lv.figure("output_token_throughput") is not None for lv in good):
        out["tokens"] = {
            "data": [line(f"tokens/s (elements of {params.token_output})", "output_token_throughput")],
            "layout": _layout(x_title, "tokens/s"),
        }  # fmt: skip
        out["tokens_per_user"] = {
            "data": [
                line(
                    "tokens/s per request, after its first token",
                    "output_token_throughput_per_user",
                )
            ],
            "layout": _layout(x_title, "tokens/s"),
        }
    return out


def _positions(
    good: list[measure.Level], x: list[float], x_title: str
) -> dict[str, dict[str, Any]]:
    """A sequence sweep's requests by their position in the sequence (first, middle, last)."""

    def traces(suffix: str, scale: float) -> list[dict[str, Any]]:
        return [
            {
                "type": "scatter", "mode": "lines+markers", "name": name, "x": x,
                "y": [
                    None if (v := lv.figure(f"{name}_{suffix}")) is None else v / scale
                    for lv in good
                ],
                "line": {"color": color}, "marker": {"color": color},
            }
            for name, color in POSITION_COLORS.items()
        ]  # fmt: skip

    return {
        "position_throughput": {
            "data": traces("throughput", 1),
            "layout": _layout(x_title, "infer/s"),
        },
        "position_latency": {"data": traces("p95_us", 1000), "layout": _layout(x_title, "p95 ms")},
    }


# Each figure's heading (the sweep page's card titles); `{level}` is the level's label.
TITLES = {
    "throughput": "Throughput vs {level}",
    "goodput": "Goodput vs {level}",
    "latency": "Latency vs {level}",
    "tput_latency": "Throughput vs latency",
    "breakdown": "Latency breakdown per level",
    "first_response": "Time to first response vs {level}",
    "inter_response": "Inter-response time vs {level}",
    "responses": "Responses/s vs {level}",
    "tokens": "Tokens/s vs {level}",
    "tokens_per_user": "Tokens/s per request vs {level}",
    "position_throughput": "Throughput by position in the sequence vs {level}",
    "position_latency": "p95 latency by position in the sequence vs {level}",
}


def _when(value: datetime | None) -> str:
    return f"{timezone.localtime(value):%Y-%m-%d %H:%M:%S %Z}" if value else ""


def _parameters_text(sweep: Sweep, params: SweepParams) -> str:
    """The sweep page's parameters line."""
    parts = [
        ("request rate " if sweep.mode == "request_rate" else "concurrency ")
        + sweep.range_text
        + (f" × {params.rounds} rounds" if params.rounds > 1 else ""),
        f"batch {params.batch_size}",
        params.protocol + (" streaming" if params.streaming else ""),
        f"windows {params.measurement_window_ms} ms",
        f"stability {params.stability_percentage:g}%",
        f"max windows {params.max_windows}",
        f"percentile {params.latency_label}",
    ]
    if params.latency_threshold_ms:
        parts.append(f"latency threshold {params.latency_threshold_ms:g} ms")
    if params.goodput:
        parts.append(f"goodput {params.goodput} ms")
    if params.token_output:
        parts.append(f"tokens: elements of {params.token_output}")
    parts.append(f"input {sweep.input_data_text}")
    if params.shapes:
        shapes = " ".join(f"{k}:{','.join(map(str, v))}" for k, v in params.shapes.items())
        parts.append(f"shapes {shapes}")
    if sweep.mode == "request_rate":
        parts.append(f"{params.arrival} arrivals · max threads {params.max_threads}")
    if params.load_hosts > 1:
        parts.append(f"load from {params.load_hosts} hosts")
    return " · ".join(parts)


def facts(sweep: Sweep, params: SweepParams) -> list[tuple[str, str]]:
    """The facts table: the server and Triton, when and by whom, the parameters."""
    server = export.server_facts_text(sweep)
    recorded = {k: v for k, v in server.items() if v != export.NOT_RECORDED}
    where = f"server {sweep.server}" + (
        f" at {recorded['address']}" if "address" in recorded else ""
    )
    gpus = recorded.get("GPUs", export.NOT_RECORDED)
    if gpus not in ("0", export.NOT_RECORDED) and "GPU memory" in recorded:
        gpus += f" ({recorded['GPU memory']})"
    rows = [
        ("Triton", f"{recorded.get('Triton version', 'version ' + export.NOT_RECORDED)}, {where}"),
        ("GPUs", "none" if gpus == "0" else gpus),
        *((name, value) for name, value in server.items() if name.startswith("label ")),
        (
            "Worker",
            (f"{sweep.worker} on " if sweep.worker else "") + f"host {sweep.worker_host or '?'}"
            if sweep.worker or sweep.worker_host
            else "not claimed",
        ),
        ("Parameters", _parameters_text(sweep, params)),
    ]
    if sweep.model_kind:
        rows.append(("Kind", sweep.model_kind))
    if sweep.sequence:
        rows.append(
            (
                "Sequences",
                f"length {params.sequence_length} ± {params.sequence_length_variation:g}% · "
                f"ids {params.sequence_id_range or 'from 1'}"
                + (
                    f" · {params.num_of_sequences} live at once"
                    if sweep.mode == "request_rate"
                    else ""
                ),
            )
        )
    rows += [("Note", line) for line in kind_rules.notes(params, sweep.model_kind)]
    rows += [
        ("Engine", sweep.get_engine_display() + (f": {sweep.command}" if sweep.command else "")),
        ("config.pbtxt", sweep.config_sha256 or "(none on disk)"),
        (
            "When",
            f"created {_when(sweep.created_at)} · started {_when(sweep.started_at) or 'not yet'}"
            f" · finished {_when(sweep.finished_at) or 'not yet'}",
        ),
        ("By", sweep.created_by.get_username() if sweep.created_by else "the command line"),
        ("State", sweep.state + (f": {sweep.error}" if sweep.error else "")),
    ]
    if sweep.rerun_of_id:
        rows.append(("Re-run of", f"sweep #{sweep.rerun_of_id}"))
    if sweep.note:
        rows.append(("Sweep note", sweep.note))
    return rows


def _level_row(p: dict[str, Any]) -> str:
    extra = p.get("extra") or {}
    level = f"{p['level']:g}" + (" (partial)" if extra.get("cancelled") else "")
    if extra.get("behind_schedule"):
        level += f" (sent {fmt(extra.get('send_rate'), digits=0)}/s)"
    tput = fmt(p.get("throughput"), digits=1)
    rounds = extra.get("rounds") or []
    if len(rounds) > 1 and extra.get("round_spread") is not None:
        tput += f" ± {round(100 * extra['round_spread'])}% ({len(rounds)} rounds)"
    gpu = []  # utilisation (mean) and memory (peak) from Triton's metrics
    figures = measure.Level.from_json(p).gpu
    if figures is not None and figures.gpu_utilization is not None:
        gpu.append(f"{100 * figures.gpu_utilization:.0f} %")
    if figures is not None and figures.gpu_memory_bytes is not None:
        gpu.append(f"{figures.gpu_memory_bytes / 2**30:.1f} GiB")
    stable = "—" if p.get("stable") is None else "yes" if p["stable"] else "no" + _spread_text(p)
    return cells(
        [
            level,
            tput,
            *(fmt(p.get(k), 1000) for k in ("p50_us", "p95_us", "p99_us", "avg_us")),
            *(fmt(p.get(k), 1000) for k in ("queue_us", "compute_infer_us")),
            " · ".join(gpu) or "—",
            extra.get("windows", "—"),
            stable,
            p.get("errors", 0),
        ]
    )


def build(sweep: Sweep) -> str:
    """The whole report as one HTML string."""
    params = sweep_plan.params_of(sweep)
    levels = levels_of(sweep)
    summary = summary_of(sweep)
    charts = figures(sweep, levels, summary)
    level_label = sweep.level_label
    title = f"Sweep {sweep.title} · {sweep.model}" + (f" v{sweep.version}" if sweep.version else "")
    caveat = summary.get("caveat") or ""
    notes = [summary.get("sureness_text"), summary.get("host_note")]
    chart_html = "\n".join(
        f"<h2>{html.escape(TITLES[name].format(level=level_label))}</h2>"
        f'<div id="{name}" class="chart"></div>'
        for name in charts
    )
    rounds_head = f", median ± spread of {params.rounds} rounds" if params.rounds > 1 else ""
    config = sweep.config_text or "(no config.pbtxt was recorded)"
    body = f"""<p><strong id="recommendation">{html.escape(summary.get("recommendation") or "")}</strong></p>
{f'<p id="caveat"><em>{html.escape(caveat)}</em></p>' if caveat else ""}
{"".join(f"<p>{html.escape(n)}</p>" for n in notes if n)}
<table id="facts">{fact_rows(facts(sweep, params))}</table>
{chart_html}
<h2>Levels</h2>
<table id="levels"><tr><th>{html.escape(level_label.capitalize())}</th><th>Throughput (infer/s){html.escape(rounds_head)}</th><th>p50 (ms)</th><th>p95 (ms)</th><th>p99 (ms)</th><th>avg (ms)</th><th>queue (ms)</th><th>infer (ms)</th><th>GPU</th><th>Windows</th><th>Stable</th><th>Errors</th></tr>
{"".join(_level_row(p) for p in levels)}
</table>
<h2>config.pbtxt the sweep started with</h2>
<pre id="config">{html.escape(config)}</pre>"""
    return page(title, body, charts)
