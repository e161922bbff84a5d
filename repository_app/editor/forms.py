"""Django forms for the config editor's form mode (one form plus four formsets).

Field help follows the wording of Triton's model configuration documentation.
Every field is optional at the Django level: the validator decides what Triton accepts.
"""

from __future__ import annotations

from typing import Any

from django import forms
from tritonclient.grpc import model_config_pb2 as pb

from .fields import INT32, UINT32, UINT64, IntListField, ProtoIntField
from .section_mixins import (
    EnsembleFields,
    OptimizationFields,
    PolicyFields,
    SequenceBatchingFields,
)

# (platform, backend) pairs Triton knows; stored in the select as "platform|backend".
KNOWN_PAIRS: list[tuple[str, str, str]] = [
    ("", "", "(not set: Triton infers it from the model file)"),
    ("tensorrt_plan", "tensorrt", "TensorRT — platform tensorrt_plan"),
    ("onnxruntime_onnx", "onnxruntime", "ONNX Runtime — platform onnxruntime_onnx"),
    ("pytorch_libtorch", "pytorch", "PyTorch (LibTorch) — platform pytorch_libtorch"),
    (
        "tensorflow_savedmodel",
        "tensorflow",
        "TensorFlow SavedModel — platform tensorflow_savedmodel",
    ),
    ("tensorflow_graphdef", "tensorflow", "TensorFlow GraphDef — platform tensorflow_graphdef"),
    ("", "openvino", "OpenVINO — backend openvino"),
    ("", "python", "Python — backend python"),
    ("", "dali", "DALI — backend dali"),
    ("ensemble", "", "Ensemble — platform ensemble"),
]

DATA_TYPES = [(n, n) for n, _ in pb.DataType.items() if n != "TYPE_INVALID"]
KINDS = [(n, n) for n, _ in pb.ModelInstanceGroup.Kind.items()]
FORMATS = [(n, n) for n, _ in pb.ModelInput.Format.items()]
TIMEOUT_ACTIONS = [("", "(default: REJECT)")] + [
    (n, n) for n, _ in pb.ModelQueuePolicy.TimeoutAction.items()
]
VERSION_POLICIES = [
    ("", "(default: latest 1)"),
    ("latest", "latest N versions"),
    ("all", "all versions"),
    ("specific", "specific versions"),
]


def pair_value(platform: str, backend: str) -> str:
    return f"{platform}|{backend}"


def split_pair(value: str) -> tuple[str, str]:
    platform, _, backend = value.partition("|")
    return platform, backend


class ConfigForm(SequenceBatchingFields, PolicyFields, EnsembleFields, OptimizationFields):
    """The config's single-valued fields: the model, dynamic batching and the version
    policy here; sequence batching, the policies, the ensemble's limit and optimization
    from section_mixins."""

    name = forms.CharField(
        required=False,
        disabled=True,
        help_text="The model name; it must equal the model's folder name, so it cannot be edited here.",
    )
    platform_backend = forms.ChoiceField(
        label="Platform / backend",
        required=False,
        choices=[],
        help_text="The backend that executes the model. For TensorRT, ONNX Runtime, PyTorch and "
        "TensorFlow models either the platform or the backend may be given; OpenVINO, Python and "
        'DALI models set only the backend; ensembles set platform: "ensemble".',
    )
    runtime = forms.CharField(
        required=False,
        help_text="The backend's shared library or Python file that runs the model (e.g. "
        "model.py for a Python-based backend); empty: Triton's default for the backend, "
        "libtriton_<backend>.so. Triton 2.42 and newer. Changing it is code loading: only "
        "admins may.",
    )
    default_model_filename = forms.CharField(
        required=False,
        help_text="The file (or folder) Triton loads from each version folder. When empty, the "
        "backend's default is used: model.plan, model.onnx, model.pt, model.py, model.xml, "
        "model.savedmodel, model.graphdef.",
    )
    max_batch_size = ProtoIntField(
        INT32,
        help_text="The maximum batch size that the model supports for the types of batching that "
        "can be exploited by Triton. If the model's first dimension is the batch dimension and all "
        "inputs and outputs have it, set a value >= 1 and leave the batch dimension out of dims; "
        "for models that do not support batching, max_batch_size must be set to zero.",
    )
    # Dynamic batching.
    dynamic_batching = forms.BooleanField(
        label="Dynamic batching enabled",
        required=False,
        help_text="Dynamic batching allows inference requests to be combined by the server, so "
        "that a batch is created dynamically. Creating a batch of requests typically results in "
        "increased throughput. Needs max_batch_size >= 1.",
    )
    preferred_batch_size = IntListField(
        label="Preferred batch sizes",
        minimum=1,
        maximum=INT32[1],
        help_text="The batch sizes that the dynamic batcher should attempt to create. Each must "
        "be <= max_batch_size. For most models preferred_batch_size should not be specified: "
        "the batcher then creates batches as large as possible up to max_batch_size.",
    )
    max_queue_delay_microseconds = ProtoIntField(
        UINT64,
        label="Max queue delay (µs)",
        help_text="How long a request may be delayed in the scheduler to allow other requests to "
        "join the dynamic batch. 0 (the default) forms a batch from whatever is queued at once.",
    )
    preserve_ordering = forms.BooleanField(
        required=False,
        help_text="Force all responses to be returned in the same order as requests were "
        "received (may cost throughput).",
    )
    priority_levels = ProtoIntField(
        UINT64,
        help_text="The number of priority levels the dynamic batcher supports (0 = no "
        "priorities). Requests with a higher priority (lower number) are batched first.",
    )
    default_priority_level = ProtoIntField(
        UINT64,
        help_text="The priority of requests that do not set one; must be between 1 and "
        "priority_levels when priorities are used.",
    )
    timeout_action = forms.ChoiceField(
        label="Default queue policy: timeout action",
        required=False,
        choices=TIMEOUT_ACTIONS,
        help_text="What happens to a request whose queue timeout expires: REJECT it, or DELAY it "
        "(it stays queued but loses its place to requests that have not timed out).",
    )
    default_timeout_microseconds = ProtoIntField(
        UINT64,
        label="Default queue policy: timeout (µs)",
        help_text="How long a request may wait in the queue (0 = no timeout).",
    )
    allow_timeout_override = forms.BooleanField(
        label="Default queue policy: allow timeout override",
        required=False,
        help_text="Let a request set a shorter timeout than the default.",
    )
    max_queue_size = ProtoIntField(
        UINT32,
        label="Default queue policy: max queue size",
        help_text="Requests arriving when the queue holds this many are rejected (0 = unlimited).",
    )
    # Version policy.
    version_policy = forms.ChoiceField(
        required=False,
        choices=VERSION_POLICIES,
        help_text="Which versions Triton serves. All: all versions found in the model repository. "
        "Latest: only the latest 'n' versions (the numerically greatest). Specific: only the "
        "listed versions. If no version policy is specified, Latest with n=1 is used.",
    )
    latest_num_versions = ProtoIntField(
        UINT32,
        label="Latest: number of versions",
        help_text="How many of the newest versions to serve (policy latest).",
    )
    specific_versions = IntListField(
        label="Specific versions",
        minimum=0,
        help_text="The version numbers to serve, comma-separated (policy specific).",
    )
    # Not a config field: a form save edits the text in place; only when that is impossible
    # (text_edit.CannotEditInPlace) does it ask to rewrite the whole file in canonical form.
    rewrite = forms.BooleanField(
        label="Rewrite the whole file in canonical form (comments, blank lines and field "
        "order are lost)",
        required=False,
    )

    def __init__(self, *args: Any, current_pair: str = "|", **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        choices = [(pair_value(p, b), label) for p, b, label in KNOWN_PAIRS]
        if current_pair not in {value for value, _ in choices}:
            platform, backend = split_pair(current_pair)
            label = " / ".join(
                part
                for part in (
                    f"platform {platform}" if platform else "",
                    f"backend {backend}" if backend else "",
                )
                if part
            )
            choices.insert(1, (current_pair, f"{label} (as in the file)"))
        self.fields["platform_backend"].choices = choices


class TensorForm(forms.Form):
    name = forms.CharField(required=False, help_text="The tensor name the model uses.")
    data_type = forms.ChoiceField(
        required=False,
        choices=[("", "—")] + DATA_TYPES,
        help_text="The element type (TYPE_FP32, TYPE_INT64, TYPE_STRING for bytes, ...).",
    )
    dims = IntListField(
        help_text="The shape, comma-separated, without the batch dimension when max_batch_size "
        "> 0. -1 means a variable-size dimension.",
    )
    reshape = IntListField(
        none_when_blank=True,
        help_text="Only when the shape accepted by the inference API differs from the shape the "
        "framework model expects: the shape the model sees (empty = no reshape, [] = scalar).",
    )


class InputForm(TensorForm):
    format = forms.ChoiceField(
        required=False,
        choices=FORMATS,
        initial="FORMAT_NONE",
        help_text="The image layout for image inputs (FORMAT_NHWC / FORMAT_NCHW); FORMAT_NONE "
        "otherwise.",
    )
    optional = forms.BooleanField(
        required=False,
        help_text="By default all inputs are required; an optional input may be left out of a "
        "request.",
    )
    field_order = ["name", "data_type", "dims", "reshape", "format", "optional"]


class OutputForm(TensorForm):
    pass


class InstanceGroupForm(forms.Form):
    count = ProtoIntField(
        INT32,
        help_text="How many execution instances to create (per listed GPU for KIND_GPU).",
    )
    kind = forms.ChoiceField(
        required=False,
        choices=KINDS,
        initial="KIND_AUTO",
        help_text="KIND_GPU: on the listed GPUs (all when none listed); KIND_CPU: on the CPU; "
        "KIND_MODEL: the model places itself; KIND_AUTO: GPU when available, else CPU.",
    )
    gpus = IntListField(
        label="GPUs",
        minimum=0,
        maximum=INT32[1],
        help_text="GPU ids for KIND_GPU/KIND_AUTO, comma-separated (empty = all GPUs).",
    )
    rate_limiter_priority = ProtoIntField(
        UINT32,
        label="Rate-limiter priority",
        help_text="With tritonserver --rate-limit=execution_count, instances competing for "
        "resources are chosen by priority: an instance with priority 2 gets half the "
        "scheduling chances of one with priority 1. Empty: not set. The resources each "
        "instance needs are in the Rate-limiter resources table.",
    )


class ParameterForm(forms.Form):
    key = forms.CharField(required=False)
    value = forms.CharField(required=False, help_text="Passed to the backend as string_value.")


# No blank extra row (an instance group's preset KIND_AUTO looked like real data): the
# tables' "Add row" button (static/js/editor.js) adds one and bumps TOTAL_FORMS.
InputFormSet = forms.formset_factory(InputForm, extra=0, can_delete=True)
OutputFormSet = forms.formset_factory(OutputForm, extra=0, can_delete=True)
InstanceGroupFormSet = forms.formset_factory(InstanceGroupForm, extra=0, can_delete=True)
ParameterFormSet = forms.formset_factory(ParameterForm, extra=0, can_delete=True)

FORMSET_PREFIXES = ("input", "output", "instance_group", "parameters")
