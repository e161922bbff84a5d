"""The Benchmark form: perf_analyzer's flags as fields, checked before anything is queued."""

from __future__ import annotations

import re
from typing import Any

from django import forms

from . import sweeps
from .engine.inputs import InputError, load_input_data, parse_input_json, shape_elements
from .models import Sweep
from .params import (
    DEFAULT_MAX_THREADS,
    MAX_ROUNDS,
    MAX_THREADS_LIMIT,
    MAX_WINDOW_MS,
    SweepError,
    SweepParams,
    check_range,
    parse_range,
)

PERCENTILES = [("95", "p95"), ("50", "p50"), ("90", "p90"), ("99", "p99"), ("avg", "average")]
INPUT_DATA = [("random", "random"), ("zeros", "zeros"), ("json", "JSON file (below)")]
MAX_INPUT_DATA_BYTES = 8 * 1024 * 1024  # stored with the sweep, so a re-run has the same data
MAX_NOTE_CHARS = 4000


def input_data_document(raw: bytes) -> dict[str, Any]:
    """A perf_analyzer --input-data JSON document from a file's bytes; ValidationError says
    what is wrong (size, encoding, the JSON's line and column, or its layout)."""
    if len(raw) > MAX_INPUT_DATA_BYTES:
        raise forms.ValidationError(
            f"The input data file is {len(raw):,} bytes; at most {MAX_INPUT_DATA_BYTES:,}."
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise forms.ValidationError(
            f"The input data file is not UTF-8 text (byte {exc.start})."
        ) from None
    try:
        document = parse_input_json(text)
        load_input_data(document if isinstance(document, dict) else {})
    except InputError as exc:
        raise forms.ValidationError(str(exc)) from None
    return document


def parse_shapes(text: str) -> dict[str, list[int]]:
    """'INPUT0:16 INPUT1:4,4' (perf_analyzer's --shape NAME:d1,d2, several separated by
    spaces, commas between dims) -> {"INPUT0": [16], "INPUT1": [4, 4]}."""
    shapes: dict[str, list[int]] = {}
    for item in re.split(r"[\s;]+", text.strip()):
        if not item:
            continue
        name, sep, dims = item.rpartition(":")
        if not sep or not name or not dims:
            raise forms.ValidationError(f"{item!r} is not NAME:d1,d2")
        try:
            values = [int(d) for d in dims.split(",")]
        except ValueError:
            raise forms.ValidationError(f"{item!r}: dimensions must be whole numbers") from None
        if any(v <= 0 for v in values):
            raise forms.ValidationError(f"{item!r}: dimensions must be positive")
        try:
            shape_elements(values, f"input {name}")
        except InputError as exc:
            raise forms.ValidationError(str(exc)) from None
        shapes[name] = values
    return shapes


def _sentence(message: str) -> str:
    return message[:1].upper() + message[1:] + "."


def _range(text: str, mode: str) -> tuple[float, float, float]:
    """A range field of `mode` ("concurrency" or "request_rate"), with every bound of
    `check_range` (levels counted, never listed, before the cap)."""
    what = "request-rate" if mode == "request_rate" else "concurrency"
    text = text.strip()
    if not text:
        raise forms.ValidationError(f"Enter a {what} range as start:end:step, e.g. 1:8:1.")
    try:
        start, end, step = parse_range(text)
        check_range(mode, start, end, step)
    except SweepError as exc:
        raise forms.ValidationError(_sentence(str(exc))) from None
    return start, end, step


class SweepLabelForm(forms.Form):
    """A sweep's name and note, set after the fact."""

    name = forms.CharField(required=False, max_length=120)
    note = forms.CharField(required=False, max_length=MAX_NOTE_CHARS)

    def clean_name(self) -> str:
        return (self.cleaned_data.get("name") or "").strip()

    def clean_note(self) -> str:
        return (self.cleaned_data.get("note") or "").strip()


class SweepForm(forms.Form):
    mode = forms.ChoiceField(
        choices=[("concurrency", "concurrency range"), ("request_rate", "request-rate range")],
        initial="concurrency",
    )
    concurrency_range = forms.CharField(
        required=False, initial="1:8:1", label="--concurrency-range"
    )
    request_rate_range = forms.CharField(
        required=False, label="--request-rate-range", help_text="requests/s, e.g. 100:500:100"
    )
    request_distribution = forms.ChoiceField(
        choices=[("constant", "constant"), ("poisson", "poisson")],
        initial="constant",
        required=False,
        label="--request-distribution",
        help_text="request-rate mode: arrivals at fixed gaps or Poisson",
    )
    max_threads = forms.IntegerField(
        initial=DEFAULT_MAX_THREADS,
        required=False,
        label="--max-threads",
        help_text="request-rate mode: most requests outstanding at once",
    )
    percentile = forms.ChoiceField(choices=PERCENTILES, initial="95", label="--percentile")
    measurement_interval = forms.IntegerField(initial=2000, label="--measurement-interval (ms)")
    stability_percentage = forms.FloatField(initial=10, label="--stability-percentage")
    max_trials = forms.IntegerField(initial=10, label="--max-trials (max windows per level)")
    batch_size = forms.IntegerField(initial=1, label="-b (batch size)")
    latency_threshold = forms.FloatField(
        required=False, label="--latency-threshold (ms)", help_text="also the latency budget"
    )
    rounds = forms.IntegerField(
        initial=1,
        required=False,
        label="Rounds",
        help_text="measure every level this many times, one round over all levels after "
        "another; the levels show the median and the spread, and Compare tells a real "
        "difference from noise (2 or more)",
    )
    shape = forms.CharField(
        required=False, label="--shape", help_text="NAME:d1,d2 for variable dims, space-separated"
    )
    input_data = forms.ChoiceField(
        choices=INPUT_DATA,
        initial="random",
        label="--input-data",
        help_text="random: random bytes, as perf_analyzer's (floats may be NaN or inf)",
    )
    input_data_file = forms.FileField(
        required=False,
        label="--input-data file",
        help_text='perf_analyzer\'s JSON: {"data": [{"INPUT0": [...]}, ...]}',
    )
    engine = forms.ChoiceField(choices=Sweep.Engine.choices, initial=Sweep.Engine.BUILTIN)
    protocol = forms.ChoiceField(
        choices=[("grpc", "gRPC"), ("http", "HTTP")], initial="grpc", label="-i (protocol)"
    )
    version = forms.CharField(required=False, max_length=32, label="-x (version)")
    name = forms.CharField(
        required=False,
        max_length=120,
        label="Name",
        help_text="optional, e.g. after the fp16 change",
    )
    note = forms.CharField(
        required=False,
        max_length=MAX_NOTE_CHARS,
        label="Note",
        widget=forms.Textarea(attrs={"rows": 2, "cols": 60}),
    )

    def __init__(self, *args: Any, model: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.model = model
        self.params: SweepParams | None = None

    @property
    def create_kwargs(self) -> dict[str, Any]:
        """What `sweeps.create_sweep` takes from the form besides the parameters."""
        data = self.cleaned_data
        return {
            "engine": data["engine"],
            "name": (data.get("name") or "").strip(),
            "note": (data.get("note") or "").strip(),
        }

    @classmethod
    def preset_initial(cls, preset: str) -> dict[str, Any]:
        values = sweeps.PRESETS.get(preset)
        if values is None:
            return {}
        return {
            "concurrency_range": values["range"],
            "measurement_interval": values["measurement_interval"],
            "max_trials": values["max_trials"],
        }

    def clean_measurement_interval(self) -> int:
        value = self.cleaned_data["measurement_interval"]
        if value <= 0:
            raise forms.ValidationError("The measurement window must be a positive number of ms.")
        if value < 50:
            raise forms.ValidationError("The measurement window must be at least 50 ms.")
        if value > MAX_WINDOW_MS:
            raise forms.ValidationError(
                f"The measurement window can be at most {MAX_WINDOW_MS} ms."
            )
        return value

    def clean_stability_percentage(self) -> float:
        value = self.cleaned_data["stability_percentage"]
        if value <= 0 or value > 1000:
            raise forms.ValidationError("The stability percentage must be above 0 (e.g. 10).")
        return value

    def clean_max_trials(self) -> int:
        value = self.cleaned_data["max_trials"]
        if value < 3 or value > 1000:
            raise forms.ValidationError(
                "Max windows must be between 3 and 1000 (3 decide stability)."
            )
        return value

    def clean_batch_size(self) -> int:
        value = self.cleaned_data["batch_size"]
        if value < 1:
            raise forms.ValidationError("The batch size must be at least 1.")
        return value

    def clean_latency_threshold(self) -> float | None:
        value = self.cleaned_data.get("latency_threshold")
        if value is not None and value <= 0:
            raise forms.ValidationError("The latency threshold must be above 0 ms (or empty).")
        return value

    def clean_shape(self) -> dict[str, list[int]]:
        return parse_shapes(self.cleaned_data.get("shape") or "")

    def clean_rounds(self) -> int:
        value = self.cleaned_data.get("rounds")
        if value is None:
            return 1
        if not 1 <= value <= MAX_ROUNDS:
            raise forms.ValidationError(f"Rounds must be between 1 and {MAX_ROUNDS}.")
        return value

    def clean_max_threads(self) -> int:
        value = self.cleaned_data.get("max_threads")
        if value is None:
            return DEFAULT_MAX_THREADS
        if not 1 <= value <= MAX_THREADS_LIMIT:
            raise forms.ValidationError(f"Max threads must be between 1 and {MAX_THREADS_LIMIT}.")
        return value

    def _input_data(self, data: dict[str, Any]) -> str | dict[str, Any] | None:
        """ "random", "zeros" or the JSON document; None after adding the error."""
        if data["input_data"] != "json":
            return data["input_data"]
        upload = data.get("input_data_file")
        if upload is None:
            self.add_error(
                "input_data_file", "Choose a JSON file in perf_analyzer's --input-data format."
            )
            return None
        try:
            return input_data_document(upload.read())
        except forms.ValidationError as exc:
            self.add_error("input_data_file", exc)
            return None

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        mode = data.get("mode", "concurrency")
        field = "concurrency_range" if mode == "concurrency" else "request_rate_range"
        try:
            start, end, step = _range(data.get(field) or "", mode)
        except forms.ValidationError as exc:
            self.add_error(field, exc)
            return data
        if self.errors:
            return data
        input_data = self._input_data(data)
        if input_data is None:
            return data
        percentile = data["percentile"]
        params = SweepParams(
            model=self.model,
            version=data.get("version", "").strip(),
            protocol=data["protocol"],
            mode=mode,
            start=start,
            end=end,
            step=step,
            batch_size=data["batch_size"],
            shapes=data["shape"],
            input_data=input_data,
            percentile=percentile if percentile == "avg" else int(percentile),
            measurement_window_ms=data["measurement_interval"],
            stability_percentage=data["stability_percentage"],
            max_windows=data["max_trials"],
            latency_threshold_ms=data.get("latency_threshold"),
            arrival=data.get("request_distribution") or "constant",
            max_threads=data["max_threads"],
            rounds=data["rounds"],
        )
        try:
            sweeps.preflight(params, data["engine"])
        except SweepError as exc:
            message = str(exc)
            target = None
            if message.startswith("inputs:"):
                if data["input_data"] == "json":
                    target = "input_data_file"
                elif "shape" in message:
                    target = "shape"
            self.add_error(target, message)
            return data
        self.params = params
        return data
