"""The live-events module keeps one pooled Redis client: sequence numbers and snapshots do
not build a client (and open a TCP connection) per event."""

from __future__ import annotations

import pytest
import redis

from registry import servers
from repository_app import events


@pytest.mark.usefixtures("redis_db")
def test_sequence_numbers_reuse_one_client(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[str] = []
    from_url = redis.Redis.from_url

    def counting(url: str, **kwargs: object) -> redis.Redis:
        built.append(url)
        return from_url(url, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(events, "_clients", {}, raising=False)
    monkeypatch.setattr(redis.Redis, "from_url", counting)
    first = events.next_seq("pool-test")
    for _ in range(20):
        events.next_seq("pool-test")
        events.current_seq("pool-test")
    assert events.current_seq("pool-test") == first + 20
    assert len(built) == 1


class _OneModelTriton:
    """Enough of TritonClient for one poller tick: an index, no statistics or metrics."""

    def __init__(self, state: str) -> None:
        self.state = state

    def repository_index(self) -> list:
        from triton_api.client import ModelState

        return [ModelState("busy_compute", "1", self.state, "")]


@pytest.mark.usefixtures("redis_db")
def test_the_saved_snapshot_is_never_older_than_an_event_already_sent(monkeypatch):
    """A page that saw READY and connects again must not get the LOADING before it."""
    from fleet import poller as poller_module

    triton = _OneModelTriton("LOADING")
    monkeypatch.setattr(poller_module, "get_client", lambda *_: triton)
    saved_when_sent: list[str | None] = []

    def send(group: str, event: dict) -> None:
        snapshot = events.load_snapshot("default")
        saved_when_sent.append(snapshot["models"]["busy_compute"]["state"] if snapshot else None)

    monkeypatch.setattr(events, "_send", send)
    poller = poller_module.Poller(servers.default(), slow_every=1000)
    poller.ticks = 1  # statistics and metrics are not part of this
    poller.tick()
    triton.state = "READY"
    poller.tick()
    assert saved_when_sent == ["LOADING", "READY"]
