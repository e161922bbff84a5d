"""The one reader of a Triton address, ``host:port`` or ``[IPv6]:port``.

The settings' check (``common.env.parse_hostport``), the registry's rules, the load
engine's transports and the dev stack each took an address apart by hand, each a little
differently (an IPv6 address kept its brackets in one and lost them in another). They all
call `split_host_port` now, and `join_host_port` writes one back.
"""

from __future__ import annotations


def split_host_port(text: str) -> tuple[str, int]:
    """``'triton:8001'`` -> ``('triton', 8001)``; ``'[::1]:8001'`` -> ``('::1', 8001)``.

    ValueError, naming ``text``, when there is no port, the port is not a number from 1 to
    65535, or an IPv6 address is not in brackets."""
    host, colon, port = text.rpartition(":")
    if not colon:
        raise ValueError(f"{text!r} has no port: give host:port")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"{text!r}: an IPv6 address goes in brackets, e.g. [::1]:8001")
    if not host:
        raise ValueError(f"{text!r} has no host: give host:port")
    if not (port.isascii() and port.isdigit() and len(port) <= 5 and 0 < int(port) < 65536):
        raise ValueError(f"{text!r} has a bad port: give a number from 1 to 65535")
    return host, int(port)


def join_host_port(host: str, port: int | str) -> str:
    """``host:port``, an IPv6 address in brackets (`split_host_port`'s inverse)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
