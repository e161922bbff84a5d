"""The single-valued fields of the config sections beyond the basics (sequence batching, the
transaction policy and response cache, the ensemble's limit, optimization), as mixins of
``forms.ConfigForm``: one form (prefix ``cfg``) with the model's own fields. The repeated
parts of these sections are tables: ``section_forms``.

Help follows the wording of Triton's model configuration documentation
(model_configuration.md, ensemble_models.md, decoupled_models.md, response_cache.md,
optimization.md and the comments of model_config.proto).
"""

from __future__ import annotations

from django import forms
from tritonclient.grpc import model_config_pb2 as pb

from .fields import INT32, UINT32, UINT64, IntListField, ProtoIntField

PRIORITIES = [("", "(not set: PRIORITY_DEFAULT)")] + [
    (n, n) for n, _ in pb.ModelOptimizationPolicy.ModelPriority.items()
]
PINNED = [("", "(not set: enabled)"), ("on", "enable: true"), ("off", "enable: false")]


class SequenceBatchingFields(forms.Form):
    seq_enabled = forms.BooleanField(
        label="Sequence batching enabled",
        required=False,
        help_text="For stateful models: all inference requests of a sequence (the same "
        "correlation ID) are routed to the same model instance so the model can keep its "
        "state, and several sequences may be batched together. A model has one scheduler: "
        "dynamic batching, sequence batching or an ensemble.",
    )
    seq_strategy = forms.ChoiceField(
        label="Scheduling strategy",
        required=False,
        choices=[
            ("", "(not set: direct)"),
            ("direct", "direct"),
            ("oldest", "oldest"),
        ],
        help_text="Direct: each sequence gets a batch slot of its own in one model instance "
        "for its whole lifetime (the default). Oldest: the batcher keeps up to "
        "max_candidate_sequences candidate sequences and builds each batch from their oldest "
        "requests, like the dynamic batcher; a sequence may use a different batch slot for "
        "each request.",
    )
    seq_direct_max_queue_delay_microseconds = ProtoIntField(
        UINT64,
        label="Direct: max queue delay (µs)",
        help_text="How long a candidate request may wait in the sequence batcher's queue for "
        "other requests to join the batch. Only used when minimum slot utilization is set. "
        "Default 0.",
    )
    seq_direct_minimum_slot_utilization = forms.FloatField(
        label="Direct: minimum slot utilization",
        required=False,
        min_value=0.0,
        max_value=1.0,
        help_text="The share of batch slots that must be ready before a batch runs ahead of "
        "the queue delay: 0.5 runs it as soon as half the slots are ready. Default 0: a "
        "batch runs as soon as one slot is ready.",
    )
    seq_oldest_max_candidate_sequences = ProtoIntField(
        INT32,
        label="Oldest: max candidate sequences",
        help_text="How many candidate sequences the batcher keeps (it may exceed "
        "max_batch_size); further sequences wait in an ordered backlog until a candidate "
        "completes.",
    )
    seq_oldest_preferred_batch_size = IntListField(
        label="Oldest: preferred batch sizes",
        minimum=1,
        maximum=INT32[1],
        help_text="Batch sizes to form from the candidate sequences; a batch of one of these "
        "sizes runs at once. Comma-separated, each <= max_batch_size.",
    )
    seq_oldest_max_queue_delay_microseconds = ProtoIntField(
        UINT64,
        label="Oldest: max queue delay (µs)",
        help_text="How long a candidate request may wait for other requests to join the "
        "batch. Default 0.",
    )
    seq_oldest_preserve_ordering = forms.BooleanField(
        label="Oldest: preserve ordering",
        required=False,
        help_text="Return responses in the order the requests arrived. With decoupled models "
        "this can hold back other sequences' responses.",
    )
    seq_max_sequence_idle_microseconds = ProtoIntField(
        UINT64,
        label="Max sequence idle (µs)",
        help_text="How long a sequence may have no request queued before Triton ends it and "
        "frees its batch slot for another sequence. Not set (or 0): 1000000 (1 second).",
    )
    seq_iterative_sequence = forms.BooleanField(
        label="Iterative sequence",
        required=False,
        help_text="A sequence started by a single request that the model reschedules itself "
        "until it completes (needs backend support); in-flight requests are batched together "
        "and complete independently.",
    )


class PolicyFields(forms.Form):
    decoupled = forms.BooleanField(
        label="Decoupled transaction policy",
        required=False,
        help_text="A decoupled model may send any number of responses for a request, "
        "including none, and out of order relative to the requests (e.g. one response per "
        "generated token). Clients must use a streaming API (gRPC streaming or the "
        "generate_stream endpoint). Default off: exactly one response per request.",
    )
    response_cache = forms.BooleanField(
        label="Response cache enabled",
        required=False,
        help_text="Cache the model's responses: an identical request later is answered from "
        "the cache instead of running the model. Triton must be started with a cache "
        "(--cache-config, e.g. local,size=1048576). Not supported for decoupled models nor "
        "with the sequence batcher.",
    )


class EnsembleFields(forms.Form):
    ens_max_inflight_requests = ProtoIntField(
        UINT32,
        label="Max in-flight requests",
        help_text="The most requests in flight between the ensemble's steps, so a fast "
        "(decoupled) step cannot queue unbounded work for a slower one downstream. 0: no "
        "limit. Triton 2.63 and newer.",
    )


class OptimizationFields(forms.Form):
    opt_graph_level = ProtoIntField(
        INT32,
        non_negative=False,
        label="Graph optimization level",
        help_text="For ONNX Runtime and TensorFlow models. -1: disabled (ONNX Runtime: basic "
        "optimizations only); 0: the framework's default; 1 and up: that level (ONNX Runtime "
        "1: basic and extended). For TensorFlow it turns XLA on or off. Empty: not set.",
    )
    opt_priority = forms.ChoiceField(
        label="Model priority",
        required=False,
        choices=PRIORITIES,
        help_text="A model with a higher priority is preferred when scheduling and executing "
        "(TensorRT models only).",
    )
    opt_cuda_graphs = forms.BooleanField(
        label="CUDA graphs",
        required=False,
        help_text="Capture the model's operations as CUDA graphs and replay them, which cuts "
        "launch overhead (TensorRT backend). Without graph specs below, Triton captures "
        "default graphs from the model's settings.",
    )
    opt_cuda_busy_wait_events = forms.BooleanField(
        label="Busy-wait CUDA events",
        required=False,
        help_text="Busy-wait on CUDA events so the host thread learns at once that a model "
        "execution finished: lowest latency for more CPU load (TensorRT backend).",
    )
    opt_cuda_output_copy_stream = forms.BooleanField(
        label="Output copy stream",
        required=False,
        help_text="Copy outputs to the host on a CUDA stream of their own; Triton then "
        "allocates twice the GPU memory for the I/O buffers (TensorRT backend).",
    )
    opt_input_pinned_memory = forms.ChoiceField(
        label="Input pinned memory",
        required=False,
        choices=PINNED,
        help_text="Stage inputs between non-pinned system memory and GPU memory in a pinned "
        "buffer, which usually makes the copies faster. Default: enabled.",
    )
    opt_output_pinned_memory = forms.ChoiceField(
        label="Output pinned memory",
        required=False,
        choices=PINNED,
        help_text="The same for outputs. Default: enabled.",
    )
    opt_gather_kernel_buffer_threshold = ProtoIntField(
        UINT32,
        label="Gather kernel buffer threshold",
        help_text="Gather input buffers with a GPU kernel when at least this many are to be "
        "gathered (TensorRT backend). 0: the gather kernel is off.",
    )
    opt_eager_batching = forms.BooleanField(
        label="Eager batching",
        required=False,
        help_text="Prepare the next batch before an instance is free, overlapping batch "
        "preparation with execution; the batch may be smaller than it could have been "
        "(TensorRT backend).",
    )
