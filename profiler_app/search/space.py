"""The search space: the knobs a candidate sets, the grid they span, and applying them.

A candidate is a `Knobs` value: instance count and kind, max_batch_size, and dynamic
batching (off, or on with a max queue delay and a preferred batch size list). Its `key`
is canonical (batching off ignores the delay and preferred sizes), so the same config is
measured once per search whichever strategy reaches it.

A sequence model keeps its sequence batcher: a config has one scheduler, and
dynamic_batching would replace it (the candidate would be another model). Its candidates
(`Knobs.sequence`: the strategy) set instance count and kind and max_batch_size (the
sequence batcher batches up to it, one slot per sequence), and with the `oldest` strategy
its `max_queue_delay_microseconds` (how long a batch waits for more sequences' requests,
as dynamic batching's delay). The `direct` strategy's delay is left alone: Triton ignores
it unless `minimum_slot_utilization` is set, which is the model's own design.

`apply(base, knobs)` returns a copy of the model's ModelConfig with the knobs set and
everything else (inputs, outputs, parameters, other batching fields) kept as it was; it
refuses (SpaceError) a candidate that would lose or change a sequence batcher.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from tritonclient.grpc import model_config_pb2 as pb

KINDS = ("KIND_CPU", "KIND_GPU")
MAX_CANDIDATES = 500
# Bounds of the knobs, checked on the values before any grid is built (the form counts a
# range such as 1:10**11 before listing it, see forms.parse_ints).
MAX_VALUES = 64  # values per knob (and preferred-size sets)
MAX_INSTANCES = 64
MAX_BATCH = 2**31 - 1  # Triton's max_batch_size and preferred_batch_size are int32
MAX_DELAY_US = 10_000_000  # max_queue_delay_microseconds
# Per knob (the form's field name): what it is called in messages, lowest, highest; one
# source for the form and for Space.
BOUNDS = {
    "counts": ("instance counts", 1, MAX_INSTANCES),
    "max_batch_sizes": ("max_batch_size values", 1, MAX_BATCH),
    "delays": ("max_queue_delay_microseconds values", 0, MAX_DELAY_US),
    "preferred": ("preferred batch sizes", 1, MAX_BATCH),
}


def bound_message(knob: str) -> str:
    what, low, high = BOUNDS[knob]
    return f"{what} must be between {low} and {high}"


def too_many_message(knob: str, count: int) -> str:
    what = BOUNDS[knob][0]
    shown = f"{count:,}" if count <= 10**12 else "more than 10^12"
    return f"{shown} {what} is too many: at most {MAX_VALUES} values per knob"


class SpaceError(ValueError):
    """The search space cannot be used; the message is fit to show a user."""


@dataclass(frozen=True)
class Knobs:
    """One candidate config, as the values of the searched knobs."""

    count: int
    kind: str
    max_batch_size: int
    batching: bool
    delay_us: int = 0  # dynamic batching's, or the oldest sequence strategy's, delay
    preferred: tuple[int, ...] = ()
    # A sequence model's sequence batcher strategy ("direct" | "oldest"), kept as it is but
    # for the oldest strategy's delay; "" for a model without one.
    sequence: str = ""

    def canonical(self) -> Knobs:
        if self.sequence:
            delay = self.delay_us if self.sequence == "oldest" else 0
            return replace(self, batching=False, delay_us=delay, preferred=())
        if self.batching:
            return self
        return replace(self, delay_us=0, preferred=())

    @property
    def key(self) -> str:
        k = self.canonical()
        if k.sequence:
            sched = "seq-oldest" + str(k.delay_us) if k.sequence == "oldest" else "seq-direct"
        elif k.batching:
            sched = f"dyn{k.delay_us}p{'-'.join(map(str, k.preferred))}"
        else:
            sched = "off"
        return f"{k.count}x{k.kind.removeprefix('KIND_')}/mbs{k.max_batch_size}/{sched}"

    def to_json(self) -> dict[str, Any]:
        data = asdict(self.canonical())
        data["preferred"] = list(data["preferred"])
        if not data["sequence"]:
            del data["sequence"]  # as stored before sequence models were searched
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Knobs:
        return cls(
            count=int(data["count"]),
            kind=str(data["kind"]),
            max_batch_size=int(data["max_batch_size"]),
            batching=bool(data["batching"]),
            delay_us=int(data.get("delay_us") or 0),
            preferred=tuple(int(v) for v in data.get("preferred") or ()),
            sequence=str(data.get("sequence") or ""),
        ).canonical()

    def describe(self) -> str:
        """'2 GPU instances with dynamic batching (100 µs)', for sentences and tables."""
        kind = self.kind.removeprefix("KIND_")
        noun = "instance" if self.count == 1 else "instances"
        head = f"{self.count} {kind} {noun}"
        if self.sequence:
            how = f"oldest, {self.delay_us} µs" if self.sequence == "oldest" else self.sequence
            return f"{head} with sequence batching ({how}), max batch {self.max_batch_size}"
        if not self.batching:
            return f"{head} without dynamic batching, max batch {self.max_batch_size}"
        pref = f", preferred {list(self.preferred)}" if self.preferred else ""
        return (
            f"{head} with dynamic batching ({self.delay_us} µs{pref}), "
            f"max batch {self.max_batch_size}"
        )


def knobs_of(config: pb.ModelConfig) -> Knobs:
    """The knob values a config has now (its first instance group; count 1 when unset)."""
    count, kind = 1, "KIND_CPU"
    if config.instance_group:
        group = config.instance_group[0]
        count = sum(max(1, g.count) for g in config.instance_group)
        name = pb.ModelInstanceGroup.Kind.Name(group.kind)
        kind = name if name in KINDS else ("KIND_GPU" if name == "KIND_AUTO" else "KIND_CPU")
    if config.HasField("sequence_batching"):
        strategy = config.sequence_batching.WhichOneof("strategy_choice") or "direct"
        return Knobs(
            count=count,
            kind=kind,
            max_batch_size=int(config.max_batch_size),
            batching=False,
            delay_us=int(config.sequence_batching.oldest.max_queue_delay_microseconds),
            sequence=strategy,
        ).canonical()
    batching = config.HasField("dynamic_batching")
    dyn = config.dynamic_batching
    return Knobs(
        count=count,
        kind=kind,
        max_batch_size=int(config.max_batch_size),
        batching=batching,
        delay_us=int(dyn.max_queue_delay_microseconds) if batching else 0,
        preferred=tuple(dyn.preferred_batch_size) if batching else (),
    ).canonical()


def _strategy(config: pb.ModelConfig) -> str:
    if not config.HasField("sequence_batching"):
        return ""
    return config.sequence_batching.WhichOneof("strategy_choice") or "direct"


def apply(base: pb.ModelConfig, knobs: Knobs) -> pb.ModelConfig:
    """A copy of `base` with the knobs set (nothing else changes). SpaceError for knobs
    that do not fit its scheduler: a sequence model's are sequence knobs of its strategy."""
    strategy = _strategy(base)
    if knobs.sequence != strategy:
        raise SpaceError(
            f"the candidate {knobs.key} does not fit the model's scheduler "
            + (f"(its sequence batcher, {strategy})" if strategy else "(no sequence batcher)")
        )
    config = pb.ModelConfig()
    config.CopyFrom(base)
    kind = pb.ModelInstanceGroup.Kind.Value(knobs.kind)
    keep = [g for g in base.instance_group if g.kind == kind]
    group = pb.ModelInstanceGroup()
    if len(base.instance_group) == 1 and keep:
        group.CopyFrom(keep[0])  # keeps its name, gpus, ...
    group.kind = kind  # type: ignore[assignment]
    group.count = knobs.count
    del config.instance_group[:]
    config.instance_group.append(group)
    config.max_batch_size = knobs.max_batch_size
    if knobs.sequence == "oldest":
        config.sequence_batching.oldest.max_queue_delay_microseconds = knobs.delay_us
    elif knobs.sequence:
        pass  # the direct strategy: nothing of the sequence batcher is searched
    elif knobs.batching:
        dyn = config.dynamic_batching
        dyn.max_queue_delay_microseconds = knobs.delay_us
        del dyn.preferred_batch_size[:]
        dyn.preferred_batch_size.extend(knobs.preferred)
    else:
        config.ClearField("dynamic_batching")
    check_scheduler(base, config)
    return config


def check_scheduler(base: pb.ModelConfig, config: pb.ModelConfig) -> None:
    """SpaceError unless `config` keeps the sequence batcher of `base` (when it has one)
    exactly, but for the oldest strategy's delay, and has no dynamic_batching beside it."""
    if not base.HasField("sequence_batching"):
        return
    expected = pb.ModelSequenceBatching()
    expected.CopyFrom(base.sequence_batching)
    if _strategy(base) == "oldest" and _strategy(config) == "oldest":
        delay = config.sequence_batching.oldest.max_queue_delay_microseconds
        expected.oldest.max_queue_delay_microseconds = delay
    if (
        not config.HasField("sequence_batching")
        or config.sequence_batching != expected
        or config.HasField("dynamic_batching") != base.HasField("dynamic_batching")
    ):
        raise SpaceError(
            "a candidate of a sequence model must keep its sequence_batching (one scheduler "
            "per model): this one would lose or change it"
        )


def diff(current: Knobs, candidate: Knobs) -> list[str]:
    """What the candidate changes, e.g. ['instances 1 → 2', 'dynamic batching delay 200 → 100 µs']."""
    a, b = current.canonical(), candidate.canonical()
    changes = []
    if (a.count, a.kind) != (b.count, b.kind):
        changes.append(
            f"instances {a.count}×{a.kind.removeprefix('KIND_')} → "
            f"{b.count}×{b.kind.removeprefix('KIND_')}"
        )
    if a.max_batch_size != b.max_batch_size:
        changes.append(f"max_batch_size {a.max_batch_size} → {b.max_batch_size}")
    if b.sequence:
        if a.sequence == b.sequence == "oldest" and a.delay_us != b.delay_us:
            changes.append(f"sequence batcher max_queue_delay {a.delay_us} → {b.delay_us} µs")
        return changes
    if a.batching != b.batching:
        changes.append("dynamic batching " + ("off → on" if b.batching else "on → off"))
    if b.batching and a.batching and a.delay_us != b.delay_us:
        changes.append(f"max_queue_delay {a.delay_us} → {b.delay_us} µs")
    elif b.batching and not a.batching:
        changes.append(f"max_queue_delay {b.delay_us} µs")
    if b.batching and a.preferred != b.preferred:
        changes.append(f"preferred_batch_size {list(a.preferred)} → {list(b.preferred)}")
    return changes


@dataclass(frozen=True)
class Space:
    """The values each knob may take. Empty lists mean "keep the current value"."""

    counts: tuple[int, ...] = (1,)
    kind: str = "KIND_CPU"
    max_batch_sizes: tuple[int, ...] = ()
    batching_off: bool = False
    batching_on: bool = True
    delays_us: tuple[int, ...] = ()
    preferred: tuple[tuple[int, ...], ...] = ((),)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise SpaceError(f"instance kind must be one of {', '.join(KINDS)}")
        if not self.counts:
            raise SpaceError(bound_message("counts"))
        if len(self.preferred) > MAX_VALUES:
            raise SpaceError(
                f"{len(self.preferred)} preferred batch size sets is too many: at most {MAX_VALUES}"
            )
        for knob, values in (
            ("counts", self.counts),
            ("max_batch_sizes", self.max_batch_sizes),
            ("delays", self.delays_us),
            *(("preferred", p) for p in self.preferred),
        ):
            _, low, high = BOUNDS[knob]
            if len(values) > MAX_VALUES:
                raise SpaceError(too_many_message(knob, len(values)))
            if any(v < low or v > high for v in values):
                raise SpaceError(bound_message(knob))
        if not (self.batching_off or self.batching_on):
            raise SpaceError("pick dynamic batching off, on, or both")

    def to_json(self) -> dict[str, Any]:
        return {
            "counts": list(self.counts),
            "kind": self.kind,
            "max_batch_sizes": list(self.max_batch_sizes),
            "batching_off": self.batching_off,
            "batching_on": self.batching_on,
            "delays_us": list(self.delays_us),
            "preferred": [list(p) for p in self.preferred],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Space:
        return cls(
            counts=tuple(int(c) for c in data.get("counts") or (1,)),
            kind=str(data.get("kind", "KIND_CPU")),
            max_batch_sizes=tuple(int(m) for m in data.get("max_batch_sizes") or ()),
            batching_off=bool(data.get("batching_off", False)),
            batching_on=bool(data.get("batching_on", True)),
            delays_us=tuple(int(d) for d in data.get("delays_us") or ()),
            preferred=tuple(tuple(int(v) for v in p) for p in data.get("preferred") or [[]]),
        )

    def dimensions(self, current: Knobs) -> Dimensions:
        """The ordered values of each knob, current values filling the unset ones. A
        sequence model's (`current.sequence`) keep its sequence batcher: no dynamic
        batching, and the delays are its oldest strategy's (none for direct)."""
        mbs = tuple(sorted(set(self.max_batch_sizes))) or (current.max_batch_size,)
        delays = tuple(sorted(set(self.delays_us))) or (current.delay_us,)
        if current.sequence:
            return Dimensions(
                counts=tuple(sorted(set(self.counts))),
                kind=self.kind,
                max_batch_sizes=mbs,
                batching=delays if current.sequence == "oldest" else (0,),
                sequence=current.sequence,
            )
        batching: list[int | None] = [None] if self.batching_off else []
        if self.batching_on:
            batching.extend(delays)
        preferred = tuple(dict.fromkeys(self.preferred)) or ((),)
        return Dimensions(
            counts=tuple(sorted(set(self.counts))),
            kind=self.kind,
            max_batch_sizes=mbs,
            batching=tuple(batching),
            preferred=preferred,
        )


@dataclass(frozen=True)
class Dimensions:
    """Ordered knob values: the coordinates hill climbing moves along.

    `batching` holds None (off) then the delays in µs, so one step up from "off" turns
    batching on with the smallest delay. `preferred` is ignored while batching is off.
    A sequence model's (`sequence`: its strategy) hold its oldest strategy's delays (0
    alone for direct) and never turn dynamic batching on.
    """

    counts: tuple[int, ...]
    kind: str
    max_batch_sizes: tuple[int, ...]
    batching: tuple[int | None, ...]
    preferred: tuple[tuple[int, ...], ...] = field(default=((),))
    sequence: str = ""

    @property
    def sizes(self) -> tuple[int, int, int, int]:
        return (
            len(self.counts),
            len(self.max_batch_sizes),
            len(self.batching),
            len(self.preferred),
        )

    def knobs(self, point: tuple[int, int, int, int]) -> Knobs:
        c, m, b, p = point
        delay = self.batching[b]
        if self.sequence:
            return Knobs(
                count=self.counts[c],
                kind=self.kind,
                max_batch_size=self.max_batch_sizes[m],
                batching=False,
                delay_us=delay or 0,
                sequence=self.sequence,
            ).canonical()
        return Knobs(
            count=self.counts[c],
            kind=self.kind,
            max_batch_size=self.max_batch_sizes[m],
            batching=delay is not None,
            delay_us=delay or 0,
            preferred=self.preferred[p] if delay is not None else (),
        ).canonical()

    def candidate_count(self) -> int:
        """How many distinct candidates the grid holds, by arithmetic (batching off ignores
        delay and preferred sizes); exact for `Space.dimensions`, whose values are distinct."""
        counts, mbs, _, preferred = self.sizes
        if self.sequence:  # its delays only: preferred sizes are dynamic batching's
            return counts * mbs * len(self.batching)
        delays = sum(1 for b in self.batching if b is not None)
        off = len(self.batching) - delays
        return counts * mbs * (off + delays * preferred)

    def grid(self) -> list[Knobs]:
        """Every distinct candidate, in a stable order; SpaceError over MAX_CANDIDATES,
        counted before any candidate is built."""
        count = self.candidate_count()
        if count > MAX_CANDIDATES:
            raise SpaceError(f"{count:,} candidates is too many (at most {MAX_CANDIDATES})")
        seen: dict[str, Knobs] = {}
        for point in itertools.product(*(range(n) for n in self.sizes)):
            knobs = self.knobs(point)  # type: ignore[arg-type]
            seen.setdefault(knobs.key, knobs)
        return list(seen.values())

    def nearest(self, knobs: Knobs) -> tuple[int, int, int, int]:
        """The grid point closest to a config (the current one may lie outside the grid)."""

        def index(values: tuple[Any, ...], value: Any, distance: Any) -> int:
            return min(range(len(values)), key=lambda i: (distance(values[i], value), i))

        def num(a: int, b: int) -> float:
            return abs(a - b)

        c = index(self.counts, knobs.count, num)
        m = index(self.max_batch_sizes, knobs.max_batch_size, num)
        target: int | None = knobs.delay_us if knobs.batching or self.sequence else None

        def batch_distance(a: int | None, b: int | None) -> float:
            if a is None or b is None:
                return 0.0 if a is b else 1e12
            return abs(a - b)

        b = index(self.batching, target, batch_distance)
        p = self.preferred.index(knobs.preferred) if knobs.preferred in self.preferred else 0
        return c, m, b, p

    def neighbours(
        self, point: tuple[int, int, int, int], dim: int, direction: int
    ) -> tuple[int, int, int, int] | None:
        """One step along a dimension; None off the edge or when it changes nothing."""
        moved = list(point)
        moved[dim] += direction
        if not 0 <= moved[dim] < self.sizes[dim]:
            return None
        new = (moved[0], moved[1], moved[2], moved[3])
        if self.knobs(new).key == self.knobs(point).key:
            return None  # e.g. preferred sizes while batching is off
        return new
