"""perf_analyzer's -f CSV: reading its rows (`parse_csv`, `csv_server`), and writing
measured levels in its --verbose-csv shape (`levels_csv`), with the columns a streaming
sweep, goodput objectives or a model's steps add. Values in µs; its rows are sorted by
throughput, ours by level.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from typing import Any

from common.csv_cells import csv_cell

from .. import measure

# perf_analyzer's CSV header with --verbose-csv (2.48); without it the last 3 are absent.
CSV_COLUMNS = [
    "Concurrency",
    "Inferences/Second",
    "Client Send",
    "Network+Server Send/Recv",
    "Server Queue",
    "Server Compute Input",
    "Server Compute Infer",
    "Server Compute Output",
    "Client Recv",
    "p50 latency",
    "p90 latency",
    "p95 latency",
    "p99 latency",
    "Avg latency",
    "request/response",
    "response wait",
]


# Added after those for a streaming sweep (µs, but responses/s): a level's `stream`
# figures (`level_figures.StreamFigures`); a figure an engine did not measure is an empty cell
# (perf_analyzer 2.48 reports only the response throughput).
STREAM_CSV_COLUMNS = {
    "Response Throughput": "response_throughput",
    "p50 time to first response": "first_response_p50_us",
    "p95 time to first response": "first_response_p95_us",
    "p99 time to first response": "first_response_p99_us",
    "avg inter-response time": "inter_response_avg_us",
    "p95 inter-response time": "inter_response_p95_us",
    # The built-in engine's tokens (`measure.TOKEN_FIELDS`): tokens/s, per request, per user.
    "Output Token Throughput": "output_token_throughput",
    "Tokens per Request": "tokens_per_request",
    "Output Token Throughput per User": "output_token_throughput_per_user",
}
# Added last for a sweep with goodput objectives: requests/s that met them all.
GOODPUT_CSV_COLUMN = "Goodput"
_RATES = ("response_throughput", "output_token_throughput", "output_token_throughput_per_user",
          "tokens_per_request", "goodput")  # fmt: skip


# Added after those, per step, for a sweep of an ensemble or a BLS model ("add_sub Server
# Queue", ...): its `steps` (`level_figures.StepFigures`), µs like the other columns.
STEP_CSV_COLUMNS = {
    "Server Queue": "queue_us",
    "Server Compute Input": "compute_input_us",
    "Server Compute Infer": "compute_infer_us",
    "Server Compute Output": "compute_output_us",
    "Request Count": "request_count",
    "Avg Batch Size": "avg_batch_size",
}


def parse_csv(text: str) -> list[dict[str, float]]:
    """perf_analyzer's -f CSV as dicts of floats, re-sorted by level (first column)."""
    reader = csv.DictReader(io.StringIO(text))
    rows = [{k: float(v) for k, v in row.items() if k and v not in (None, "")} for row in reader]
    key = reader.fieldnames[0] if reader.fieldnames else "Concurrency"
    return sorted(rows, key=lambda r: r.get(key, 0.0))


# The model's own breakdown in perf_analyzer's CSV (µs): for a BLS model the CSV has it, its
# stdout only its calls' sums.
CSV_SERVER = {
    "Server Queue": "queue_us",
    "Server Compute Input": "compute_input_us",
    "Server Compute Infer": "compute_infer_us",
    "Server Compute Output": "compute_output_us",
}


def csv_server(row: dict[str, float]) -> dict[str, float]:
    """The server fields of one row of the CSV (`parse_csv`)."""
    return {field: row[column] for column, field in CSV_SERVER.items() if column in row}


def levels_csv(
    levels: Sequence[measure.Level],
    mode: str = "concurrency",
    *,
    streaming: bool = False,
    goodput: bool = False,
) -> str:
    """Measured levels as perf_analyzer's --verbose-csv CSV (µs, sorted by level).

    "Client Send"/"Client Recv" are 0: the built-in engine sends pre-serialised requests
    and does not decode responses. "Network+Server Send/Recv" is what perf_analyzer makes
    it: avg client latency minus server request time (plus client send/recv, here 0).
    A latency that is not known (a level perf_analyzer reported only from its windows,
    because it did not settle) is an empty cell: the level is kept, as it is on the page.
    A level without any latency is left out. A streaming sweep adds STREAM_CSV_COLUMNS, a
    sweep with goodput objectives GOODPUT_CSV_COLUMN, a sweep with steps STEP_CSV_COLUMNS per
    step (`step_columns`); a figure the engine did not measure (perf_analyzer's tokens) is
    an empty cell, never 0.
    """

    def us(value: float | None) -> int | str:
        return "" if value is None or math.isnan(value) else round(value)

    columns = list(CSV_COLUMNS) + (list(STREAM_CSV_COLUMNS) if streaming else [])
    columns += [GOODPUT_CSV_COLUMN] if goodput else []
    if mode == "request_rate":
        columns[0] = "Request Rate"
    steps = step_columns(levels)
    # Model names come from configs: quoted by the writer, and never read as a formula.
    columns += [csv_cell(f"{label} {c}") for label, _ in steps for c in STEP_CSV_COLUMNS]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for level in sorted(levels, key=lambda lv: lv.level):
        if all(level.latency(k) is None for k in measure.LATENCY_FIELDS):
            continue
        has_server = level.server_request_us is not None

        def server(value: float | None, known: bool = has_server) -> int:
            return round(value or 0.0) if known else 0

        avg = level.avg_us
        if avg is None or math.isnan(avg):
            network: int | str = ""
        else:
            network = round(max(0.0, avg - (level.server_request_us or 0.0))) if has_server else 0
        writer.writerow(
            [
                f"{level.level:g}",
                f"{level.throughput:g}",
                0,
                network,
                server(level.queue_us),
                server(level.compute_input_us),
                server(level.compute_infer_us),
                server(level.compute_output_us),
                0,
                us(level.p50_us),
                us(level.p90_us),
                us(level.p95_us),
                us(level.p99_us),
                us(avg),
                0,
                us(avg),
                *(
                    _stream_cell(k, level.figure(k))
                    for k in STREAM_CSV_COLUMNS.values()
                    if streaming
                ),
                *([_stream_cell("goodput", level.figure("goodput"))] if goodput else []),
                *_step_cells(level, steps),
            ]
        )
    return out.getvalue()


def step_columns(levels: Sequence[Any]) -> list[tuple[str, tuple[str, str]]]:
    """(label, (model, version)) of every step the levels (`Level`s or level rows as JSON)
    have, in step order: the model's name, "model:version" where one model has steps of
    several versions."""
    seen: list[tuple[str, str]] = []
    for level in levels:
        for step in measure.steps_of(level):
            key = (str(step.model), str(step.version))
            if key not in seen:
                seen.append(key)
    names = [m for m, _ in seen]
    return [(m if names.count(m) == 1 else f"{m}:{v}", (m, v)) for m, v in seen]


def _step_cells(
    level: measure.Level, steps: Sequence[tuple[str, tuple[str, str]]]
) -> list[int | str]:
    mine = {(str(s.model), str(s.version)): s for s in measure.steps_of(level)}
    cells: list[int | str] = []
    for _, key in steps:
        step = mine.get(key)
        for name in STEP_CSV_COLUMNS.values():
            value = None if step is None else getattr(step, name)
            if value is None or not math.isfinite(value):
                cells.append("")
            elif name == "avg_batch_size":
                cells.append(f"{round(value, 2):g}")
            else:
                cells.append(round(value))
    return cells


def _stream_cell(key: str, value: float | None) -> int | str:
    if value is None or math.isnan(value):
        return ""
    return f"{value:g}" if key in _RATES else round(value)
