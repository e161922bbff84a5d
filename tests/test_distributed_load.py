"""Load from several hosts, without services: the exact merge of the hosts' windows on
synthetic samples against a direct computation, stability on the merged windows, the
clocks, the messages, the split of a level, and the `load_hosts` parameter."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import msgpack
import numpy as np
import pytest
import redis
from django.conf import settings

from profiler_app import repeats
from profiler_app.engine import agent, agent_link, load_messages, load_session, remote, stats
from profiler_app.engine.merging import build_window, merge_level
from profiler_app.engine.sequences import SequenceSpec
from profiler_app.engine.worker_pool import host_plan
from profiler_app.engine.worker_records import Recorder
from profiler_app.kind_rules import refusals
from profiler_app.model_kind import SEQUENCE, STATELESS, ModelKind
from profiler_app.params import ParamsError, SweepError, SweepParams, from_flags

BATCH = 2
PERCENTILES = (50, 90, 95, 99)


def _reply(
    lats: np.ndarray, errors: int = 0, cpu_s: float = 0.01, sent: int | None = None
) -> tuple:
    """A load worker's swap reply (`Recorder.swap`'s shape) for these latencies (ns)."""
    lats = np.asarray(lats, dtype=np.int64)
    ends = np.arange(lats.size, dtype=np.int64)
    messages = [f"boom {i}" for i in range(min(errors, 2))]
    return ("records", ends, lats, errors, messages, cpu_s, sent or lats.size + errors, None)


def _over_redis(replies: list[tuple]) -> list[tuple]:
    """What the coordinator reads back from an agent: its "records" message, decoded."""
    return list(load_messages.decode(load_messages.encode(("records", replies)))[1])


def _direct(samples_ns: np.ndarray) -> dict[str, float]:
    """perf_analyzer's summary computed here, independently: the integer mean, and pN the
    element at int(N/100 x (n-1) + 0.5) of the sorted samples."""
    ordered = np.sort(samples_ns)
    n = ordered.size
    direct = {"avg": float(int(ordered.sum()) // n) / 1000}
    for p in PERCENTILES:
        direct[f"p{p}"] = float(ordered[int(p / 100 * (n - 1) + 0.5)]) / 1000
    return direct


def _summary(latency: stats.LatencySummary) -> dict[str, float]:
    return {"avg": latency.avg_us, **{f"p{p}": latency.value(p) for p in PERCENTILES}}


def _host_windows(rng: np.random.Generator, windows: int) -> list[list[tuple]]:
    """Per window, three hosts' replies: different latency distributions, counts, errors."""
    out = []
    for _ in range(windows):
        local = [
            _reply(rng.lognormal(13.5, 0.4, rng.integers(300, 400)).astype(np.int64), errors=1),
            _reply(rng.lognormal(13.6, 0.3, rng.integers(250, 350)).astype(np.int64)),
        ]
        near = [_reply(rng.normal(2e6, 1e5, rng.integers(400, 500)).astype(np.int64), errors=2)]
        far = [_reply((5e6 + rng.exponential(3e6, rng.integers(50, 90))).astype(np.int64))]
        out.append([*local, *_over_redis(near), *_over_redis(far)])
    return out


def test_the_hosts_windows_merge_into_the_pooled_samples_exactly() -> None:
    rng = np.random.default_rng(7)
    params = SweepParams(model="m", start=4, end=4, batch_size=BATCH, max_windows=4)
    duration_ns = 300_000_000
    per_window = _host_windows(rng, 4)
    windows = [
        build_window(4, i, i * duration_ns, (i + 1) * duration_ns, replies, BATCH)
        for i, replies in enumerate(per_window)
    ]
    for window, replies in zip(windows, per_window, strict=True):
        pooled = np.concatenate([r[2] for r in replies])
        assert window.requests == pooled.size and window.inferences == pooled.size * BATCH
        assert window.throughput == pooled.size * BATCH / 0.3  # summed over the same window
        assert window.errors == sum(r[3] for r in replies) == 3
        assert window.send_rate == sum(r[6] for r in replies) / 0.3
        assert window.client_cpu_us == pytest.approx(0.04 / pooled.size * 1e6)
        assert window.latency is not None and _summary(window.latency) == _direct(pooled)
        # Not an average of the hosts' own percentiles (which would be far off here).
        own = [_direct(r[2])["p95"] for r in replies]
        assert window.latency.p95_us != pytest.approx(sum(own) / len(own), rel=0.05)

    level = merge_level(4, windows, params, cancelled=False)
    last = per_window[-stats.STABILITY_WINDOWS :]
    pooled = np.concatenate([r[2] for replies in last for r in replies])
    assert level.latency is not None and _summary(level.latency) == _direct(pooled)
    assert level.latency.count == pooled.size
    assert level.throughput == pytest.approx(pooled.size * BATCH / 0.9, rel=1e-12)
    assert level.errors == 3 * 4  # every window's errors, as perf_analyzer counts them


def test_a_level_names_each_host_with_its_share_of_the_pooled_requests() -> None:
    rng = np.random.default_rng(3)
    params = SweepParams(model="m", start=2, end=2, max_windows=4)
    windows = []
    for i, replies in enumerate(_host_windows(rng, 4)):
        window = build_window(2, i, i, i + 10**8, replies, 1)
        window.hosts = [
            remote.host_requests("coordinator", replies[:2]),
            remote.host_requests("near", replies[2:3]),
            remote.host_requests("far", replies[3:]),
        ]
        assert sum(h["requests"] for h in window.hosts) == window.requests
        windows.append(window)
    level = merge_level(2, windows, params, cancelled=False)
    extra = level.measured().extra
    assert [h["host"] for h in extra["load_hosts"]] == ["coordinator", "near", "far"]
    assert level.latency is not None
    assert sum(h["requests"] for h in extra["load_hosts"]) == level.latency.count
    assert level.measured().requests == level.latency.count
    assert windows[0].measured().extra["load_hosts"] == windows[0].hosts
    assert (
        "load_hosts" not in build_window(2, 0, 0, 10**8, [_reply(np.ones(3))], 1).measured().extra
    )


def test_rounds_add_up_each_hosts_share_as_they_add_up_the_requests() -> None:
    rounds = [
        repeats.round_record(
            r,
            {
                "throughput": 10.0,
                "requests": 30,
                "extra": {
                    "load_hosts": [
                        {"host": "a", "requests": 20, "errors": 0},
                        {"host": f"b{r}", "requests": 10, "errors": 1},
                    ]
                },
            },
        )  # fmt: skip
        for r in (1, 2)
    ]
    merged = repeats.merge_rounds(rounds, "p95_us", {"load_hosts": [{"host": "stale"}]})
    assert merged["requests"] == 60
    assert merged["extra"]["load_hosts"] == [
        {"host": "a", "requests": 40, "errors": 0},
        {"host": "b1", "requests": 10, "errors": 1},
        {"host": "b2", "requests": 10, "errors": 1},
    ]


def _stable(windows: list[Any], percentile: int = 95, pct: float = 10.0) -> bool:
    return stats.is_stable(
        [w.throughput for w in windows], [w.chosen_latency_us(percentile) for w in windows], pct
    )


def _windows(per_window: list[list[tuple]]) -> list[Any]:
    return [build_window(1, i, 0, 10**9, replies, 1) for i, replies in enumerate(per_window)]


def test_each_host_alone_settles_but_the_merged_windows_do_not() -> None:
    # A near host (about 1 ms) and a far one (about 10 ms), each steady within 10%: the share
    # of far requests moves the pooled p95 across the two, so the level is not stable.
    rng = np.random.default_rng(11)
    near_counts, far_counts = (1000, 1090, 1000), (60, 55, 60)
    near = [[_reply(rng.normal(1e6, 2e3, n).astype(np.int64))] for n in near_counts]
    far = [[_reply(rng.normal(1e7, 2e4, n).astype(np.int64))] for n in far_counts]
    assert _stable(_windows(near)) and _stable(_windows(far))
    merged = _windows([a + _over_redis(b) for a, b in zip(near, far, strict=True)])
    assert not _stable(merged)
    p95 = [w.latency.p95_us for w in merged]
    assert p95[0] > 9000 and p95[1] < 1100 and p95[2] > 9000
    assert stats.spread([w.throughput for w in merged]) <= 0.10  # throughput alone settles


def test_each_host_alone_swings_but_the_merged_windows_settle() -> None:
    # The load moves between two hosts from window to window; the server sees the same.
    rng = np.random.default_rng(5)
    a_counts, b_counts = (1000, 500, 1000), (500, 1000, 500)
    a = [[_reply(rng.normal(2e6, 5e4, n).astype(np.int64))] for n in a_counts]
    b = [[_reply(rng.normal(2e6, 5e4, n).astype(np.int64))] for n in b_counts]
    assert not _stable(_windows(a)) and not _stable(_windows(b))
    assert _stable(_windows([x + _over_redis(y) for x, y in zip(a, b, strict=True)]))


def test_a_wall_clock_boundary_becomes_each_hosts_own_monotonic_time() -> None:
    wall = 1_700_000_000_000_000_000
    coordinator_mono, agent_mono = 5_000_000_000, 987_654_321_000  # booted at other times
    cut = coordinator_mono - 250_000_000  # the coordinator's boundary, 250 ms ago
    boundary = load_session.to_wall(cut, now_wall_ns=wall, now_mono_ns=coordinator_mono)
    assert boundary == wall - 250_000_000
    # The agent reads it 3 ms later by the same wall clock: the same instant on its clock.
    later = 3_000_000
    mine = load_session.to_monotonic(
        boundary, now_wall_ns=wall + later, now_mono_ns=agent_mono + later
    )
    assert mine == agent_mono - 250_000_000
    # Cut there, the agent keeps what completed after the boundary for the next window.
    rec = Recorder()
    rec.records = [(mine - 2, 100), (mine, 200), (mine + 1, 300), (mine + 5, -1)]
    first = rec.swap(mine)
    assert first[2].tolist() == [100, 200] and first[3] == 0
    assert rec.swap(mine + 10)[2].tolist() == [300]
    assert load_session.to_monotonic(load_session.to_wall(12345)) == pytest.approx(
        12345, abs=1_000_000
    )


def test_messages_carry_arrays_of_the_allowed_kinds_and_nothing_else() -> None:
    stream = {"first_ns": np.arange(3, dtype=np.int64), "empty_finals": 2}
    positions = {"positions": np.array([0, 1, 2], np.int8), "completed": 1, "failed": 0}
    message = ("records", (("records", np.arange(4), np.array([5, 6]), 0, ["x"], 0.5, 2,
                            stream, positions),))  # fmt: skip
    back = load_messages.decode(load_messages.encode(message))
    reply = back[1][0]
    assert reply[2].dtype == np.int64 and reply[2].tolist() == [5, 6]
    assert reply[7]["first_ns"].tolist() == [0, 1, 2] and reply[7]["empty_finals"] == 2
    assert reply[8]["positions"].dtype == np.int8 and reply[4] == ("x",)
    big_endian = np.array([1, 2], dtype=">i8")
    assert load_messages.decode(load_messages.encode(big_endian)).tolist() == [1, 2]
    for refused in (np.array(["a"], dtype=object), np.zeros((2, 2), np.int64), object()):
        with pytest.raises(TypeError):
            load_messages.encode(refused)
    forged = msgpack.packb(msgpack.ExtType(1, b"O8" + b"\0" * 8))
    with pytest.raises(ValueError):
        load_messages.decode(forged)
    with pytest.raises(ValueError):
        load_messages.decode(msgpack.packb(msgpack.ExtType(7, b"i8")))


def test_a_level_is_split_across_the_hosts_first_then_their_workers() -> None:
    assert remote.host_shares("concurrency", 7, [1, 1, 1]) == [3.0, 2.0, 2.0]
    assert remote.host_shares("request_rate", 300, [2, 1]) == [200.0, 100.0]
    params = SweepParams(model="m", start=1, end=8, max_threads=4)
    # Each host plans its worker processes on its share (concurrency up to 4: 4 threads).
    plans = [host_plan(params, None, h, 2) for h in range(2)]
    assert [(client, len(threads)) for client, threads in plans] == [("threads", 4)] * 2
    rate = SweepParams(model="m", mode="request_rate", start=10, end=100, step=10, max_threads=6)
    threads = [sum(host_plan(rate, None, h, 4)[1]) for h in range(4)]
    assert threads == [2, 2, 1, 1]
    sequences = SweepParams(
        model="m", mode="request_rate", start=10, end=10, max_threads=8, num_of_sequences=3
    )
    assert [sum(host_plan(sequences, SequenceSpec(5, 0), h, 3)[1]) for h in range(3)] == [1, 1, 1]
    seeds = {remote.host_seed(3, h) * 1000 + i for h in range(16) for i in range(64)}
    assert len(seeds) == 16 * 64  # no two workers of any host draw the same arrivals


class _FakeRemote(remote.RemoteHosts):
    """The agents' side answered in memory: each agent's replies, per swap."""

    def __init__(self, replies: dict[int, list[tuple]]) -> None:
        self.agents = [remote.Agent(i, f"agent-{i}") for i in sorted(replies)]
        self.wanted, self.name = len(self.agents), "coordinator"
        self.replies = replies
        self.sent: list[Any] = []

    async def send(self, messages: Any) -> None:
        self.sent.append(list(messages))

    async def collect(self, kind: str, timeout: float) -> list[tuple]:
        return [
            load_messages.decode(load_messages.encode((kind, self.replies[a.index])))
            for a in self.agents
        ]


class _FakeLocal:
    sequences = False

    def __init__(self, replies: list[tuple]) -> None:
        self.replies = replies
        self.levels: list[tuple] = []
        self.cut: int | None = None

    def set_level(self, *args: Any) -> None:
        self.levels.append(args)

    async def assign_sequences(self, *args: Any) -> None:
        raise AssertionError("no sequences here")

    async def swap(self, t_end: int) -> list[tuple]:
        self.cut = t_end
        return self.replies

    def stop(self) -> None:
        pass


def test_the_composite_pool_sends_wall_clock_cuts_and_pools_every_hosts_replies() -> None:
    local = _FakeLocal([_reply(np.full(5, 10)), _reply(np.full(3, 20), errors=1)])
    agents = _FakeRemote({1: [_reply(np.full(4, 30))], 2: [_reply(np.full(2, 40), errors=2)]})
    pool = remote.CompositePool(local, agents, [2, 1, 1])

    async def run() -> list[tuple]:
        await pool.set_level("request_rate", 400.0, "constant", 9)
        return await pool.swap(123_000_000)

    replies = asyncio.run(run())
    level = agents.sent[0]
    assert [m[2] for m in level] == [100.0, 100.0] and local.levels[0][1] == 200.0
    assert [m[4] for m in level] == [remote.host_seed(9, 1), remote.host_seed(9, 2)]
    assert [m[6] for m in level] == [2_500_000, 5_000_000]  # h gaps of 1/400 s
    assert level[0][5] == level[1][5]  # one start time for every host
    boundary = agents.sent[1][0][1]
    assert agents.sent[1] == [("swap", boundary)] * 2 and local.cut == 123_000_000
    assert math.isclose(load_session.to_monotonic(boundary), 123_000_000, abs_tol=5e6)
    assert (
        sorted(np.concatenate([r[2] for r in replies]).tolist())
        == [10] * 5 + [20] * 3 + [30] * 4 + [40] * 2
    )
    assert set(pool.last_cost) == {"load_local_ms", "load_collect_ms"}
    assert pool.last_hosts == [
        {"host": "coordinator", "requests": 8, "errors": 1},
        {"host": "agent-1", "requests": 4, "errors": 0},
        {"host": "agent-2", "requests": 2, "errors": 2},
    ]


# --- the parameter ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"load_hosts": "0"}, "Load hosts must be between 1 and 16"),
        ({"load_hosts": 17}, "Load hosts must be between 1 and 16"),
        ({"load_hosts": "two"}, "Load hosts must be a whole number."),
        ({"load_hosts": 3, "concurrency_range": "1:2:1"}, "Load hosts (3) must be at most the"),
        (
            {"load_hosts": 4, "request_rate_range": "10:20:10", "max_threads": 2},
            "Load hosts (4) must be at most --max-threads (2)",
        ),
    ],
)
def test_load_hosts_out_of_bounds_is_refused_on_its_field(flags: dict, message: str) -> None:
    with pytest.raises(ParamsError) as refused:
        from_flags({"model": "m", "concurrency_range": "1:8:1", **flags})
    assert list(refused.value.errors) == ["load_hosts"]
    assert refused.value.errors["load_hosts"].startswith(message)
    named = refused.value.named({"load_hosts": "--load-hosts"})["load_hosts"]
    assert named.startswith("--load-hosts")


def test_load_hosts_round_trips_and_defaults_to_one() -> None:
    assert from_flags({"model": "m"}).load_hosts == 1
    given = from_flags({"model": "m", "concurrency_range": "2:8:2", "load_hosts": "4"})
    assert given.load_hosts == 4 and from_flags(given.flags()) == given


def test_load_hosts_are_the_built_in_engines_and_need_a_sequence_each() -> None:
    plain = ModelKind("m", STATELESS)
    params = SweepParams(model="m", start=1, end=4, load_hosts=2)
    assert "built-in engine" in refusals(params, plain, "perf_analyzer")["load_hosts"]
    assert "load_hosts" not in refusals(params, plain, "builtin")
    sequence = ModelKind("m", SEQUENCE, strategy="direct")
    rate = SweepParams(
        model="m", mode="request_rate", start=5, end=5, max_threads=4, load_hosts=3,
        num_of_sequences=2,
    )  # fmt: skip
    assert "--num-of-sequences (2)" in refusals(rate, sequence, "builtin")["load_hosts"]


# --- the faults, over the real Redis (no Triton, no Celery) ------------------------------------


@pytest.fixture()
def session() -> Any:
    """A coordinator's session of 2 load hosts in the test Redis, closed afterwards."""
    hosts = remote.RemoteHosts(
        settings.REDIS_URL, 990_001, 2, name="coordinator", queue="q", join_timeout_s=3
    )
    hosts.open()
    yield hosts
    hosts.close()


def _agent(session: remote.RemoteHosts) -> agent_link.AgentLink:
    link = agent_link.AgentLink.take_seat(settings.REDIS_URL, session.keys.job, session.hosts)
    assert link is not None and link.join("agent-host", 1234, "task-1")
    asyncio.run(session.join())
    return link


def _keys(job: int) -> list[bytes]:
    return list(redis.Redis.from_url(settings.REDIS_URL).scan_iter(f"loadgen:{job}:*"))


def test_an_agent_answers_a_window_then_stops_when_told_and_no_key_is_left(session: Any) -> None:
    link = _agent(session)
    assert session.agents == [remote.Agent(1, "agent-host", "task-1")]
    assert agent_link.AgentLink.take_seat(settings.REDIS_URL, session.keys.job, 2) is None  # full

    async def run() -> str:
        served = asyncio.create_task(
            agent._commands(_FakeLocal([_reply(np.full(2, 7))]), link, lambda: False)
        )
        await session.send([("swap", time.time_ns())])
        records = await session.collect("records", 10)
        assert records[0][1][0][2].tolist() == [7, 7]
        closing = asyncio.create_task(asyncio.to_thread(session.close))  # sends "stop"
        ended = await served
        link.reply(("stopped",))  # as `agent.serve` does once its workers are gone
        await closing
        return ended

    assert asyncio.run(run()) == "stopped"
    link.leave()
    assert _keys(session.keys.job) == []
    assert agent_link.AgentLink.take_seat(settings.REDIS_URL, session.keys.job, 2) is None  # ended


def test_an_agent_leaves_when_its_coordinator_is_gone_or_its_job_no_longer_runs(
    session: Any,
) -> None:
    link = _agent(session)
    pool = _FakeLocal([])
    assert asyncio.run(agent._commands(pool, link, lambda: True)) == "the sweep no longer runs"
    session._beat.stop()  # the coordinator's process died: its key expires
    session.redis.delete(session.keys.alive)
    assert (
        asyncio.run(agent._commands(pool, link, lambda: False)) == "the sweep's coordinator is gone"
    )
    assert not link.reply(("records", ()))  # nothing written once the coordinator is gone
    link.leave()


def test_an_agent_that_stops_answering_fails_the_sweep_naming_its_host(session: Any) -> None:
    link = _agent(session)
    link.leave()  # its heartbeat ends (its process died)
    started = time.monotonic()
    with pytest.raises(SweepError, match="the load agent on agent-host stopped answering"):
        asyncio.run(session.collect("records", remote.REPLY_TIMEOUT_S))
    assert time.monotonic() - started < remote.REPLY_TIMEOUT_S  # its key says so at once


def test_an_agents_error_fails_the_sweep_naming_its_host(session: Any) -> None:
    link = _agent(session)
    link.reply(("error", "a load worker exited unexpectedly"))
    with pytest.raises(SweepError, match="load agent on agent-host: a load worker exited"):
        asyncio.run(session.collect("records", 10))
    link.leave()


def test_too_few_agents_fail_the_join_naming_how_many_and_the_queue() -> None:
    hosts = remote.RemoteHosts(
        settings.REDIS_URL, 990_002, 3, name="coordinator", queue="gpu-7", join_timeout_s=1
    )
    hosts.open()
    try:
        link = agent_link.AgentLink.take_seat(settings.REDIS_URL, 990_002, 3)
        assert link is not None and link.join("only-one", 1, "t")
        with pytest.raises(SweepError) as failed:
            asyncio.run(hosts.join())
        assert str(failed.value) == (
            "only 1 of the 2 load agents joined within 1 s (2 of 3 load hosts): start "
            "another worker on queue gpu-7 (one per host), or lower the load hosts"
        )
        link.leave()
    finally:
        hosts.close()
    assert _keys(990_002) == []


def test_a_sweep_cancelled_while_its_agents_join_stops_waiting_for_them() -> None:
    hosts = remote.RemoteHosts(
        settings.REDIS_URL, 990_003, 2, name="coordinator", queue="q", join_timeout_s=60
    )
    hosts.open()
    try:
        started = time.monotonic()

        async def cancelled() -> bool:
            return time.monotonic() - started > 0.5

        assert asyncio.run(hosts.join(cancelled)) is False
        assert time.monotonic() - started < 10  # a bound: well inside the join's 60 s
    finally:
        hosts.close()
    assert _keys(990_003) == []


def test_the_form_and_the_command_line_name_the_load_hosts_field() -> None:
    from django.core.management import CommandError, call_command

    from profiler_app.forms import SweepForm

    data = {**SweepForm.preset_initial("default"), "mode": "concurrency", "percentile": "95"}
    form = SweepForm(
        {**data, "load_hosts": "40", "engine": "builtin", "input_data": "random"},
        model="m",
    )
    assert not form.is_valid()
    assert form.errors["load_hosts"] == [
        "Load hosts must be between 1 and 16 (the sweep's worker and its agents)."
    ]
    with pytest.raises(CommandError, match=r"^--load-hosts \(9\) must be at most the concurrency"):
        call_command("perf_sweep", "m", "--concurrency-range", "1:8:1", "--load-hosts", "9")
