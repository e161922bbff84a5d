"""Triton's batching rules: ``max_batch_size``, the dynamic batcher (preferred sizes,
priority levels, queue policies) and the sequence batcher (its control tensors and strategies).

Messages start with Triton's wording (so they match server logs) and end with the fix.
"""

from __future__ import annotations

from collections.abc import Iterator

from tritonclient.grpc import model_config_pb2 as pb

from .context import RuleContext
from .findings import ERROR, WARNING, Finding


def check_max_batch_size(ctx: RuleContext) -> Iterator[Finding]:
    if ctx.config.max_batch_size < 0:
        yield ctx.finding(
            ERROR,
            "model.max-batch-size-negative",
            f"'max_batch_size' must be non-negative value for {ctx.name}: use 0 for a model "
            "without a batch dimension or the largest batch the model accepts",
            "max_batch_size",
        )


def check_dynamic_batching(ctx: RuleContext) -> Iterator[Finding]:
    c = ctx.config
    if not c.HasField("dynamic_batching"):
        return
    db = c.dynamic_batching
    max_bs = c.max_batch_size
    if max_bs == 0 and not db.preferred_batch_size:
        yield ctx.finding(
            WARNING,
            "dynamic-batching.no-batching",
            f"dynamic_batching has no effect on {ctx.name} because max_batch_size is 0: set "
            "max_batch_size > 0 (and drop the batch dimension from dims) or remove "
            "dynamic_batching",
            "dynamic_batching",
        )
    seen: set[int] = set()
    for i, size in enumerate(db.preferred_batch_size):
        path = f"dynamic_batching.preferred_batch_size[{i}]"
        if size <= 0:
            yield ctx.finding(
                ERROR,
                "dynamic-batching.preferred-not-positive",
                f"dynamic batching preferred size must be positive for {ctx.name}: "
                f"preferred_batch_size {size} must be at least 1",
                path,
            )
        elif size > max_bs:
            yield ctx.finding(
                ERROR,
                "dynamic-batching.preferred-above-max",
                f"dynamic batching preferred size must be <= max batch size for {ctx.name}: "
                + (
                    "dynamic batching with preferred batch sizes needs max_batch_size >= 1, "
                    f"and it is 0: set max_batch_size to at least {max(db.preferred_batch_size)} "
                    "(and leave the batch dimension out of dims) or remove preferred_batch_size"
                    if max_bs == 0
                    else f"preferred_batch_size {size} exceeds max_batch_size {max_bs}; lower it "
                    f"to at most {max_bs} or raise max_batch_size"
                ),
                path,
            )
        elif size in seen:
            yield ctx.finding(
                WARNING,
                "dynamic-batching.preferred-duplicate",
                f"preferred_batch_size {size} is listed twice for {ctx.name}: remove the repeat",
                path,
            )
        seen.add(size)
    levels = db.priority_levels
    if levels:
        if db.default_priority_level == 0 or db.default_priority_level > levels:
            yield ctx.finding(
                ERROR,
                "dynamic-batching.default-priority-range",
                f"default priority level must be in range [1, {levels}] for {ctx.name}: set "
                f"default_priority_level between 1 and {levels}",
                "dynamic_batching.default_priority_level"
                if ctx.locator.has("dynamic_batching.default_priority_level")
                else "dynamic_batching.priority_levels",
            )
        for key in sorted(db.priority_queue_policy):
            if key == 0 or key > levels:
                yield ctx.finding(
                    ERROR,
                    "dynamic-batching.priority-policy-range",
                    f"priority queue policy must have priority level in range [1, {levels}] for "
                    f"{ctx.name}: priority_queue_policy key {key} is outside it",
                    "dynamic_batching.priority_queue_policy",
                )
    if db.preserve_ordering:
        if levels > 1:
            yield ctx.finding(
                ERROR,
                "dynamic-batching.preserve-ordering-priorities",
                f"Only one priority level is allowed when 'preserve_ordering' is true for "
                f"{ctx.name}: set priority_levels to 0 or 1, or drop preserve_ordering",
                "dynamic_batching.priority_levels",
            )
        policies = [("dynamic_batching.default_queue_policy", db.default_queue_policy)]
        policies += [
            ("dynamic_batching.priority_queue_policy", p)
            for _, p in sorted(db.priority_queue_policy.items())
        ]
        for path, policy in policies:
            if (
                policy.default_timeout_microseconds != 0
                and policy.timeout_action == pb.ModelQueuePolicy.DELAY
            ):
                yield ctx.finding(
                    ERROR,
                    "dynamic-batching.preserve-ordering-delay",
                    "Queue policy can not have DELAY as timeout action when 'preserve_ordering' "
                    f"is true for {ctx.name}: use timeout_action: REJECT or drop preserve_ordering",
                    path,
                )


_CONTROL = pb.ModelSequenceBatching.Control


def _check_controls(ctx: RuleContext, kind: int, typed: bool) -> Iterator[Finding]:
    """Get{Boolean,Typed}SequenceControlProperties for one control kind."""
    sb = ctx.config.sequence_batching
    kind_name = _CONTROL.Kind.Name(kind)
    seen_control = False
    for i, ci in enumerate(sb.control_input):
        for j, ctrl in enumerate(ci.control):
            if ctrl.kind != kind:
                continue
            path = f"sequence_batching.control_input[{i}].control[{j}]"
            if seen_control:
                yield ctx.finding(
                    ERROR,
                    "sequence-batching.control-kind-repeated",
                    f"sequence batching specifies multiple {kind_name} tensors for {ctx.name}: "
                    f"keep a single control_input with kind {kind_name}",
                    path,
                )
                continue
            seen_control = True
            counts = {
                "int32_false_true": len(ctrl.int32_false_true),
                "fp32_false_true": len(ctrl.fp32_false_true),
                "bool_false_true": len(ctrl.bool_false_true),
            }
            given = [k for k, n in counts.items() if n]
            if typed:
                if given:
                    yield ctx.finding(
                        ERROR,
                        "sequence-batching.control-values-not-allowed",
                        "sequence batching must not specify either 'int32_false_true', "
                        f"'fp32_false_true' or 'bool_false_true' for {kind_name} for {ctx.name}: "
                        "give data_type instead",
                        path,
                    )
                elif kind == _CONTROL.CONTROL_SEQUENCE_CORRID and ctrl.data_type not in (
                    pb.TYPE_UINT64,
                    pb.TYPE_INT64,
                    pb.TYPE_UINT32,
                    pb.TYPE_INT32,
                    pb.TYPE_STRING,
                ):
                    yield ctx.finding(
                        ERROR,
                        "sequence-batching.corrid-data-type",
                        f"unexpected data type for control {kind_name} for {ctx.name}. Allowed "
                        "data types are TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and "
                        "TYPE_STRING: set one of them as data_type",
                        f"{path}.data_type",
                    )
                continue
            if not given:
                yield ctx.finding(
                    ERROR,
                    "sequence-batching.control-values-missing",
                    "sequence batching must specify either 'int32_false_true', 'fp32_false_true' "
                    f"or 'bool_false_true' for {kind_name} for {ctx.name}: add e.g. "
                    "int32_false_true: [ 0, 1 ]",
                    path,
                )
            elif len(given) > 1:
                yield ctx.finding(
                    ERROR,
                    "sequence-batching.control-values-conflict",
                    "sequence batching specifies more than one from 'int32_false_true', "
                    f"'fp32_false_true' and 'bool_false_true' for {kind_name} for {ctx.name}: "
                    "keep one",
                    path,
                )
            elif counts[given[0]] != 2:
                yield ctx.finding(
                    ERROR,
                    "sequence-batching.control-values-count",
                    f"sequence batching control '{given[0]}' must have exactly 2 entries for "
                    f"{kind_name} for {ctx.name}: give [ false_value, true_value ]",
                    f"{path}.{given[0]}",
                )


def check_sequence_batching(ctx: RuleContext) -> Iterator[Finding]:
    c = ctx.config
    if not c.HasField("sequence_batching"):
        return
    sb = c.sequence_batching
    if c.response_cache.enable:
        yield ctx.finding(
            ERROR,
            "sequence-batching.response-cache",
            f"Response Cache does not currently support model {ctx.name} with sequence "
            "batching scheduler. Please disable the response cache: set response_cache { enable: false }",
            "response_cache",
        )
    seen: set[str] = set()
    for i, ci in enumerate(sb.control_input):
        path = f"sequence_batching.control_input[{i}]"
        if not ci.name:
            yield ctx.finding(
                ERROR,
                "sequence-batching.control-name-missing",
                f'sequence batching control tensor must have a name for {ctx.name}: add name: "..."',
                path,
            )
        elif ci.name in seen:
            yield ctx.finding(
                ERROR,
                "sequence-batching.control-tensor-repeated",
                f"sequence batching control tensor '{ci.name}' is specified for multiple control "
                f"kinds for {ctx.name}: give each control_input its own tensor name",
                f"{path}.name",
            )
        seen.add(ci.name)
    for kind in (
        _CONTROL.CONTROL_SEQUENCE_START,
        _CONTROL.CONTROL_SEQUENCE_END,
        _CONTROL.CONTROL_SEQUENCE_READY,
    ):
        yield from _check_controls(ctx, kind, typed=False)
    yield from _check_controls(ctx, _CONTROL.CONTROL_SEQUENCE_CORRID, typed=True)
    if sb.HasField("oldest"):
        for i, size in enumerate(sb.oldest.preferred_batch_size):
            path = f"sequence_batching.oldest.preferred_batch_size[{i}]"
            if size <= 0:
                yield ctx.finding(
                    ERROR,
                    "sequence-batching.preferred-not-positive",
                    f"sequence batching preferred batch size must be positive for {ctx.name}: "
                    f"{size} must be at least 1",
                    path,
                )
            elif size > c.max_batch_size:
                yield ctx.finding(
                    ERROR,
                    "sequence-batching.preferred-above-max",
                    f"sequence batching preferred batch size must be <= max batch size for "
                    f"{ctx.name}: {size} exceeds max_batch_size {c.max_batch_size}; lower it or "
                    "raise max_batch_size",
                    path,
                )
    if sb.HasField("direct"):
        util = sb.direct.minimum_slot_utilization
        if util < 0.0 or util > 1.0:
            yield ctx.finding(
                ERROR,
                "sequence-batching.slot-utilization",
                f"sequence batching minimum slot utilization must be in range (0.0, 1.0] for "
                f"{ctx.name}: {util} is outside it",
                "sequence_batching.direct.minimum_slot_utilization",
            )
