"""Every single-config rule, run in order (one list for the validator and the folder
rules, which both import it: kept apart from `validate` so neither imports the other).

The rules themselves live by the part of the config they check: ``model_rules`` (name,
platform/backend, scheduler, policies, metrics, code-loading parameters), ``io_rules``
(inputs, outputs, batch inputs/outputs), ``batching_rules``, ``instance_group_rules``,
``ensemble_rules`` and ``versions`` (what the server's release supports). Unlike Triton,
which stops at the first error, every check reports all it finds."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from .batching_rules import check_dynamic_batching, check_max_batch_size, check_sequence_batching
from .context import RuleContext
from .ensemble_rules import check_ensemble
from .findings import Finding
from .instance_group_rules import check_instance_groups
from .io_rules import check_batch_io, check_io, check_usability
from .model_rules import (
    check_code_loading,
    check_model_metrics,
    check_name,
    check_platform_backend,
    check_scheduling_choice,
    check_transaction_policy,
    check_version_policy,
)
from .versions import check_server_version

Rule = Callable[[RuleContext], Iterator[Finding]]

RULES: list[Rule] = [
    check_name,
    check_platform_backend,
    check_max_batch_size,
    check_io,
    check_batch_io,
    check_dynamic_batching,
    check_sequence_batching,
    check_scheduling_choice,
    check_transaction_policy,
    check_model_metrics,
    check_instance_groups,
    check_version_policy,
    check_usability,
    check_code_loading,
]


def run_rules(ctx: RuleContext) -> list[Finding]:
    """Run every single-config rule over ``ctx``."""
    findings: list[Finding] = []
    for rule in RULES:
        findings.extend(rule(ctx))
    findings.extend(check_ensemble(ctx))
    findings.extend(check_server_version(ctx))
    return findings
