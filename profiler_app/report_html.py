"""The skeleton every self-contained HTML report shares (a config search's, a sweep's).

One file that opens without a network: the Plotly the pages load is inlined
(`common.staticfinders.plotly_js`), the figures go in as JSON with "</" escaped (no value
can close the script), every text is HTML-escaped, and nothing links outside the file.
A report module builds its body (headings, tables, a `<div id=NAME class="chart">` per
figure) and its figures; `page` wraps them and draws each figure into its div.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable
from typing import Any

# Above the plot: at the bottom a horizontal legend sits on the axis title.
LEGEND = {"orientation": "h", "x": 0, "xanchor": "left", "y": 1.02, "yanchor": "bottom"}

STYLE = """body { font: 14px system-ui, sans-serif; margin: 1.5rem; color: #101828; }
table { border-collapse: collapse; width: 100%; } td, th { border-bottom: 1px solid #eaecf0; padding: .3rem .5rem; text-align: left; vertical-align: top; }
#facts th { width: 12rem; color: #475467; font-weight: 500; }
.chart { height: 420px; } pre { background: #f9fafb; padding: .6rem; overflow: auto; }"""


def script_json(value: Any) -> str:
    """`value` as JSON that is safe inside a <script> element."""
    return json.dumps(value).replace("</", "<\\/")


def fmt(value: float | None, scale: float = 1.0, digits: int = 2) -> str:
    """A figure divided by `scale` with thousands separators; "n/a" for an unknown one."""
    return "n/a" if value is None else f"{value / scale:,.{digits}f}"


def cells(values: Iterable[Any]) -> str:
    """One table row of escaped cells."""
    return "<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in values) + "</tr>"


def fact_rows(facts: Iterable[tuple[str, Any]]) -> str:
    """The rows of a report's facts table: a heading cell and a value cell, both escaped."""
    return "".join(
        f"<tr><th>{html.escape(k)}</th><td>{html.escape(str(v))}</td></tr>" for k, v in facts
    )


def page(title: str, body: str, figures: dict[str, dict[str, Any]]) -> str:
    """The whole report: `title` as its title and heading, then `body` (trusted HTML, its
    values escaped by the caller), then each of `figures` (Plotly data and layout) drawn
    into the element of the same id, in order."""
    # Imported here: the finder module imports plotly, which no other caller of the report
    # modules needs.
    from common.staticfinders import plotly_js

    # FIGURES.<name> in the script: names are ours, and identifiers.
    assert all(name.isidentifier() for name in figures), list(figures)
    draw = "\n".join(
        f'Plotly.newPlot("{name}", FIGURES.{name}.data, FIGURES.{name}.layout, '
        "{displayModeBar: false});"
        for name in figures
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
{STYLE}
</style>
<script>{plotly_js().read_text(encoding="utf-8")}</script>
</head><body>
<h1>{html.escape(title)}</h1>
{body}
<script>
const FIGURES = {script_json(figures)};
{draw}
</script>
</body></html>
"""
