"""One event envelope: every type's fields are declared once (events.EVENT_FIELDS) and
publish refuses what is not declared, so producers cannot drift apart. A measured level's
payload (the `sweep.level` and `sweep.window` points) and its OpenAPI schema come from one
definition (`measure.Level`, its sub-records), so they cannot drift either."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from django.urls import path
from drf_spectacular.generators import SchemaGenerator

from profiler_app import measure, sweep_recorder
from profiler_app.api import SweepPointsView
from profiler_app.level_figures import GoodputFigures, GpuFigures, StreamFigures, TraceFigures
from profiler_app.models import Sweep
from profiler_app.params import SweepParams
from repository_app import events
from tests.test_measure_shape import full_level

ROOT = Path(__file__).resolve().parents[1]


def test_publish_refuses_an_undeclared_type_or_a_missing_field(redis_db):
    with pytest.raises(events.UndeclaredEvent, match="not declared"):
        events.publish("sweep.1", "sweep.progress", {"sweep": 1})
    with pytest.raises(events.UndeclaredEvent, match="search.result event without state"):
        events.publish("sweep.1", "search.result", {"search": 1, "result": {}})
    sent = events.publish("sweep.1", "search.result", {"search": 1, "result": {}, "state": "x"})
    assert sent is not None and set(sent) == {"type", "group", "seq", "search", "result", "state"}


def test_every_type_a_page_handles_and_every_type_the_code_sends_is_declared():
    handled: set[str] = set()
    for script in (ROOT / "static" / "js").glob("*.js"):
        handled |= set(
            re.findall(
                r'"([a-z]+\.[a-z.]+|presence|activity|notify)":\s*function', script.read_text()
            )
        )
    sent: set[str] = set()
    for module in ROOT.glob("*_app/**/*.py"):
        text = module.read_text()
        sent |= set(re.findall(r'publish\)?\(\s*[^,()]+(?:\([^()]*\))?,\s*"([a-z.]+)"', text))
        sent |= set(re.findall(r'self\.publish\(\s*"([a-z.]+)"', text))
    declared = set(events.EVENT_FIELDS)
    snapshots = {"sweep.snapshot", "search.snapshot", "models.snapshot", "rollout.snapshot"}
    assert sent and handled
    assert sent <= declared, sent - declared
    assert handled - snapshots <= declared, handled - snapshots - declared


@pytest.mark.django_db
def test_the_level_and_window_events_send_what_the_api_schema_describes(monkeypatch):
    generator = SchemaGenerator(patterns=[path("points/", SweepPointsView.as_view())])
    schemas = generator.get_schema(request=None, public=True)["components"]["schemas"]
    point, extra = schemas["SweepPoint"]["properties"], schemas["LevelExtra"]["properties"]
    # The schema's typed entries are the sub-records' fields, no more, no less.
    typed = {*GpuFigures.names(), *StreamFigures.names(), *measure.SEQUENCE_FIELDS,
             *GoodputFigures.names(), *TraceFigures.names(), "steps", measure.INTERVAL}  # fmt: skip
    assert set(extra) == typed
    sent: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(events, "publish", lambda g, kind, data: sent.append((kind, data)))
    sweep = Sweep.objects.create(model="m", server="x", params={"model": "m"})
    recorder = sweep_recorder.Recorder(sweep, SweepParams(model="m"))
    level = full_level()
    window = measure.Window(**{f: getattr(level, f) for f in ("level", "extra", "gpu", "stream")})
    recorder.level(SimpleNamespace(level=2.0, cancelled=False, measured=lambda: level))
    recorder.window(
        SimpleNamespace(level=2.0, errors=0, error_messages=[], measured=lambda: window)
    )
    recorder.close()
    (_, on_level), (_, on_window) = sent
    assert [kind for kind, _ in sent] == ["sweep.level", "sweep.window"]
    assert set(on_level["point"]) == set(point)
    assert set(on_window["point"]) == {*point, "closed_at"}  # closed_at: the event's only
    sent_level = on_level["point"]["extra"]
    assert set(sent_level) - typed == {"windows", "client_cpu_us", "cancelled"}  # free-form
    assert set(sent_level) & typed == typed  # a level with every record sends all of them
    assert list(sent_level["steps"][0]) == list(schemas["LevelStep"]["properties"])
    assert set(sent_level[measure.INTERVAL]) == set(schemas["LevelInterval"]["properties"])
    sent_window = on_window["point"]["extra"]
    assert set(sent_window) & typed == {*GpuFigures.names(), *StreamFigures.names()}
    assert measure.Level.from_json(on_level["point"]) == level
