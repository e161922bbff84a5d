"""A config.pbtxt as Triton completes it when it loads the model (what it then serves).

Triton fills fields the file leaves out before it serves a model; its model-config API
answers with the result. Mirrored here from Triton core (2.51, src/model_config_utils.cc
and backend_model.cc; checked against a real tritonserver, tests/test_model_state_honest.py):

- ``AutoCompleteBackendFields``: the name (the folder's), platform, backend and
  default_model_filename (``backends.complete_backend_fields``);
- ``NormalizeModelConfig``: version_policy ``latest { num_versions: 1 }``; an empty
  dynamic_batching.preferred_batch_size becomes ``[max_batch_size]`` (when batching);
  sequence_batching.max_sequence_idle_microseconds 0 becomes 1 s, and an empty
  ``oldest.preferred_batch_size`` becomes ``[max_batch_size]``; input/output pinned
  memory are switched on unless the file says otherwise (not for ensembles);
- ``NormalizeInstanceGroup`` (not for ensembles): no instance_group becomes one group
  named after the model; unnamed groups are named ``<model>_<index>``; KIND_AUTO becomes
  KIND_GPU when the server has every GPU the group lists, else KIND_CPU; a count below 1
  becomes 1 (2 for CPU groups of onnxruntime and tensorflow); a GPU group without gpus
  gets all of the server's GPUs;
- an ensemble's model_transaction_policy: Triton sets ``decoupled`` itself, true when a
  step is decoupled, whatever the file says.

Some fills depend on what the file cannot tell: the server's GPUs, an ensemble's steps, a
backend that completes inputs, outputs and batching from the model file (onnxruntime,
tensorrt, a model.py with ``auto_complete_config``...) or a Python-based backend's
directory. ``Completion.unknown`` names those top-level fields; a comparison leaves them out.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from tritonclient.grpc import model_config_pb2 as pb

from .backends import ENSEMBLE, KNOWN_BACKENDS, complete_backend_fields, io_completion
from .context import FolderFacts

SEQUENCE_IDLE_DEFAULT_US = 1_000_000  # Triton core's SEQUENCE_IDLE_DEFAULT_MICROSECONDS
# Backends that ask for two CPU instances by default (SetDefaultInstanceCount).
TWO_CPU_INSTANCES = frozenset({"onnxruntime", "tensorflow"})
# A backend's preferred kind for a model without instance_group, where it differs from
# KIND_AUTO's resolution (openvino's TRITONBACKEND_GetBackendAttribute; the python backend
# prefers GPU only on GPU builds, where KIND_AUTO resolves the same way).
PREFERRED_KIND = {"openvino": pb.ModelInstanceGroup.KIND_CPU}
# Backends that are shared libraries; any other may be a Python-based backend (vllm...),
# for which Triton fills ``runtime`` and may add an EXECUTION_ENV_PATH parameter.
LIBRARY_BACKENDS = KNOWN_BACKENDS - {"vllm"}
_KIND = pb.ModelInstanceGroup


@dataclass(frozen=True)
class Completion:
    config: pb.ModelConfig  # the file with Triton's fills
    unknown: frozenset[str]  # top-level fields Triton may fill from what the file cannot tell


def as_triton_completes(
    config: pb.ModelConfig,
    *,
    folder: FolderFacts | None = None,
    gpus: Collection[int] | None = None,
    steps_decoupled: bool | None = None,
) -> Completion:
    """``config`` as Triton would serve it after loading it.

    ``folder``: the model folder (its name, the version folder that names the backend,
    whether model.py completes its own config); ``gpus``: the server's GPU ids (None:
    unknown); ``steps_decoupled``: whether one of an ensemble's steps is decoupled (None:
    unknown). What cannot be told without them is named in ``unknown``.
    """
    c = pb.ModelConfig()
    c.CopyFrom(config)
    unknown: set[str] = set()
    if not c.name and folder is not None:
        c.name = folder.name
    fields = complete_backend_fields(
        c.platform,
        c.backend,
        c.default_model_filename,
        model_name=c.name or None,
        version_files=folder.version_files if folder else None,
        is_dir=folder.is_dir if folder else None,
    )
    if not fields.error:
        c.platform, c.backend = fields.platform, fields.backend
        c.default_model_filename = fields.default_model_filename
    ensemble = c.platform == ENSEMBLE
    unknown |= _backend_fills(config, c.backend, folder, ensemble)

    if not c.HasField("version_policy"):
        c.version_policy.latest.num_versions = 1
    # An empty preferred_batch_size means the largest batch (none without batching).
    batching = c.max_batch_size > 0
    if c.HasField("dynamic_batching") and not c.dynamic_batching.preferred_batch_size:
        c.dynamic_batching.preferred_batch_size.extend([c.max_batch_size] if batching else [])
    if c.HasField("sequence_batching"):
        sequence = c.sequence_batching
        if sequence.max_sequence_idle_microseconds == 0:
            sequence.max_sequence_idle_microseconds = SEQUENCE_IDLE_DEFAULT_US
        if sequence.HasField("oldest") and not sequence.oldest.preferred_batch_size:
            sequence.oldest.preferred_batch_size.extend([c.max_batch_size] if batching else [])

    if ensemble:
        if steps_decoupled is None:
            unknown.add("model_transaction_policy")
        else:
            c.model_transaction_policy.decoupled = steps_decoupled
        return Completion(c, frozenset(unknown))
    for pinned in ("input_pinned_memory", "output_pinned_memory"):
        if not c.optimization.HasField(pinned):
            getattr(c.optimization, pinned).enable = True
    if not _complete_instance_groups(c, gpus):
        unknown.add("instance_group")
    return Completion(c, frozenset(unknown))


def _complete_instance_groups(c: pb.ModelConfig, gpus: Collection[int] | None) -> bool:
    """Fill instance groups as NormalizeInstanceGroup does; False where that needs the
    server's GPUs and they are unknown."""
    known = True
    if not c.instance_group:
        group = c.instance_group.add(name=c.name)
        group.kind = PREFERRED_KIND.get(c.backend, _KIND.KIND_AUTO)
    for index, group in enumerate(c.instance_group):
        if not group.name:
            group.name = f"{c.name}_{index}"
        if group.kind == _KIND.KIND_AUTO:
            if gpus is None:
                known = False
                continue
            has_all = bool(gpus) and all(gpu in gpus for gpu in group.gpus)
            group.kind = _KIND.KIND_GPU if has_all else _KIND.KIND_CPU
        if group.count < 1:
            cpu_pair = group.kind == _KIND.KIND_CPU and c.backend in TWO_CPU_INSTANCES
            group.count = 2 if cpu_pair else 1
        if group.kind == _KIND.KIND_GPU and not group.gpus:
            if gpus is None:
                known = False
            else:
                group.gpus.extend(sorted(gpus))
    return known


def _backend_fills(
    config: pb.ModelConfig, backend: str, folder: FolderFacts | None, ensemble: bool
) -> set[str]:
    """Fields the file leaves out that the backend may fill when it loads the model."""
    fills: set[str] = set()
    if ensemble:
        return fills
    if backend not in LIBRARY_BACKENDS:
        # A Python-based backend: Triton names its runtime and may add the backend's
        # EXECUTION_ENV_PATH from the backend directory.
        if not config.runtime:
            fills.add("runtime")
        if "EXECUTION_ENV_PATH" not in config.parameters:
            fills.add("parameters")
    python_hook = folder.python_auto_complete if folder else None
    if io_completion(backend, python_hook) is False:
        return fills
    # Auto-complete (on unless --disable-auto-complete-config): the backend reads inputs,
    # outputs and the batch size from the model file (model.py's auto_complete_config may
    # also set batching and the transaction policy).
    for name in ("input", "output", "max_batch_size"):
        if not _written(config, name):
            fills.add(name)
    scheduled = config.WhichOneof("scheduling_choice") is not None
    if not scheduled and (backend == "python" or config.max_batch_size == 0):
        fills.add("dynamic_batching")
    if backend == "python" and not config.HasField("model_transaction_policy"):
        fills.add("model_transaction_policy")
    if "max_batch_size" in fills:
        # Triton fills an empty preferred_batch_size from the backend's batch size.
        if config.HasField("dynamic_batching") and not config.dynamic_batching.preferred_batch_size:
            fills.add("dynamic_batching")
        oldest = config.sequence_batching.oldest
        if config.sequence_batching.HasField("oldest") and not oldest.preferred_batch_size:
            fills.add("sequence_batching")
    return fills


def _written(config: pb.ModelConfig, name: str) -> bool:
    field = config.DESCRIPTOR.fields_by_name[name]
    if field.label == field.LABEL_REPEATED:
        return len(getattr(config, name)) > 0
    return bool(getattr(config, name))
