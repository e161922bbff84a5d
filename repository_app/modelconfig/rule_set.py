"""Every single-config rule, run in order (one list for the validator and the folder
rules, which both import it: kept apart from `validate` so neither imports the other)."""

from __future__ import annotations

from .context import RuleContext
from .ensemble_rules import check_ensemble
from .findings import Finding
from .rules import RULES
from .versions import check_server_version


def run_rules(ctx: RuleContext) -> list[Finding]:
    """Run every single-config rule over ``ctx``."""
    findings: list[Finding] = []
    for rule in RULES:
        findings.extend(rule(ctx))
    findings.extend(check_ensemble(ctx))
    findings.extend(check_server_version(ctx))
    return findings
