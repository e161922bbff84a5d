"""The "Find best config" form: the search space, the load to measure at, constraints and
the objective, checked (space size, Triton control mode, inputs) before anything is queued."""

from __future__ import annotations

import re
from typing import Any

from django import forms

from repository_app.servers import Server

from ..forms import PERCENTILES
from ..models import Search
from ..params import ParamsError, SweepParams, from_flags
from . import confirm, defaults, runner
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

# The search's flags that are the measurement's (its percentile is the constraints').
MEASURE_FLAGS = ("concurrency_range", "measurement_interval", "max_trials", "stability_percentage")


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
    percentile = forms.ChoiceField(choices=PERCENTILES, initial="95")
    latency_budget = forms.FloatField(
        required=False,
        min_value=0.001,
        label="Latency budget (ms)",
        help_text="empty: twice the current config's latency at its knee, measured first",
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

    def __init__(self, *args: Any, model: str, server: Server, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.model = model
        self.server = server  # the Triton server the search runs on
        self.search_request: runner.SearchRequest | None = None

    @classmethod
    def defaults_for(
        cls, server: Server, model: str, current: Knobs, config_sha256: str
    ) -> tuple[dict[str, Any], defaults.Capacity, defaults.Suggestion | None, bool]:
        """(initial values, the server's capacity, the probe's suggestion, GPUs?) for a
        model on ``server``: one source for the page and the API."""
        capacity = defaults.capacity(server)
        gpus = capacity.gpus > 0 or runner.has_gpus(server)
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
                "latency_budget": suggestion.budget_ms,
                "concurrency_range": suggestion.concurrency_range,
            }
        return {
            **probed,
            "kind": kind,
            "counts": _join(defaults.count_values(max(limit, current.count))),
            "max_batch_sizes": _join(sorted({current.max_batch_size}))
            if current.max_batch_size
            else "",
            "batching_off": True,
            "batching_on": True,
            "delays": _join(delays),
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
        """The load every candidate is measured at; None after adding the errors."""
        flags = {name: data[name] for name in MEASURE_FLAGS if name in data}
        try:
            return from_flags({**flags, "model": self.model, "mode": "concurrency"})
        except ParamsError as exc:
            for flag, message in exc.errors.items():
                self.add_error(flag if flag in self.fields else None, message)
            return None

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        measure = self._measure(data)
        if self.errors or measure is None:
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
        request = runner.SearchRequest(
            model=self.model,
            server=self.server,
            space=space,
            measure=measure,
            constraints=Constraints(
                latency_budget_ms=data.get("latency_budget"),
                percentile=pct if pct == "avg" else int(pct),
                min_throughput=data.get("min_throughput"),
                gpu_memory_limit_mb=data.get("gpu_memory_limit"),
            ),
            objective=data["objective"],
            mode=data["mode"],
            max_runs=data.get("max_runs"),
            confirm_top=data["confirm_top"],
            confirm_rounds=data["confirm_rounds"],
            budget_auto=data.get("latency_budget") is None,
        )
        try:
            _, runs = runner.plan(request)
            runner.preflight(request)
        except (runner.SearchError, SpaceError) as exc:
            self.add_error(None, str(exc))
            return data
        self.planned_runs = runs
        self.search_request = request
        return data
