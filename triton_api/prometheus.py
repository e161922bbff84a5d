"""Parse Triton's Prometheus text exposition (the /metrics endpoint on port 8002)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass
class MetricSample:
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    value: float = 0.0


def parse_prometheus(text: str) -> list[MetricSample]:
    """Samples in file order; comments and malformed lines are ignored."""
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            continue
        name, labels, raw = match.groups()
        try:
            value = float(raw)
        except ValueError:
            continue
        if math.isnan(value):
            continue
        samples.append(MetricSample(name, dict(_LABEL.findall(labels or "")), value))
    return samples
