"""A load agent's loop: one host's share of a sweep's load, driven by its coordinator over
Redis (`agent_link`; the messages are `load_messages`, the keys and clocks
`load_session`).

The agent builds the same requests as the coordinator from the sweep's stored parameters
(`loadgen.prepare`), starts its worker processes for its host number (`loadgen.host_pool`),
and answers "ready". Then, command by command:

- ("level", kind, share, arrival, seed, start_wall_ns, offset_ns): at the wall-clock start,
  on its own monotonic clock, its workers take their share (no reply);
- ("sequences", first, count, total, seed, level): its workers end their live sequences
  and take statuses first..first+count-1 of `total` -> ("ready",);
- ("swap", boundary_wall_ns): its workers cut their records at the boundary, waited for
  when this clock is behind -> ("records", the workers' raw replies);
- ("stop",): its workers stop -> ("stopped",).

It stops on its own, stopping its workers, when the coordinator's key is gone (that
process died or ended) or `should_stop()` says so (the job no longer runs); any error goes
back as ("error", message), which fails the sweep naming this host. A command its
coordinator did not sign for this agent and place never reaches this loop
(`agent_link.AgentLink.next_command` drops it).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable

from triton_api import aio
from triton_api.connection import Connection

from ..params import SweepError, SweepParams
from . import agent_link, load_session, loadgen, worker_pool

log = logging.getLogger(__name__)


async def serve(
    params: SweepParams,
    triton: Connection,
    link: agent_link.AgentLink,
    *,
    host: str,
    task: str,
    should_stop: Callable[[], bool],
) -> str:
    """Run this agent's share of the sweep until told to stop; returns how it ended."""
    if not link.join(host, os.getpid(), task):
        return "the sweep's coordinator is gone"
    control = aio.AioClient(triton)
    try:
        try:
            prepared = await loadgen.prepare(params, triton, control)
        finally:
            await control.close()
        pool = loadgen.host_pool(prepared, params, link.index, params.load_hosts)
    except SweepError as exc:
        link.reply(("error", str(exc)))
        return f"error: {exc}"
    try:
        try:
            await pool.started()
        except SweepError as exc:
            link.reply(("error", str(exc)))
            return f"error: {exc}"
        link.reply(("ready", None))
        return await _commands(pool, link, should_stop)
    finally:
        await asyncio.get_running_loop().run_in_executor(None, pool.stop)
        if link.stopping:
            link.reply(("stopped",))  # after the workers are gone


async def _commands(
    pool: worker_pool.WorkerPool, link: agent_link.AgentLink, should_stop: Callable[[], bool]
) -> str:
    checked = time.monotonic()
    while True:
        message = await asyncio.to_thread(link.next_command)
        # Between commands too (they may come faster than the polls time out).
        if message is None or time.monotonic() - checked >= load_session.POLL_S:
            checked = time.monotonic()
            if should_stop():
                return "the sweep no longer runs"
            if not link.coordinator_alive():
                return "the sweep's coordinator is gone"
        if message is None:
            continue
        kind = message[0]
        try:
            if kind == "level":
                _, level_kind, share, arrival, seed, start_wall, offset = message
                await _until(
                    load_session.to_monotonic(start_wall), load_session.LEVEL_START_LEAD_NS
                )
                pool.set_level(level_kind, share, arrival, seed, offset)
            elif kind == "sequences":
                await pool.assign_sequences(*message[1:])
                link.reply(("ready", None))
            elif kind == "swap":
                boundary = load_session.to_monotonic(message[1])
                await _until(boundary, int(load_session.BOUNDARY_WAIT_MAX_S * 1e9))
                link.reply(("records", await pool.swap(boundary)))
            elif kind == "stop":
                link.stopping = True
                return "stopped"
        except SweepError as exc:
            link.reply(("error", str(exc)))
            return f"error: {exc}"


async def _until(mono_ns: int, most_ns: int) -> None:
    """Sleep until this host's monotonic `mono_ns`, `most_ns` at most (a clock far off)."""
    wait = min(mono_ns - time.monotonic_ns(), most_ns)
    if wait > 0:
        await asyncio.sleep(wait / 1e9)
