"""The Benchmark form: perf_analyzer's flags as fields, checked (`params.from_flags`) before
anything is queued; the view starts the sweep (`sweeps.start_sweep`: the preflight on
Triton) and puts its refusals back on the fields (`add_refusal`)."""

from __future__ import annotations

from typing import Any

from django import forms

from . import kind_presets
from .engine.inputs import InputError, parse_input_json
from .engine.perf_analyzer_command import PerfAnalyzerNotFound, locate_perf_analyzer
from .model_kind import ModelKind
from .models import Sweep
from .param_bounds import DEFAULT_MAX_THREADS, MAX_INPUT_DATA_BYTES, MAX_LOAD_HOSTS
from .params import (
    DEFAULTS,
    SEQUENCE_FLAGS,
    ParamsError,
    SweepParams,
    from_flags,
)

PERCENTILES = [("95", "p95"), ("50", "p50"), ("90", "p90"), ("99", "p99"), ("avg", "average")]
INPUT_DATA = [
    ("random", "random"),
    ("zeros", "zeros"),
    ("json", "JSON file (below)"),
    ("text", "JSON text (below)"),
]
MAX_NOTE_CHARS = 4000
# The form's fields that are perf_analyzer's flags, handed to `from_flags` by these names.
FLAGS = (
    "mode", "concurrency_range", "request_rate_range", "request_distribution", "max_threads",
    "percentile", "measurement_interval", "stability_percentage", "max_trials", "batch_size",
    "latency_threshold", "rounds", "shape", "input_data", "protocol", "version",
    "streaming", "sequence_length", "sequence_length_variation", "sequence_id_range",
    "num_of_sequences",
    "goodput", "token_output", "load_hosts", "trace_sample",
)  # fmt: skip


def input_data_text(text: str) -> Any:
    """The JSON of a perf_analyzer --input-data document typed (or filled in from an LLM
    preset) in the form; ValidationError with the JSON's line and column."""
    if len(text.encode()) > MAX_INPUT_DATA_BYTES:
        raise forms.ValidationError(f"The input data is over {MAX_INPUT_DATA_BYTES:,} bytes.")
    if not text.strip():
        raise forms.ValidationError(
            'Enter a JSON document in perf_analyzer\'s --input-data format: {"data": [...]}.'
        )
    try:
        return parse_input_json(text)
    except InputError as exc:
        raise forms.ValidationError(str(exc)) from None


def input_data_document(raw: bytes) -> Any:
    """The JSON of a perf_analyzer --input-data file from its bytes; ValidationError says
    what is wrong (size, encoding, the JSON's line and column). Its layout is a flag's
    check (`params.from_flags`)."""
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
        return parse_input_json(text)
    except InputError as exc:
        raise forms.ValidationError(str(exc)) from None


# perf_analyzer's flags of the model kinds, as the Benchmark form and the config search's
# form both offer them: declared once (each call makes the field, in its form's order).
def sequence_fields() -> tuple[forms.IntegerField, forms.FloatField, forms.CharField]:
    return (
        forms.IntegerField(
            required=False,
            initial=DEFAULTS["sequence_length"],
            label="--sequence-length",
            help_text="requests per sequence (perf_analyzer's default 20)",
        ),
        forms.FloatField(
            required=False,
            initial=DEFAULTS["sequence_length_variation"],
            label="--sequence-length-variation (%)",
            help_text="lengths vary by up to this much either way (default 20)",
        ),
        forms.CharField(
            required=False,
            label="--sequence-id-range",
            help_text="START:END (END excluded); empty: from 1, unbounded",
        ),
    )


def token_output_field(empty_means: str) -> forms.CharField:
    return forms.CharField(
        required=False,
        max_length=128,
        label="--token-output",
        help_text="the output whose elements per response are tokens; empty: one response is "
        f"one token {empty_means}",
    )


def goodput_field(example: str) -> forms.CharField:
    return forms.CharField(
        required=False,
        max_length=400,
        label="--goodput (ms)",
        help_text=f"AIPerf's objectives, e.g. {example}",
    )


class SweepLabelForm(forms.Form):
    """A sweep's name and note, set after the fact."""

    name = forms.CharField(required=False, max_length=120)
    note = forms.CharField(required=False, max_length=MAX_NOTE_CHARS)

    def clean_name(self) -> str:
        return (self.cleaned_data.get("name") or "").strip()

    def clean_note(self) -> str:
        return (self.cleaned_data.get("note") or "").strip()


class EngineSelect(forms.Select):
    """The engines, those in ``unavailable`` shown disabled (their label says why)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.unavailable: set[str] = set()

    def create_option(self, name: str, value: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        option = super().create_option(name, value, *args, **kwargs)
        if value in self.unavailable:
            option["attrs"]["disabled"] = True
        return option


class SweepForm(forms.Form):
    initial: dict[str, Any]  # BaseForm's, typed for mypy (`_offer_engines` replaces it)
    # The fields of one mode: the page shows (and sends) those of the chosen mode only;
    # `from_flags` checks whatever arrives all the same.
    MODE_FIELDS = {
        "concurrency": ("concurrency_range",),
        "request_rate": (
            "request_rate_range", "request_distribution", "max_threads", "num_of_sequences",
        ),
    }  # fmt: skip
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
    input_data_text = forms.CharField(
        required=False,
        strip=False,
        label="--input-data JSON",
        widget=forms.Textarea(attrs={"rows": 8, "cols": 72, "spellcheck": "false"}),
        help_text="with JSON text above: the document itself, e.g. from an LLM preset",
    )
    engine = forms.ChoiceField(
        choices=Sweep.Engine.choices, initial=Sweep.Engine.BUILTIN, widget=EngineSelect
    )
    load_hosts = forms.IntegerField(
        initial=1,
        required=False,
        label="Load hosts",
        help_text="built-in engine: spread each level's load over this many workers of the "
        f"queue, one per host (this sweep's and N - 1 more; at most {MAX_LOAD_HOSTS}), their "
        "windows merged exactly; for a server one client host cannot saturate",
    )
    trace_sample = forms.IntegerField(
        initial=0,
        required=False,
        min_value=0,
        label="Trace per level",
        help_text="Triton traces the first N requests of each level (its trace API); the "
        "page shows where a request spends its time at each level (0: none)",
    )
    protocol = forms.ChoiceField(
        choices=[("grpc", "gRPC"), ("http", "HTTP")], initial="grpc", label="-i (protocol)"
    )
    version = forms.CharField(required=False, max_length=32, label="-x (version)")
    # Decoupled models only (the others lose the field: `_fit_kind`).
    streaming = forms.BooleanField(
        required=False,
        label="--streaming",
        help_text="gRPC bidirectional streaming: every response of a request, up to its final one",
    )
    # Sequence models only.
    sequence_length, sequence_length_variation, sequence_id_range = sequence_fields()
    num_of_sequences = forms.IntegerField(
        required=False,
        initial=DEFAULTS["num_of_sequences"],
        label="--num-of-sequences",
        help_text="request-rate mode: sequences live at once, the arrivals spread over them "
        "(default 4)",
    )
    # Decoupled (LLM-style) models only.
    token_output = token_output_field("(TensorRT-LLM, vLLM)")
    goodput = goodput_field(
        "time_to_first_token:200 inter_token_latency:30 request_latency:500 "
        "(first_response, inter_response too); built-in engine"
    )
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

    def __init__(
        self,
        *args: Any,
        model: str,
        kind: ModelKind | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.model = model
        self.kind = kind
        self.params: SweepParams | None = None  # the flags, read and checked (`clean`)
        self._input_source = ""  # where the input data came from: "json", "text" or ""
        self._fit_kind()
        self.perf_analyzer_missing = self._offer_engines()

    def _fit_kind(self) -> None:
        """Only the flags that fit the model's kind (all of them when it is not known: the
        preflight's kind check then says what does not fit)."""
        if self.kind is None:
            return
        if not self.kind.decoupled:
            del self.fields["streaming"]
            del self.fields["token_output"]
        if not self.kind.sequence:
            for name in SEQUENCE_FLAGS:
                del self.fields[name]

    def _offer_engines(self) -> str:
        """perf_analyzer is offered only where its binary is (`locate_perf_analyzer`, as the
        sweep runs it): otherwise it is shown disabled with the reason, and refused on this
        field if sent anyway. Returns the reason ("" when it is there)."""
        try:
            locate_perf_analyzer()
            return ""
        except PerfAnalyzerNotFound as exc:
            missing = str(exc)
        field = self.fields["engine"]
        absent = str(Sweep.Engine.PERF_ANALYZER)
        field.choices = [
            (value, f"{label} (not installed)" if value == absent else label)
            for value, label in Sweep.Engine.choices
        ]
        field.widget.unavailable = {absent}
        field.help_text = missing
        if self.initial.get("engine") == absent:  # a preset's: a disabled option is not sent
            self.initial = {**self.initial, "engine": Sweep.Engine.BUILTIN}
        return missing

    def clean_engine(self) -> str:
        engine = str(self.cleaned_data["engine"])
        if engine == Sweep.Engine.PERF_ANALYZER and self.perf_analyzer_missing:
            raise forms.ValidationError(self.perf_analyzer_missing)
        return engine

    @property
    def start_kwargs(self) -> dict[str, Any]:
        """What `sweeps.start_sweep` takes from the form besides the parameters."""
        data = self.cleaned_data
        return {
            "engine": data["engine"],
            "name": (data.get("name") or "").strip(),
            "note": (data.get("note") or "").strip(),
        }

    @classmethod
    def preset_initial(cls, preset: str, kind: ModelKind | None = None) -> dict[str, Any]:
        """The form's initial values for a preset of the model's kind
        (`kind_presets.presets_for`); {} for an unknown preset."""
        values = kind_presets.presets_for(kind).get(preset)
        if values is None:
            return {}
        initial = {k: v for k, v in values.items() if k != "range"}
        return {"concurrency_range": values["range"], **initial}

    def _input_document(self, data: dict[str, Any]) -> Any:
        """The JSON of the uploaded --input-data file; None after adding the error."""
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

    def _input_text(self, data: dict[str, Any]) -> Any:
        """The JSON typed in the --input-data JSON field; None after adding the error."""
        try:
            return input_data_text(data.get("input_data_text") or "")
        except forms.ValidationError as exc:
            self.add_error("input_data_text", exc)
            return None

    def add_refusal(self, exc: ParamsError) -> None:
        """Each refused flag's message on its field; the input data's on the file or the
        text it came from."""
        fields = {"json": "input_data_file", "text": "input_data_text"}
        for flag, message in exc.errors.items():
            name = fields.get(self._input_source, flag) if flag == "input_data" else flag
            self.add_error(name if name in self.fields else None, message)

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        # A field that did not parse is left out: its own error says why.
        flags = {name: data[name] for name in FLAGS if name in data}
        source = data.get("input_data") if data.get("input_data") in ("json", "text") else ""
        self._input_source = source
        if source == "json":
            flags["input_data"] = self._input_document(data)
        elif source == "text":
            flags["input_data"] = self._input_text(data)
        try:
            params = from_flags({**flags, "model": self.model})
        except ParamsError as exc:
            self.add_refusal(exc)
            return data
        if not self.errors:
            self.params = params
        return data
