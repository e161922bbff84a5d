"""The "Find best config" form: the search space, the load to measure at, constraints and
the objective, checked (space size, Triton control mode, inputs) before anything is queued.

Its fields follow the model's kind (`kind_presets.model_kind`), as the Benchmark form's:
a decoupled model is measured over gRPC streams (no choice: it answers only there) and
gets the response-throughput objective, the first-response budget and the token output;
a sequence model gets the sequence flags and never dynamic batching (its sequence
batcher stays: `space`); every kind may count goodput. A field that does not fit the
kind is not shown, and a value sent for it anyway (the API) is refused on it with the
reason (`creating.refusals`, `kind_rules`).
"""

from __future__ import annotations

import re
from typing import Any

from django import forms

from registry.servers import Server

from ..forms import PERCENTILES, goodput_field, sequence_fields, token_output_field
from ..model_kind import ModelKind
from ..models import Search
from ..params import SEQUENCE_FLAGS, ParamsError, SweepParams, from_flags
from . import confirm, creating, defaults, target
from .errors import SearchError, SearchRefused
from .objective import Constraints
from .space import (
    BOUNDS,
    MAX_VALUES,
    Knobs,
    Space,
    SpaceError,
    bound_message,
    too_many_message,
)

# The search's flags that are the measurement's (its percentile is the constraints'); a
# search sweeps concurrency only, so --num-of-sequences (request-rate mode) is not one.
MEASURE_FLAGS = (
    "concurrency_range", "measurement_interval", "max_trials", "stability_percentage",
    "sequence_length", "sequence_length_variation", "sequence_id_range",
    "goodput", "token_output",
)  # fmt: skip
SEQUENCE_FIELDS = tuple(f for f in SEQUENCE_FLAGS if f != "num_of_sequences")
DYNAMIC_BATCHING_FIELDS = ("batching_off", "batching_on", "preferred")
STREAMING_FIELDS = ("first_response_budget", "token_output")
STREAMING_OBJECTIVES = (Search.Objective.MAX_RESPONSE_THROUGHPUT,)


MAX_RUNS = 10_000  # a quick search's budget of runs: far above any grid, and fits a column


def parse_ints(text: str, knob: str) -> tuple[int, ...]:
    """'1,2,4' or '1:4' (inclusive range, optional step) -> (1, 2, 4); '' -> ().

    `knob` is a key of `space.BOUNDS`. A range is counted and bounded by arithmetic before
    it is listed, so '1:10**11' is refused at once; so is a list over MAX_VALUES values."""
    what, low, high = BOUNDS[knob]
    text = text.strip()
    if not text:
        return ()
    if ":" in text:
        parts = text.split(":")
        try:
            if len(parts) > 3:
                raise ValueError
            start, end, step = (int(p) for p in (*parts, "1")[:3])
        except ValueError:
            raise forms.ValidationError(f"{text!r} is not start:end[:step] ({what})") from None
        if step <= 0 or end < start:
            raise forms.ValidationError(f"{text!r}: need start <= end and a positive step")
        count = (end - start) // step + 1
        if count > MAX_VALUES:
            raise forms.ValidationError(f"{text!r}: {too_many_message(knob, count)}")
        if start < low or end > high:
            raise forms.ValidationError(bound_message(knob))
        return tuple(range(start, end + 1, step))
    items = [v for v in re.split(r"[\s,]+", text) if v]
    if len(items) > MAX_VALUES:
        raise forms.ValidationError(too_many_message(knob, len(items)))
    try:
        values = tuple(int(v) for v in items)
    except ValueError:
        raise forms.ValidationError(f"{text!r}: {what} must be whole numbers") from None
    if any(v < low or v > high for v in values):
        raise forms.ValidationError(bound_message(knob))
    return values


def parse_preferred(text: str) -> tuple[tuple[int, ...], ...]:
    """'none; 4,8; 16' -> ((), (4, 8), (16,)); '' -> ((),)."""
    parts = text.split(";")
    if len(parts) > MAX_VALUES:
        raise forms.ValidationError(
            f"{len(parts):,} preferred batch size sets is too many: at most {MAX_VALUES}"
        )
    options: list[tuple[int, ...]] = []
    for part in parts:
        part = part.strip()
        if not part or part.lower() == "none":
            options.append(())
        else:
            options.append(parse_ints(part, "preferred"))
    return tuple(dict.fromkeys(options)) or ((),)


def _join(values: Any) -> str:
    return ",".join(str(v) for v in values)


class SearchForm(forms.Form):
    mode = forms.ChoiceField(choices=Search.Mode.choices, initial=Search.Mode.QUICK)
    kind = forms.ChoiceField(
        choices=[("KIND_CPU", "KIND_CPU"), ("KIND_GPU", "KIND_GPU")], label="Instance kind"
    )
    counts = forms.CharField(label="Instance counts", help_text="e.g. 1:4 or 1,2,4")
    max_batch_sizes = forms.CharField(
        required=False, label="max_batch_size values", help_text="e.g. 8,16,32; empty keeps it"
    )
    batching_off = forms.BooleanField(required=False, label="Dynamic batching off")
    batching_on = forms.BooleanField(required=False, label="Dynamic batching on")
    delays = forms.CharField(
        required=False,
        label="max_queue_delay_microseconds values",
        help_text="e.g. 0,100,500; empty keeps the current one",
    )
    preferred = forms.CharField(
        required=False,
        label="Preferred batch sizes",
        help_text="sets separated by ';', 'none' for no preference: none; 4,8; 16",
    )
    concurrency_range = forms.CharField(label="Concurrency range", initial="4:8:4")
    # The measurement's bounds are the sweep's (`params.from_flags`); a search's windows,
    # paid for every candidate, are capped lower.
    measurement_interval = forms.IntegerField(initial=1000, label="Window (ms)")
    max_trials = forms.IntegerField(initial=5, max_value=100, label="Max windows")
    stability_percentage = forms.FloatField(initial=10, label="Stability (%)")
    # Sequence models only: perf_analyzer's sequence flags, as a sweep takes them.
    sequence_length, sequence_length_variation, sequence_id_range = sequence_fields()
    # Decoupled models only: the output whose elements per response are tokens.
    token_output = token_output_field("(max response throughput then reads tokens/s)")
    goodput = goodput_field(
        "request_latency:50 (and for a decoupled model time_to_first_token:200 "
        "inter_token_latency:30): what max goodput counts"
    )
    percentile = forms.ChoiceField(choices=PERCENTILES, initial="95")
    latency_budget = forms.FloatField(
        required=False,
        min_value=0.001,
        label="Latency budget (ms)",
        help_text="empty: twice the current config's latency at its knee, measured first",
    )
    # Decoupled models only: the time to the first response, at the percentile.
    first_response_budget = forms.FloatField(
        required=False,
        min_value=0.001,
        label="First-response budget (ms)",
        help_text="the time to the first response, at the percentile; empty (and no latency "
        "budget): twice the current config's at its knee, measured first",
    )
    min_throughput = forms.FloatField(
        required=False, min_value=0, label="Minimum throughput (infer/s)"
    )
    gpu_memory_limit = forms.FloatField(required=False, min_value=0, label="GPU memory limit (MB)")
    objective = forms.ChoiceField(
        choices=Search.Objective.choices, initial=Search.Objective.MAX_THROUGHPUT
    )
    max_runs = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=MAX_RUNS,
        label="Quick mode: max runs",
        help_text="default: a third of the grid; it always tries the current config, one "
        "more instance and one batching change",
    )
    confirm_top = forms.IntegerField(
        required=False,
        initial=confirm.DEFAULT_TOP,
        min_value=0,
        max_value=confirm.MAX_TOP,
        label="Re-measure the top",
        help_text="candidates, with the current config, side by side before ranking (0: off)",
    )
    confirm_rounds = forms.IntegerField(
        required=False,
        initial=confirm.DEFAULT_ROUNDS,
        min_value=0,
        max_value=confirm.MAX_ROUNDS,
        label="Re-measurement rounds",
        help_text="alternating rounds; candidates whose spreads overlap are tied (at least 2)",
    )

    def __init__(
        self, *args: Any, model: str, server: Server, kind: ModelKind | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.model = model
        self.server = server  # the Triton server the search runs on
        self.kind = kind
        self.search_request: creating.SearchRequest | None = None
        self.unfit = self._unfit()
        self._fit_kind()

    @property
    def streams(self) -> bool:
        """Measured over gRPC streams: a decoupled model answers only there."""
        return bool(self.kind and self.kind.decoupled)

    def _unfit(self) -> set[str]:
        """The fields that do not fit the model's kind (none when it is not known: the
        refusals then say what does not fit)."""
        kind = self.kind
        if kind is None:
            return set()
        unfit: set[str] = set()
        if not kind.decoupled:
            unfit.update(STREAMING_FIELDS)
        if kind.sequence:
            unfit.update(DYNAMIC_BATCHING_FIELDS)
            if kind.strategy != "oldest":
                unfit.add("delays")
        else:
            unfit.update(SEQUENCE_FIELDS)
        return unfit

    def _fit_kind(self) -> None:
        """Labels and offered objectives in the kind's words; unfit fields stay (so a value
        sent for one is refused on it) but are not shown (`shown_fields`)."""
        kind = self.kind
        if kind is None:
            return
        if not kind.decoupled:
            # Every objective stays valid input (its refusal says why it does not fit).
            self.fields["objective"].widget.choices = [
                c for c in Search.Objective.choices if c[0] not in STREAMING_OBJECTIVES
            ]
        else:
            self.fields["latency_budget"].label = "Request latency budget (ms)"
            self.fields[
                "latency_budget"
            ].help_text = "to the final response; optional beside the first-response budget"
        if kind.sequence and kind.strategy == "oldest":
            self.fields["delays"].label = "Sequence batcher max_queue_delay_microseconds values"
            self.fields[
                "delays"
            ].help_text = "the oldest strategy's delay, e.g. 0,100,500; empty keeps the current one"

    def shown_fields(self) -> list[Any]:
        """The bound fields the page shows: those that fit the kind, and any with an error."""
        return [f for f in self if f.name not in self.unfit or f.errors]

    @classmethod
    def defaults_for(
        cls, server: Server, model: str, current: Knobs, config_sha256: str
    ) -> tuple[dict[str, Any], defaults.Capacity, defaults.Suggestion | None, bool]:
        """(initial values, the server's capacity, the probe's suggestion, GPUs?) for a
        model on ``server``: one source for the page and the API."""
        capacity = defaults.capacity(server)
        gpus = capacity.gpus > 0 or target.has_gpus(server)
        suggestion = defaults.suggestion(server, model, config_sha256)
        return cls.initial_for(current, gpus, capacity, suggestion), capacity, suggestion, gpus

    @classmethod
    def initial_for(
        cls,
        current: Knobs,
        gpus: bool,
        capacity: defaults.Capacity | None = None,
        suggestion: defaults.Suggestion | None = None,
    ) -> dict[str, Any]:
        """Defaults around the current config; KIND_CPU when Triton shows no GPU; counts up
        to the server's CPU or GPU count; the budget and the concurrency from a probe of the
        current config when there is one (else the budget is measured first)."""
        delays = sorted({0, 100, 500, current.delay_us})
        kind = "KIND_GPU" if gpus else "KIND_CPU"
        limit = capacity.max_count(kind, current.count) if capacity else max(2, current.count + 1)
        probed: dict[str, Any] = {}
        if suggestion is not None:
            probed = {
                suggestion.budget_field: suggestion.budget_ms,
                "concurrency_range": suggestion.concurrency_range,
            }
        return {
            **probed,
            "kind": kind,
            "counts": _join(defaults.count_values(max(limit, current.count))),
            "max_batch_sizes": _join(sorted({current.max_batch_size}))
            if current.max_batch_size
            else "",
            # A sequence model keeps its sequence batcher; without a batch dimension
            # (max_batch_size 0) dynamic batching would have nothing to batch.
            "batching_off": True,
            "batching_on": not current.sequence and current.max_batch_size > 0,
            "delays": _join(delays) if current.sequence in ("", "oldest") else "",
            "preferred": "none",
        }

    # Each knob is parsed and bounded on its own field, before the space is put together.
    def clean_counts(self) -> tuple[int, ...]:
        return parse_ints(self.cleaned_data.get("counts") or "", "counts")

    def clean_max_batch_sizes(self) -> tuple[int, ...]:
        return parse_ints(self.cleaned_data.get("max_batch_sizes") or "", "max_batch_sizes")

    def clean_delays(self) -> tuple[int, ...]:
        return parse_ints(self.cleaned_data.get("delays") or "", "delays")

    def clean_preferred(self) -> tuple[tuple[int, ...], ...]:
        return parse_preferred(self.cleaned_data.get("preferred") or "")

    def clean_confirm_top(self) -> int:
        value = self.cleaned_data.get("confirm_top")
        return confirm.DEFAULT_TOP if value is None else value

    def clean_confirm_rounds(self) -> int:
        value = self.cleaned_data.get("confirm_rounds")
        if value is None:
            return confirm.DEFAULT_ROUNDS
        if value == 1:
            raise forms.ValidationError("One round gives no spread: 0 (off), or 2 or more rounds.")
        return value

    def _measure(self, data: dict[str, Any]) -> SweepParams | None:
        """The load every candidate is measured at (over gRPC streams for a decoupled
        model), by the sweep's one entry; None after adding the errors."""
        flags = {name: data[name] for name in MEASURE_FLAGS if name in data}
        try:
            return from_flags(
                {**flags, "model": self.model, "mode": "concurrency", "streaming": self.streams}
            )
        except ParamsError as exc:
            self._add(exc.errors)
            return None

    def _add(self, errors: dict[str, str]) -> None:
        """Each refusal on its field (a flag that is no field of this form on none)."""
        for flag, message in errors.items():
            self.add_error(flag if flag in self.fields else None, message)

    def _sequence_space(self, data: dict[str, Any]) -> bool:
        """A sequence model's space has no dynamic batching (its sequence batcher stays);
        False after refusing a value that would add it, on its field."""
        name = self.model
        if data.get("batching_on"):
            self.add_error(
                "batching_on",
                f"{name} is a sequence model: dynamic batching would replace its sequence "
                "batcher (one scheduler per model); its candidates keep it.",
            )
        if any(data.get("preferred") or ()):
            self.add_error(
                "preferred",
                f"{name} is a sequence model: preferred batch sizes are dynamic batching's; "
                "its sequence batcher stays.",
            )
        if data.get("delays") and self.kind is not None and self.kind.strategy != "oldest":
            self.add_error(
                "delays",
                f"{name}'s sequence batcher uses the direct strategy, whose delay Triton "
                "ignores without minimum_slot_utilization: leave the delays empty.",
            )
        data.update(batching_off=True, batching_on=False, preferred=((),))
        return not self.errors

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        measure = self._measure(data)
        if self.errors or measure is None:
            return data
        if self.kind is not None and self.kind.sequence and not self._sequence_space(data):
            return data
        try:
            space = Space(
                counts=data["counts"],
                kind=data["kind"],
                max_batch_sizes=data["max_batch_sizes"],
                batching_off=data["batching_off"],
                batching_on=data["batching_on"],
                delays_us=data["delays"],
                preferred=data["preferred"],
            )
        except SpaceError as exc:
            self.add_error(None, str(exc))
            return data
        pct = data["percentile"]
        # No budget given: the search measures the current config first and takes twice
        # its latency at the knee; for one over streams, its time to the first response.
        no_budget = data.get("latency_budget") is None and (
            not measure.streaming or data.get("first_response_budget") is None
        )
        request = creating.SearchRequest(
            model=self.model,
            server=self.server,
            space=space,
            measure=measure,
            constraints=Constraints(
                latency_budget_ms=data.get("latency_budget"),
                percentile=pct if pct == "avg" else int(pct),
                min_throughput=data.get("min_throughput"),
                gpu_memory_limit_mb=data.get("gpu_memory_limit"),
                first_response_budget_ms=data.get("first_response_budget"),
            ),
            objective=data["objective"],
            mode=data["mode"],
            max_runs=data.get("max_runs"),
            confirm_top=data["confirm_top"],
            confirm_rounds=data["confirm_rounds"],
            budget_auto=no_budget,
        )
        try:
            _, runs = creating.plan(request)
            creating.preflight(request)
        except SearchRefused as exc:
            self._add(exc.errors)
            return data
        except (SearchError, SpaceError) as exc:
            self.add_error(None, str(exc))
            return data
        self.planned_runs = runs
        self.search_request = request
        return data
