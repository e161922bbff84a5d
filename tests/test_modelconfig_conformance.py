"""Conformance against Triton's own L0_model_config suite and the docs example repository.

The corpus lives at ``<repo root>/../shared/conformance`` (override: ``CONFORMANCE_DIR``).
A missing corpus fails these tests on purpose: silently skipping would hide regressions.

Matching is literal: Triton's ``expected`` text (with its regex escapes ``\\[``/``\\]``
undone) must appear inside the message of one of our *error* findings. Our messages
start with Triton's wording and then add the fix, so this is a like-for-like check.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from repository_app.modelconfig.findings import Finding
from repository_app.modelconfig.validate import (
    ServerFacts,
    validate_model_dir,
    validate_repository,
    validate_text,
)

# L0_model_config runs on a machine with GPU 0; its "invalid_gpu" case relies on GPU 42
# not existing there, so the server-level rules get the same facts.
L0_SERVER = ServerFacts(gpu_ids=[0])


def _corpus_root() -> Path:
    override = os.environ.get("CONFORMANCE_DIR")
    if override:
        return Path(override)
    return Path(__file__).resolve().parents[1].parent / "shared" / "conformance"


CORPUS = _corpus_root()
L0 = CORPUS / "triton-l0-model-config"
DOCS = CORPUS / "triton-docs-examples"


def _expected_texts(case: Path) -> list[str]:
    """All accepted variants (expected, expected_2, ...) minus platform-specific ones."""
    texts = []
    for path in sorted(case.glob("expected*")):
        if path.name in ("expected_ensemble", "expected_unsupported"):
            continue  # only apply when the harness swaps in another platform
        texts.append(path.read_text().strip().replace("\\[", "[").replace("\\]", "]"))
    return texts


def _matches(findings: list[Finding], texts: list[str]) -> bool:
    return any(text in f.message for f in findings if f.is_error for text in texts)


def _cases(group: Path) -> list[Path]:
    return sorted(p for p in group.iterdir() if p.is_dir())


def test_the_conformance_corpus_is_present() -> None:
    assert L0.is_dir(), f"conformance corpus missing at {L0} (set CONFORMANCE_DIR)"
    assert DOCS.is_dir(), f"docs examples missing at {DOCS} (set CONFORMANCE_DIR)"


def test_it_rejects_every_noautofill_case_with_tritons_message() -> None:
    # noautofill = tritonserver --disable-auto-complete-config, hence strict=True.
    cases = _cases(L0 / "noautofill_platform")
    assert len(cases) >= 39
    missed = {}
    for case in cases:
        findings = validate_text(
            (case / "config.pbtxt").read_bytes(),
            folder_name=case.name,
            server=L0_SERVER,
            strict=True,
        )
        if not _matches(findings, _expected_texts(case)):
            missed[case.name] = [f.message for f in findings if f.is_error]
    matched = len(cases) - len(missed)
    print(f"noautofill_platform: {matched}/{len(cases)} rejected with matching message")
    assert not missed, missed


def test_it_detects_every_ensemble_case_when_its_folders_are_validated_together() -> None:
    cases = _cases(L0 / "autofill_noplatform" / "ensemble")
    missed = {}
    for case in cases:
        if (case / "config.pbtxt").is_file():
            # A single ensemble folder: its own ensemble rules must catch it.
            findings = validate_model_dir(case)
        else:
            # Several model folders: validate them as one repository.
            findings = [f for fs in validate_repository(case).values() for f in fs]
        if not _matches(findings, _expected_texts(case)):
            missed[case.name] = [f.message for f in findings if f.is_error]
    matched = len(cases) - len(missed)
    print(f"autofill_noplatform/ensemble: {matched}/{len(cases)} detected with matching message")
    assert not missed, missed


@pytest.mark.parametrize(
    "group",
    [
        "special_cases/invalid_platform",
        "special_cases/runtime_escape",
        "autofill_noplatform/common/no_version",
        "autofill_noplatform/custom/no_delimiter",
    ],
)
def test_it_matches_the_static_special_cases(group: str) -> None:
    case = L0 / group
    findings = validate_model_dir(case)
    assert _matches(findings, _expected_texts(case)), [f.message for f in findings]


def test_it_rejects_every_invalid_model_metrics_case() -> None:
    cases = _cases(L0 / "model_metrics" / "invalid_config")
    missed = [
        c.name
        for c in cases
        if not _matches(validate_text((c / "partial.pbtxt").read_bytes()), _expected_texts(c))
    ]
    print(f"model_metrics/invalid_config: {len(cases) - len(missed)}/{len(cases)} rejected")
    assert not missed


def test_it_warns_but_accepts_an_unknown_metric_family() -> None:
    case = L0 / "model_metrics" / "valid_config_with_warn" / "unknown_metric_family"
    findings = validate_text((case / "partial.pbtxt").read_bytes())
    assert not any(f.is_error for f in findings)
    assert any(t in f.message for f in findings for t in _expected_texts(case))


def _accepted_configs() -> list[Path]:
    success = sorted((L0 / "autofill_noplatform_success").rglob("config.pbtxt"))
    valid_metrics = sorted((L0 / "model_metrics" / "valid_config").rglob("partial.pbtxt"))
    return success + valid_metrics + sorted(DOCS.rglob("config.pbtxt"))


def test_no_config_triton_accepts_gets_an_error() -> None:
    configs = _accepted_configs()
    assert len(configs) >= 40
    wrongly_rejected = {}
    for path in configs:
        errors = [
            f.format(str(path))
            for f in validate_text(path.read_bytes(), folder_name=path.parent.name)
            if f.is_error
        ]
        if errors:
            wrongly_rejected[str(path.relative_to(CORPUS))] = errors
    print(f"accepted configs: {len(configs) - len(wrongly_rejected)}/{len(configs)} without errors")
    assert not wrongly_rejected, wrongly_rejected


def test_valid_ensemble_repositories_get_no_ensemble_errors() -> None:
    # The corpus has no version folders or model files, so only ensemble rules are judged.
    repos = _cases(L0 / "autofill_noplatform_success" / "ensemble")
    repos.append(L0 / "autofill_noplatform_success" / "python" / "conflicting_scheduler_ensemble")
    for repo in repos:
        for findings in validate_repository(repo).values():
            wrong = [
                f.message
                for f in findings
                if f.is_error
                and f.rule.startswith("ensemble.")
                and f.rule != "ensemble.step-version-missing"
            ]
            assert not wrong, (repo.name, wrong)
