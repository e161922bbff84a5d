"""A load agent's end of its sweep's session on Redis: its seat, the commands its
coordinator signed for it, its signed replies, and its heartbeat. The loop that acts on the
commands is `agent`; the coordinator's end is `remote.RemoteHosts`.
"""

from __future__ import annotations

import logging
from typing import cast

import redis

from . import load_session as session_io
from .load_messages import Forged, numbered, sign, verify

log = logging.getLogger(__name__)

# An agent writes only while the coordinator's key lives, so nothing it writes after the
# coordinator cleaned up can outlive a TTL.
_GUARDED_PUSH = """
if redis.call('exists', KEYS[1]) == 0 then return 0 end
redis.call('rpush', KEYS[2], ARGV[1])
redis.call('expire', KEYS[2], ARGV[2])
return 1
"""
_GUARDED_SET = """
if redis.call('exists', KEYS[1]) == 0 then return 0 end
redis.call('set', KEYS[2], ARGV[1], 'EX', ARGV[2])
return 1
"""
_GUARDED_SEAT = """
if redis.call('exists', KEYS[1]) == 0 then return 0 end
local n = redis.call('incr', KEYS[2])
redis.call('expire', KEYS[2], ARGV[1])
return n
"""


class AgentLink:
    """An agent's end of its session: its seat, its commands and replies, its heartbeat."""

    def __init__(self, client: redis.Redis, keys: session_io.Keys, index: int) -> None:
        self.redis = client
        self.keys = keys
        self.index = index
        self._push = client.register_script(_GUARDED_PUSH)
        self._set = client.register_script(_GUARDED_SET)
        self._beat: session_io.Beat | None = None
        self._sent = 0  # replies pushed, signed in turn
        self._read = 0  # commands taken
        self._warned = False
        self.stopping = False  # told to stop: it answers "stopped" once its workers are

    @classmethod
    def take_seat(cls, redis_url: str, job: int, hosts: int) -> AgentLink | None:
        """A seat in the job's session: None when there is no session (the coordinator
        ended) or every seat is taken (an extra, or a redelivered, agent)."""
        client = session_io.connect(redis_url)
        session = cast("bytes | None", client.get(session_io.session_key(job)))
        if session is None:
            client.close()
            return None
        keys = session_io.Keys(job, session.decode())
        index = int(
            client.register_script(_GUARDED_SEAT)(
                keys=[keys.alive, keys.seats], args=[session_io.KEY_TTL_S]
            )
        )
        if not 1 <= index < hosts:
            client.close()
            return None
        return cls(client, keys, index)

    def join(self, host: str, pid: int, task: str) -> bool:
        self._beat_once()
        self._beat = session_io.Beat(self._beat_once, f"loadgen-agent-{self.index}-beat")
        self._beat.start()
        return self._push(
            keys=[self.keys.alive, self.keys.joins],
            args=[sign((self.index, host, pid, task), self.keys.joins), session_io.KEY_TTL_S],
        )

    def _beat_once(self) -> None:
        self._set(
            keys=[self.keys.alive, self.keys.agent(self.index)], args=[b"1", session_io.ALIVE_TTL_S]
        )

    def reply(self, message: tuple) -> bool:
        """False when the coordinator is gone."""
        key = self.keys.replies(self.index)
        signed = sign(message, numbered(key, self._sent))
        pushed = bool(self._push(keys=[self.keys.alive, key], args=[signed, session_io.KEY_TTL_S]))
        self._sent += pushed
        return pushed

    def next_command(self, timeout: float = session_io.POLL_S) -> tuple | None:
        """The next command, or None: none came within `timeout`, or one not signed by
        this sweep's coordinator for this place (dropped, logged once)."""
        key = self.keys.commands(self.index)
        item = session_io.blpop(self.redis, [key], timeout=timeout)
        if item is None:
            return None
        try:
            message = verify(item[1], numbered(key, self._read))
        except Forged:
            if not self._warned:
                self._warned = True
                log.warning(
                    "load agent %s of sweep #%s: dropped a command on %s: its signature is "
                    "missing or wrong, or it was replayed (further ones are dropped silently)",
                    self.index, self.keys.job, key,
                )  # fmt: skip
            return None
        self._read += 1
        return cast("tuple", message)

    def coordinator_alive(self) -> bool:
        return bool(self.redis.exists(self.keys.alive))

    def leave(self) -> None:
        if self._beat is not None:
            self._beat.stop()
        try:
            self.redis.delete(self.keys.agent(self.index))
        except redis.RedisError as exc:  # it expires on its own
            log.warning("load agent %s: %s", self.index, exc)
        self.redis.close()
