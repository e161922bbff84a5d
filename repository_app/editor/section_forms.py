"""The editor's tables for the rest of ModelConfig: sequence batching's control inputs and
states, ensemble steps and their tensor maps, warmup samples and their inputs, rate-limiter
resources, CUDA graph specs, execution accelerators and their parameters, model_metrics and
the string maps (cc_model_filenames, metric_tags). The sections' single-valued fields are
``section_mixins``.

Each table is a formset of row forms. A table whose rows belong to a row of another table
(a rate-limiter resource to an instance group, a warmup input to a warmup sample, a tensor
map entry to an ensemble step, a parameter to an execution accelerator) has a ``parent``
column: the row number in the parent table (``ChildForm``).

Help follows the wording of Triton's model configuration documentation
(model_configuration.md, ensemble_models.md, rate_limiter.md, optimization.md and the
comments of model_config.proto).
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from tritonclient.grpc import model_config_pb2 as pb

from ..modelconfig.model_rules import CUSTOMIZABLE_METRIC_FAMILIES
from .fields import (
    INT32,
    INT64,
    UINT32,
    FloatListField,
    IntListField,
    ProtoIntField,
    ShapesField,
    float32_shortest,
    float32_text,
)

DATA_TYPES = [(n, n) for n, _ in pb.DataType.items() if n != "TYPE_INVALID"]
CONTROL_KINDS = [(n, n) for n, _ in pb.ModelSequenceBatching.Control.Kind.items()]
FALSE_TRUE_KINDS = [
    ("", "—"),
    ("int32_false_true", "int32_false_true"),
    ("fp32_false_true", "fp32_false_true"),
    ("bool_false_true", "bool_false_true"),
]
# Names the backends know (ORT: tensorrt, cuda, openvino; TensorFlow: tensorrt,
# auto_mixed_precision, gpu_io); any other name may be typed.
ACCELERATOR_NAMES = ["tensorrt", "cuda", "openvino", "auto_mixed_precision", "gpu_io"]
# Parameters of the ONNX Runtime backend's TensorRT and CUDA providers and of TensorFlow's
# TF-TRT (the ones the backends' READMEs list); offered as suggestions, never enforced.
ACCELERATOR_KEYS = [
    "precision_mode",
    "max_workspace_size_bytes",
    "max_cached_engines",
    "minimum_segment_size",
    "trt_engine_cache_enable",
    "trt_engine_cache_path",
    "trt_timing_cache_enable",
    "trt_timing_cache_path",
    "trt_build_heuristics_enable",
    "trt_sparsity_enable",
    "trt_builder_optimization_level",
    "trt_max_partition_iterations",
    "trt_min_subgraph_size",
    "cudnn_conv_algo_search",
    "cudnn_conv_use_max_workspace",
    "gpu_mem_limit",
    "arena_extend_strategy",
    "do_copy_in_default_stream",
]
METRIC_FAMILIES = sorted(CUSTOMIZABLE_METRIC_FAMILIES)


def parse_false_true(kind: str, text: str) -> list[Any]:
    """The values of a control's false/true list, typed by ``kind`` (how many is the
    validator's business: it says "must have exactly 2 entries")."""
    inner = (text or "").strip().removeprefix("[").removesuffix("]").strip()
    if not inner:
        return []
    values: list[Any] = []
    for part in inner.split(","):
        part = part.strip()
        if kind == "bool_false_true":
            if part.lower() not in ("true", "false", "1", "0"):
                raise ValidationError(f"'{part}' is not true or false")
            values.append(part.lower() in ("true", "1"))
        elif kind == "fp32_false_true":
            try:
                values.append(float32_shortest(float(part)))
            except ValueError:
                raise ValidationError(f"'{part}' is not a number") from None
        else:
            try:
                number = int(part)
            except ValueError:
                raise ValidationError(f"'{part}' is not a whole number") from None
            if not INT32[0] <= number <= INT32[1]:
                raise ValidationError(f"{number} does not fit in an int32")
            values.append(number)
    return values


def false_true_text(kind: str, values: list[Any]) -> str:
    if kind == "bool_false_true":
        return ", ".join("true" if v else "false" for v in values)
    if kind == "fp32_false_true":
        return ", ".join(float32_text(v) for v in values)
    return ", ".join(str(v) for v in values)


# --- tables --------------------------------------------------------------------------------


class RowForm(forms.Form):
    """A table row; ``datalists`` names the <datalist> each text field suggests from."""

    datalists: dict[str, str] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name, list_id in self.datalists.items():
            self.fields[name].widget.attrs["list"] = list_id


class ChildForm(RowForm):
    """A row that belongs to a row of another table (``parent``: that row's number)."""

    parent = forms.TypedChoiceField(coerce=int, choices=[], required=False, empty_value=None)

    def __init__(
        self,
        *args: Any,
        parent_choices: list[tuple[int, str]] | None = None,
        parent_label: str = "Row",
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        choices = parent_choices or []
        parent = self.fields["parent"]
        parent.choices = choices  # type: ignore[attr-defined]
        parent.label = parent_label
        parent.help_text = f"The row of the {parent_label} table this belongs to."
        if choices:
            parent.initial = choices[0][0]
        parent.widget.attrs["data-parent-select"] = "1"


class ControlInputForm(RowForm):
    datalists = {"name": "model-inputs"}

    name = forms.CharField(
        required=False,
        help_text="The model input through which the sequence batcher sends this control.",
    )
    kind = forms.ChoiceField(
        required=False,
        # "—": a control input written without a control (a new row presets START).
        choices=[("", "—")] + CONTROL_KINDS,
        initial="CONTROL_SEQUENCE_START",
        help_text="START: true on the first request of a sequence. END: true on the last. "
        "READY: true when the batch slot holds a request, false when its input data is "
        "invalid and must be skipped. CORRID: the sequence's correlation ID.",
    )
    false_true_kind = forms.ChoiceField(
        label="Values as",
        required=False,
        choices=FALSE_TRUE_KINDS,
        help_text="START, END and READY are sent as a 1-dimensional tensor of the batch size "
        "holding a false or a true value: int32_false_true, fp32_false_true or "
        "bool_false_true says its type. CORRID takes a data type instead.",
    )
    false_true = forms.CharField(
        label="False, true",
        required=False,
        help_text="The false value, then the true value, e.g. 0, 1 (or false, true).",
    )
    data_type = forms.ChoiceField(
        required=False,
        choices=[("", "—")] + DATA_TYPES,
        help_text="For CORRID: TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 (32-bit types "
        "get the ID's low 32 bits) or TYPE_STRING.",
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        try:
            data["false_true_values"] = parse_false_true(
                data.get("false_true_kind") or "int32_false_true", data.get("false_true") or ""
            )
        except ValidationError as exc:
            self.add_error("false_true", exc)
        return data


class StateForm(RowForm):
    datalists = {"input_name": "model-inputs", "output_name": "model-outputs"}

    input_name = forms.CharField(
        required=False,
        help_text="The model input that receives the state: the output state of the previous "
        "request of the sequence.",
    )
    output_name = forms.CharField(
        required=False, help_text="The model output that holds the state for the next request."
    )
    data_type = forms.ChoiceField(
        required=False, choices=[("", "—")] + DATA_TYPES, help_text="The state's data type."
    )
    dims = IntListField(
        help_text="The state's shape, comma-separated; with variable-size (-1) dimensions the "
        "input and output state need not have the same shape.",
    )
    use_same_buffer_for_input_output = forms.BooleanField(
        label="One buffer",
        required=False,
        help_text="Use a single buffer for the input and the output state (less memory for "
        "large states; right when the model reads the input state before writing the output).",
    )
    use_growable_memory = forms.BooleanField(
        label="Growable",
        required=False,
        help_text="Let the state buffer grow without copying (CUDA memory only; needs one buffer).",
    )
    initial_state = forms.ChoiceField(
        label="Initial state",
        required=False,
        choices=[("", "(not set)"), ("zero_data", "zero_data"), ("data_file", "data_file")],
        help_text="What the first request of a sequence gets as input state. Not set: "
        "undefined data. zero_data: zeros. data_file: a file in the model's initial_state/ "
        "folder, row-major.",
    )
    initial_data_file = forms.CharField(
        label="Initial data file",
        required=False,
        help_text="The file under <model>/initial_state/ (for data_file).",
    )


class StepForm(RowForm):
    datalists = {"model_name": "repository-models"}

    model_name = forms.CharField(
        required=False,
        help_text="The model this step runs. Its inputs and outputs are offered in the tensor "
        "maps below.",
    )
    model_version = ProtoIntField(
        INT64,
        non_negative=False,
        initial=-1,
        help_text="The version to run; -1 (or empty) runs the latest version.",
    )


class StepMapForm(ChildForm):
    datalists = {"value": "ensemble-tensors"}

    direction = forms.ChoiceField(
        label="Map",
        required=False,
        choices=[("input", "input_map"), ("output", "output_map")],
        initial="input",
        help_text="input_map: which ensemble tensor feeds a model input (every input of the "
        "step model must be mapped). output_map: which ensemble tensor a model output becomes "
        "(optional; each ensemble tensor may be written by only one output).",
    )
    key = forms.CharField(
        label="Model tensor",
        required=False,
        help_text="The name of the input or output in the step model's config.",
    )
    value = forms.CharField(
        label="Ensemble tensor",
        required=False,
        help_text="The ensemble tensor: an input or output of the ensemble, or an "
        "intermediate tensor passed between steps. An input's ensemble tensor must have the "
        "model input's data type and shape.",
    )


class WarmupForm(RowForm):
    name = forms.CharField(required=False, help_text="The name of this warmup sample.")
    batch_size = ProtoIntField(
        UINT32,
        help_text="The batch size of the warmup request: >= 1, and 1 for models that do not batch.",
    )
    count = ProtoIntField(
        UINT32,
        help_text="How many times the sample is run. 0 (the default): once. For sequence "
        "models more than 1 may break the sequence.",
    )


class WarmupInputForm(ChildForm):
    datalists = {"key": "model-inputs"}

    key = forms.CharField(
        label="Input",
        required=False,
        help_text="The model input (control inputs included) this data is for.",
    )
    data_type = forms.ChoiceField(
        required=False, choices=[("", "—")] + DATA_TYPES, help_text="The input's data type."
    )
    dims = IntListField(help_text="The input's shape without the batch dimension.")
    data = forms.ChoiceField(
        label="Data",
        required=False,
        choices=[
            ("", "—"),
            ("zero_data", "zero_data"),
            ("random_data", "random_data"),
            ("input_data_file", "input_data_file"),
        ],
        help_text="zero_data: zeros; random_data: random values (zeros for TYPE_STRING); "
        "input_data_file: raw row-major bytes from a file in the model's warmup/ folder.",
    )
    input_data_file = forms.CharField(
        label="Data file",
        required=False,
        help_text="The file under <model>/warmup/ (for input_data_file). TYPE_STRING elements "
        "are a 4-byte length followed by the bytes.",
    )


class ResourceForm(ChildForm):
    name = forms.CharField(
        required=False,
        help_text="The resource's name. An instance runs only when the listed resources are "
        "free on its device; by default Triton makes as many copies of a resource as the "
        "largest count any instance asks for (--rate-limit-resource overrides it).",
    )
    global_ = forms.BooleanField(
        label="Global",
        required=False,
        help_text="One copy for the whole system instead of one per device.",
    )
    count = ProtoIntField(
        UINT32,
        help_text="How many copies of the resource one execution of the instance holds.",
    )


class GraphSpecForm(RowForm):
    batch_size = ProtoIntField(
        INT32,
        help_text="The batch size of the CUDA graph: 0 when max_batch_size is 0, else between "
        "1 and max_batch_size.",
    )
    input = ShapesField(
        label="Input shapes",
        help_text="The shape of each input without the batch dimension, e.g. INPUT0: 16, 16; "
        "INPUT1: 8. A lower bound (graph_lower_bound) is edited in text mode.",
    )


class AcceleratorForm(RowForm):
    datalists = {"name": "accelerator-names"}

    where = forms.ChoiceField(
        label="Used on",
        required=False,
        choices=[("gpu", "GPU instances"), ("cpu", "CPU instances")],
        initial="gpu",
        help_text="gpu_execution_accelerator applies to instances on a GPU, "
        "cpu_execution_accelerator to instances on the CPU. ONNX Runtime tries them in the "
        "listed order, then CUDA (on GPU), then its default CPU provider.",
    )
    name = forms.CharField(
        required=False,
        help_text="ONNX Runtime: tensorrt or cuda on GPU, openvino on CPU. TensorFlow: "
        "tensorrt, auto_mixed_precision, gpu_io.",
    )


class AcceleratorParamForm(ChildForm):
    datalists = {"key": "accelerator-keys"}

    key = forms.CharField(
        required=False,
        help_text="e.g. precision_mode (FP32, FP16), max_workspace_size_bytes, "
        "trt_engine_cache_enable, trt_engine_cache_path. Parameters naming a path are code "
        "loading: only admins may change them.",
    )
    value = forms.CharField(required=False)


class MetricControlForm(RowForm):
    datalists = {"family": "metric-families"}

    family = forms.CharField(
        label="Metric family",
        required=False,
        help_text="The histogram metric family to customise; Triton core's customizable "
        "histogram is nv_inference_first_response_histogram_ms (Triton 2.52 and newer).",
    )
    buckets = FloatListField(
        label="Histogram buckets",
        help_text="Bucket boundaries in ascending order, e.g. 1, 10, 100: each bucket counts "
        "values less than or equal to it; the range above the largest is added implicitly.",
    )


class StringMapForm(RowForm):
    key = forms.CharField(required=False)
    value = forms.CharField(required=False)


def table(form: type[forms.Form]) -> Any:
    # No blank row: "Add row" (static/js/editor.js) adds one.
    return forms.formset_factory(form, extra=0, can_delete=True)


ControlInputFormSet = table(ControlInputForm)
StateFormSet = table(StateForm)
StepFormSet = table(StepForm)
StepMapFormSet = table(StepMapForm)
WarmupFormSet = table(WarmupForm)
WarmupInputFormSet = table(WarmupInputForm)
ResourceFormSet = table(ResourceForm)
GraphSpecFormSet = table(GraphSpecForm)
AcceleratorFormSet = table(AcceleratorForm)
AcceleratorParamFormSet = table(AcceleratorParamForm)
MetricControlFormSet = table(MetricControlForm)
StringMapFormSet = table(StringMapForm)
