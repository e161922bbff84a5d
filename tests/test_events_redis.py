"""The live-events module keeps one pooled Redis client: sequence numbers and snapshots do
not build a client (and open a TCP connection) per event."""

from __future__ import annotations

import pytest
import redis

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
