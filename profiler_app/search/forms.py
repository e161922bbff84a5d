"""The "Find best config" form: the search space, the load to measure at, constraints and
the objective, checked (space size, Triton control mode, inputs) before anything is queued."""

from __future__ import annotations

import re
from typing import Any

from django import forms

from ..engine.loadgen import SweepParams
from ..forms import PERCENTILES, _range
from ..models import Search
from . import runner
from .objective import Constraints
from .space import Knobs, Space, SpaceError


def parse_ints(text: str, what: str) -> tuple[int, ...]:
    """'1,2,4' or '1:4' (inclusive range) -> (1, 2, 4); '' -> ()."""
    text = text.strip()
    if not text:
        return ()
    if ":" in text:
        parts = text.split(":")
        try:
            start, end, step = (int(p) for p in (*parts, "1")[:3])
        except ValueError:
            raise forms.ValidationError(f"{text!r} is not start:end[:step] ({what})") from None
        if step <= 0 or end < start:
            raise forms.ValidationError(f"{text!r}: need start <= end and a positive step")
        return tuple(range(start, end + 1, step))
    try:
        return tuple(int(v) for v in re.split(r"[\s,]+", text) if v)
    except ValueError:
        raise forms.ValidationError(f"{text!r}: {what} must be whole numbers") from None


def parse_preferred(text: str) -> tuple[tuple[int, ...], ...]:
    """'none; 4,8; 16' -> ((), (4, 8), (16,)); '' -> ((),)."""
    options: list[tuple[int, ...]] = []
    for part in text.split(";"):
        part = part.strip()
        if not part or part.lower() == "none":
            options.append(())
        else:
            options.append(parse_ints(part, "preferred batch sizes"))
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
    measurement_interval = forms.IntegerField(initial=1000, min_value=50, label="Window (ms)")
    max_trials = forms.IntegerField(initial=5, min_value=3, max_value=100, label="Max windows")
    stability_percentage = forms.FloatField(initial=10, min_value=0.001, label="Stability (%)")
    percentile = forms.ChoiceField(choices=PERCENTILES, initial="95")
    latency_budget = forms.FloatField(
        required=False, min_value=0.001, label="Latency budget (ms)", initial=5
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
        help_text="default: a third of the grid",
    )

    def __init__(self, *args: Any, model: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.model = model
        self.search_request: runner.SearchRequest | None = None

    @classmethod
    def initial_for(cls, current: Knobs, gpus: bool) -> dict[str, Any]:
        """Defaults around the current config; KIND_CPU when Triton shows no GPU."""
        delays = sorted({0, 100, 500, current.delay_us})
        return {
            "kind": "KIND_GPU" if gpus else "KIND_CPU",
            "counts": f"1:{max(2, current.count + 1)}",
            "max_batch_sizes": _join(sorted({current.max_batch_size}))
            if current.max_batch_size
            else "",
            "batching_off": True,
            "batching_on": True,
            "delays": _join(delays),
            "preferred": "none",
        }

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if self.errors:
            return data
        try:
            space = Space(
                counts=parse_ints(data["counts"], "instance counts"),
                kind=data["kind"],
                max_batch_sizes=parse_ints(data.get("max_batch_sizes") or "", "max_batch_size"),
                batching_off=data["batching_off"],
                batching_on=data["batching_on"],
                delays_us=parse_ints(data.get("delays") or "", "delays"),
                preferred=parse_preferred(data.get("preferred") or ""),
            )
            start, end, step = _range(data["concurrency_range"], "concurrency")
        except (SpaceError, forms.ValidationError) as exc:
            self.add_error(None, exc.messages[0] if hasattr(exc, "messages") else str(exc))
            return data
        pct = data["percentile"]
        request = runner.SearchRequest(
            model=self.model,
            space=space,
            measure=SweepParams(
                model=self.model,
                start=start,
                end=end,
                step=step,
                measurement_window_ms=data["measurement_interval"],
                max_windows=data["max_trials"],
                stability_percentage=data["stability_percentage"],
            ),
            constraints=Constraints(
                latency_budget_ms=data.get("latency_budget"),
                percentile=pct if pct == "avg" else int(pct),
                min_throughput=data.get("min_throughput"),
                gpu_memory_limit_mb=data.get("gpu_memory_limit"),
            ),
            objective=data["objective"],
            mode=data["mode"],
            max_runs=data.get("max_runs"),
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
