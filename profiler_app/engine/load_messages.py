"""What a sweep's load hosts say to each other over Redis, and how it is signed.

What a host sends is msgpack, numpy arrays of an allow-listed dtype included (`encode`,
`decode`): nothing crosses Redis as pickle. Every message each way is signed (`sign`,
`verify`): an HMAC-SHA256 under a key derived from Django's SECRET_KEY, over the message,
the Redis key it is pushed to (its job, session, agent and direction) and its number on
that key (`numbered`). Whoever reaches Redis without the secret cannot pose as an agent or
a coordinator, nor replay a message from another session, agent or place in the exchange:
such a message is `Forged`, and its receiver (`remote.RemoteHosts`,
`agent_link.AgentLink`) drops it.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
from typing import Any

import msgpack
import numpy as np
from django.conf import settings

_ARRAY = 1  # msgpack extension code: a 1-D numpy array
_DTYPES: dict[bytes, np.dtype[Any]] = {
    b"i1": np.dtype("i1"),
    b"i8": np.dtype("<i8"),
    b"f8": np.dtype("<f8"),
}
_CODES = {dtype: code for code, dtype in _DTYPES.items()}


def _default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        dtype = obj.dtype.newbyteorder("<") if obj.dtype.byteorder == ">" else obj.dtype
        code = _CODES.get(np.dtype(dtype))
        if code is None or obj.ndim != 1:
            raise TypeError(f"cannot send an array of {obj.dtype} with {obj.ndim} dimensions")
        return msgpack.ExtType(_ARRAY, code + np.ascontiguousarray(obj, dtype).tobytes())
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    raise TypeError(f"cannot send {type(obj).__name__}")


def _ext(code: int, data: bytes) -> Any:
    dtype: np.dtype[Any] | None = _DTYPES.get(data[:2]) if code == _ARRAY else None
    if dtype is None or (len(data) - 2) % dtype.itemsize:
        raise ValueError("not an array this protocol sends")
    return np.frombuffer(data[2:], dtype).copy()


def encode(message: Any) -> bytes:
    """A message (tuples, numbers, text, None, dicts, 1-D int8/int64/float64 arrays)."""
    return msgpack.packb(message, default=_default, use_bin_type=True)


def decode(raw: bytes | memoryview) -> Any:
    """`encode`'s message; sequences come back as tuples (the workers' replies are)."""
    return msgpack.unpackb(raw, ext_hook=_ext, use_list=False, raw=False)


_KEY_PURPOSE = b"dashboard.load-agent.v1"
_MAC_BYTES = hashlib.sha256().digest_size


class Forged(ValueError):
    """A message whose signature is missing or is not for this key and number."""


@functools.lru_cache(maxsize=4)
def _derive(secret: str) -> bytes:
    # A key of its own: a MAC of the load agents' messages never doubles as one of Django's.
    return hmac.new(secret.encode(), _KEY_PURPOSE, hashlib.sha256).digest()


def _mac(scope: str, body: bytes | memoryview) -> bytes:
    mac = hmac.new(_derive(settings.SECRET_KEY), scope.encode(), hashlib.sha256)
    mac.update(b"\0")  # a key name holds no NUL: scope and body cannot shift into each other
    mac.update(body)
    return mac.digest()


def numbered(key: str, number: int) -> str:
    """The scope of the `number`-th message pushed to `key` (counted from 0 by both ends)."""
    return f"{key}#{number}"


def sign(message: Any, scope: str) -> bytes:
    """`encode(message)` after its HMAC over `scope` (`numbered(key, n)`, or the joins key)."""
    body = encode(message)
    return _mac(scope, body) + body


def verify(raw: bytes, scope: str) -> Any:
    """`sign`'s message if it was signed for `scope` with this SECRET_KEY, else Forged."""
    view = memoryview(raw)
    body = view[_MAC_BYTES:]
    if len(raw) < _MAC_BYTES or not hmac.compare_digest(view[:_MAC_BYTES], _mac(scope, body)):
        raise Forged(f"a message on {scope} whose signature is missing or wrong")
    return decode(body)
