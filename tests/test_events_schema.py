"""One event envelope: every type's fields are declared once (events.EVENT_FIELDS) and
publish refuses what is not declared, so producers cannot drift apart."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from repository_app import events

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
