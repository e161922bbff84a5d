"""How busy the load generator's machine was during a level: the signal that the host
itself is the noise.

A level's windows disagree for two reasons: Triton's own behaviour, or the machine the
load comes from being short of CPU (other work, a small VM, or Triton and the load
generator sharing the same cores). Only the second is the machine's fault, and this
module measures it, simply:

- `busy`: the share of all CPUs' time that was not idle over the level, from the kernel's
  counters (/proc/stat: everything but idle and iowait, steal included). A level is
  flagged at BUSY_SHARE or above: with nine tenths of every core in use, runnable threads
  (the load workers, Triton's, the event loop) wait for a CPU, and that wait lands in the
  latencies and the window counts.
- `steal`: the share a hypervisor gave to other guests; flagged at STEAL_SHARE or above.
- `load_generator`: this engine's own CPU (its load workers and this process) as a share
  of all CPUs, so the page can say how much of `busy` was the measurement itself.
- `triton_local`: Triton's address is this machine's (a loopback address, `localhost` or
  this host's name; no DNS lookup), so Triton competed for the same CPUs.

The counters are the machine's as the kernel shows them: in a container limited by a CPU
quota they are the whole host's. On a machine without /proc/stat nothing is flagged.
"""

from __future__ import annotations

import ipaddress
import os
import resource
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from triton_api.address import split_host_port

BUSY_SHARE = 0.90
STEAL_SHARE = 0.05
PROC_STAT = Path("/proc/stat")


@dataclass(frozen=True)
class Sample:
    """The machine's CPU counters (clock ticks) and this process's CPU time at an instant."""

    total: int
    idle: int
    steal: int
    own_cpu_s: float
    at: float  # time.monotonic()


def read_cpu(path: Path = PROC_STAT) -> tuple[int, int, int] | None:
    """(total, idle incl. iowait, steal) ticks of all CPUs from /proc/stat; None where it
    cannot be read. The guest columns are already counted in user time."""
    try:
        with path.open() as f:
            first = f.readline().split()
    except OSError:
        return None
    if not first or first[0] != "cpu":
        return None
    values = [int(v) for v in first[1:9]]
    values += [0] * (8 - len(values))  # older kernels print fewer columns
    user, nice, system, idle, iowait, irq, softirq, steal = values[:8]
    return user + nice + system + idle + iowait + irq + softirq + steal, idle + iowait, steal


def sample() -> Sample | None:
    """Now's counters; None on a machine without /proc/stat."""
    cpu = read_cpu()
    if cpu is None:
        return None
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return Sample(*cpu, own_cpu_s=usage.ru_utime + usage.ru_stime, at=time.monotonic())


def is_local(url: str) -> bool:
    """Whether Triton's address (host:port, or a URL) names this machine: a loopback or
    unspecified address, `localhost`, or this host's name. No DNS lookup: a name that
    only resolves here (a compose service on the same machine) is not known to be local."""
    try:
        host = split_host_port(urlsplit(url).netloc if "//" in url else url)[0].lower()
    except ValueError:
        return False
    if host in ("localhost", "localhost.localdomain") or host == socket.gethostname().lower():
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_unspecified


@dataclass(frozen=True)
class HostLoad:
    """The machine during one level (shares of all its CPUs' time, 0..1)."""

    cpus: int
    busy: float
    steal: float
    load_per_cpu: float | None  # the 1-minute load average at the level's end, per CPU
    load_generator: float | None  # this engine's CPU; None with load from several hosts
    triton_local: bool

    @property
    def noisy(self) -> bool:
        return self.busy >= BUSY_SHARE or self.steal >= STEAL_SHARE

    def to_json(self) -> dict[str, Any]:
        return {
            "cpus": self.cpus,
            "busy": round(self.busy, 4),
            "steal": round(self.steal, 4),
            "load_per_cpu": None if self.load_per_cpu is None else round(self.load_per_cpu, 3),
            "load_generator": None
            if self.load_generator is None
            else round(self.load_generator, 4),
            "triton_local": self.triton_local,
            "noisy": self.noisy,
        }


def between(
    start: Sample | None,
    end: Sample | None,
    *,
    workers_cpu_s: float | None,
    triton_local: bool,
) -> HostLoad | None:
    """The machine between two samples; `workers_cpu_s` is the CPU time the load workers
    reported for the level (None when some of the load came from other hosts)."""
    if start is None or end is None or end.total <= start.total:
        return None
    ticks = end.total - start.total
    cpus = os.cpu_count() or 1
    elapsed = end.at - start.at
    own = None
    if workers_cpu_s is not None and elapsed > 0:
        own = min(1.0, (workers_cpu_s + end.own_cpu_s - start.own_cpu_s) / (elapsed * cpus))
    try:
        load: float | None = os.getloadavg()[0] / cpus
    except OSError:
        load = None
    return HostLoad(
        cpus=cpus,
        busy=1 - (end.idle - start.idle) / ticks,
        steal=(end.steal - start.steal) / ticks,
        load_per_cpu=load,
        load_generator=own,
        triton_local=triton_local,
    )
