"""The load agents' messages are signed (issue "Redis"): whoever reaches Redis without the
SECRET_KEY cannot pose as a load agent or as its coordinator. A message signed for this
key, session, agent and place is taken; an unsigned one, one signed with another key, a
tampered one, one from another sweep's session or agent, and a replayed one are dropped,
logged once per key, and their samples never reach what `collect` returns.

Over the real Redis of the test run (no Triton, no Celery), as tests/test_distributed_load.py.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
from collections.abc import Callable, Iterator
from typing import cast

import numpy as np
import pytest
from django.conf import settings
from django.test import override_settings

from profiler_app.engine import agent_link, load_messages, load_session, remote
from profiler_app.params import SweepError

GENUINE, FORGED = 7, 999_999  # the genuine agent's latencies, and the forger's


def _records(latency: int) -> tuple:
    """A "records" message of one load worker's reply (`Recorder.swap`'s shape)."""
    lats = np.full(3, latency, dtype=np.int64)
    ends = np.arange(3, dtype=np.int64)
    return ("records", [("records", ends, lats, 0, [], 0.01, 3, None)])


def _latencies(collected: list[tuple]) -> list[int]:
    return [int(x) for message in collected for reply in message[1] for x in reply[2]]


def _hosts(job: int, hosts: int = 2) -> remote.RemoteHosts:
    session = remote.RemoteHosts(
        settings.REDIS_URL, job, hosts, name="coordinator", queue="q", join_timeout_s=3
    )
    session.open()
    return session


def _seat(session: remote.RemoteHosts, host: str = "agent-host") -> agent_link.AgentLink:
    link = agent_link.AgentLink.take_seat(settings.REDIS_URL, session.keys.job, session.hosts)
    assert link is not None and link.join(host, 1234, f"task-{host}")
    return link


@pytest.fixture()
def session() -> Iterator[remote.RemoteHosts]:
    """A coordinator's session of 2 load hosts in the test Redis, closed afterwards."""
    hosts = _hosts(990_101)
    yield hosts
    hosts.close()


@pytest.fixture()
def agent(session: remote.RemoteHosts) -> Iterator[agent_link.AgentLink]:
    """The genuine agent of `session`, joined."""
    link = _seat(session)
    assert asyncio.run(session.join())
    yield link
    link.leave()


def _warnings(caplog: pytest.LogCaptureFixture, key: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING
        and r.name in (remote.__name__, agent_link.__name__)
        and key in r.getMessage()
    ]


# --- the pair of functions ----------------------------------------------------------------------


def test_a_signed_message_comes_back_only_for_its_key_session_and_place() -> None:
    scope = load_messages.numbered("loadgen:1:abc:reply:1", 0)
    message = ("records", (np.arange(3, dtype=np.int64), 2, "boom"))
    signed = load_messages.sign(message, scope)
    back = load_messages.verify(signed, scope)
    assert back[0] == "records" and back[1][0].tolist() == [0, 1, 2] and back[1][1:] == (2, "boom")

    tampered = signed[:-1] + bytes([signed[-1] ^ 1])
    with override_settings(SECRET_KEY="someone-else"):
        other_key = load_messages.sign(message, scope)
    refused = {
        "unsigned": load_messages.encode(message),
        "empty": b"",
        "tampered": tampered,
        "another key": other_key,
        "another session": load_messages.sign(
            message, load_messages.numbered("loadgen:1:abd:reply:1", 0)
        ),
        "another sweep": load_messages.sign(
            message, load_messages.numbered("loadgen:2:abc:reply:1", 0)
        ),
        "another agent": load_messages.sign(
            message, load_messages.numbered("loadgen:1:abc:reply:2", 0)
        ),
        "another direction": load_messages.sign(
            message, load_messages.numbered("loadgen:1:abc:cmd:1", 0)
        ),
        "another place": load_messages.sign(
            message, load_messages.numbered("loadgen:1:abc:reply:1", 1)
        ),
    }
    for name, raw in refused.items():
        with pytest.raises(load_messages.Forged):
            load_messages.verify(raw, scope)
            pytest.fail(f"{name} was taken")


def test_the_key_is_derived_from_the_secret_key_not_the_secret_itself() -> None:
    scope, body = "loadgen:1:abc:joins", load_messages.encode((1, "h", 1, "t"))
    mac = load_messages.sign((1, "h", 1, "t"), scope)[: hashlib.sha256().digest_size]
    direct = hmac.new(settings.SECRET_KEY.encode(), scope.encode() + b"\0" + body, "sha256")
    assert mac != direct.digest()
    derived = hmac.new(settings.SECRET_KEY.encode(), b"dashboard.load-agent.v1", "sha256")
    assert mac == hmac.new(derived.digest(), scope.encode() + b"\0" + body, "sha256").digest()


# --- the coordinator drops forged replies -------------------------------------------------------


def _popped(link: agent_link.AgentLink, message: tuple) -> bytes:
    """What `link` pushes for `message`, taken back off its reply list."""
    assert link.reply(message)
    return cast("bytes", link.redis.rpop(link.keys.replies(link.index)))


def _impostor(session: remote.RemoteHosts, index: int = 1) -> agent_link.AgentLink:
    """An agent object on `session`'s keys that never took a seat (the forger's)."""
    return agent_link.AgentLink(load_session.connect(settings.REDIS_URL), session.keys, index)


def _unsigned(session: remote.RemoteHosts) -> bytes:
    return load_messages.encode(_records(FORGED))


def _another_key(session: remote.RemoteHosts) -> bytes:
    with override_settings(SECRET_KEY="someone-else"):
        return _popped(_impostor(session), _records(FORGED))


def _tampered(session: remote.RemoteHosts) -> bytes:
    raw = _popped(_impostor(session), _records(GENUINE + 1))
    old, new = (GENUINE + 1).to_bytes(8, "little"), FORGED.to_bytes(8, "little")
    assert raw.count(old) == 3
    return raw.replace(old, new)


def _another_agent(session: remote.RemoteHosts) -> bytes:
    return _popped(_impostor(session, index=2), _records(FORGED))


def _another_sweep(session: remote.RemoteHosts) -> bytes:
    other = _hosts(990_102)
    try:
        link = _seat(other)
        raw = _popped(link, _records(FORGED))
        link.leave()
        return raw
    finally:
        other.close()


@pytest.mark.parametrize(
    "forge", [_unsigned, _another_key, _tampered, _another_agent, _another_sweep]
)
def test_the_coordinator_drops_a_forged_reply_and_keeps_none_of_its_samples(
    session: remote.RemoteHosts,
    agent: agent_link.AgentLink,
    caplog: pytest.LogCaptureFixture,
    forge: Callable[[remote.RemoteHosts], bytes],
) -> None:
    replies = session.keys.replies(1)
    forged = forge(session)
    session.redis.rpush(replies, forged, forged)  # ahead of the genuine reply
    assert agent.reply(_records(GENUINE))

    with caplog.at_level(logging.WARNING, logger=remote.__name__):
        collected = asyncio.run(session.collect("records", 10))

    assert _latencies(collected) == [GENUINE] * 3
    assert session.redis.llen(replies) == 0
    (warning,) = _warnings(caplog, replies)  # once for the two
    assert "the load agent on agent-host" in warning and "signature" in warning


def test_a_genuine_reply_replayed_later_in_its_session_is_dropped(
    session: remote.RemoteHosts, agent: agent_link.AgentLink, caplog: pytest.LogCaptureFixture
) -> None:
    replies = session.keys.replies(1)
    assert agent.reply(_records(FORGED))
    seen = cast("bytes", session.redis.lindex(replies, 0))  # what a watcher of Redis saw
    assert _latencies(asyncio.run(session.collect("records", 10))) == [FORGED] * 3

    session.redis.rpush(replies, seen)  # the same window once more
    assert agent.reply(_records(GENUINE))
    with caplog.at_level(logging.WARNING, logger=remote.__name__):
        assert _latencies(asyncio.run(session.collect("records", 10))) == [GENUINE] * 3
    assert len(_warnings(caplog, replies)) == 1


def test_forged_and_replayed_joins_take_no_seat(caplog: pytest.LogCaptureFixture) -> None:
    session = _hosts(990_103, hosts=3)
    try:
        first = _seat(session, "first")
        joins = session.keys.joins
        replayed = cast("bytes", session.redis.lindex(joins, 0))
        session.redis.rpush(joins, load_messages.encode((2, "forger", 1, "t")), replayed)
        second = _seat(session, "second")
        with caplog.at_level(logging.WARNING, logger=remote.__name__):
            assert asyncio.run(session.join())
        assert session.agents == [
            remote.Agent(1, "first", "task-first"),
            remote.Agent(2, "second", "task-second"),
        ]
        assert len(_warnings(caplog, joins)) == 1
        first.leave()
        second.leave()
    finally:
        session.close()


def test_an_agent_with_another_secret_key_is_refused_and_the_failure_says_so() -> None:
    session = _hosts(990_104)
    try:
        with override_settings(SECRET_KEY="another-deployment"):
            link = _seat(session, "misconfigured")
        with pytest.raises(SweepError) as failed:
            asyncio.run(session.join())
        assert session.agents == []
        assert str(failed.value).startswith("only 0 of the 1 load agents joined within 3 s")
        assert str(failed.value).endswith(
            "; 1 join(s) refused for a wrong signature: every worker needs the same "
            "DJANGO_SECRET_KEY"
        )
        link.leave()
    finally:
        session.close()


# --- the agent drops forged commands ------------------------------------------------------------


def test_the_agent_drops_commands_its_coordinator_did_not_sign_for_it(
    session: remote.RemoteHosts, agent: agent_link.AgentLink, caplog: pytest.LogCaptureFixture
) -> None:
    commands = session.keys.commands(1)
    session.redis.rpush(commands, load_messages.encode(("stop",)))  # unsigned, ahead of the genuine
    asyncio.run(session.send([("swap", 123)]))  # command 0
    with caplog.at_level(logging.WARNING, logger=agent_link.__name__):
        assert [agent.next_command(timeout=1) for _ in range(2)] == [None, ("swap", 123)]

    with override_settings(SECRET_KEY="someone-else"):
        another_key = load_messages.sign(("stop",), load_messages.numbered(commands, 1))
    forged = [
        another_key,
        load_messages.sign(("stop",), load_messages.numbered(commands, 0)),  # a replay of command 0
        load_messages.sign(("stop",), load_messages.numbered(commands, 2)),  # out of place
        load_messages.sign(
            ("stop",), load_messages.numbered(session.keys.commands(2), 1)
        ),  # another agent
    ]
    session.redis.rpush(commands, *forged)
    asyncio.run(session.send([("swap", 456)]))  # command 1
    with caplog.at_level(logging.WARNING, logger=agent_link.__name__):
        got = [agent.next_command(timeout=1) for _ in range(len(forged) + 1)]

    assert got == [None] * len(forged) + [("swap", 456)]
    assert len(_warnings(caplog, commands)) == 1
