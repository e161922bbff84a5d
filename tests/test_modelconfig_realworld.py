"""The validator over our corpus of real-world-shaped configs (tests/data/realworld).

Zero false errors: no error on a config Triton loads, at folder level or for the single
config.pbtxt (the CLI on one file must agree with the folder). Every planted real error
caught, by its rule id. Templates get only placeholder findings besides what is planted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from repository_app.modelconfig.validate import (
    ServerFacts,
    validate_path,
    validate_repository,
)
from repository_app.modelconfig.versions import parse_triton_version

CORPUS = Path(__file__).resolve().parent / "data" / "realworld"
CASES = sorted(p for p in CORPUS.iterdir() if p.is_dir())


def read_case(case: Path) -> dict[str, str]:
    info = {}
    for line in (case / "README.md").read_text().splitlines():
        key, sep, value = line.partition(":")
        if sep:
            info[key.strip().lower()] = value.strip()
    return info


def test_the_corpus_is_there_and_covers_the_sources() -> None:
    assert len(CASES) >= 25
    assert len(list(CORPUS.glob("*/*/config.pbtxt"))) >= 40
    texts = " ".join((c / "README.md").read_text() for c in CASES)
    for source in (
        "example repository",
        "QA",
        "Python backend",
        "DALI",
        "FIL",
        "FasterTransformer",
        "TensorRT-LLM",
        "Model Analyzer",
        "DeepLearningExamples",
    ):
        assert source in texts, source
    for case in CASES:
        assert "Triton loads it:" in (case / "README.md").read_text(), case.name


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_no_false_error_and_every_planted_error_is_caught(case: Path) -> None:
    info = read_case(case)
    planted = {r.strip() for r in info.get("planted", "").split(",") if r.strip()}
    allowed = planted | ({"template.placeholder"} if info.get("template") == "yes" else set())
    loads = info["triton loads it"].startswith("yes")
    assert loads != bool(planted or info.get("template") == "yes"), "README contradicts itself"
    server = None
    if "server" in info:
        server = ServerFacts(gpus_known=False, version=parse_triton_version(info["server"]))
    strict = info.get("strict") == "yes"
    result = validate_repository(case, server=server, strict=strict)
    caught: set[str] = set()
    for model, findings in result.items():
        folder_errors = {f.rule for f in findings if f.is_error}
        caught |= folder_errors
        assert folder_errors <= allowed, (model, [f.format() for f in findings if f.is_error])
        config = case / model / "config.pbtxt"
        if config.is_file():
            single = [
                f for fs in validate_path(config, server=server, strict=strict).values() for f in fs
            ]
            file_errors = {f.rule for f in single if f.is_error}
            assert file_errors <= allowed, (model, [f.format() for f in single if f.is_error])
    assert planted <= caught, f"missed: {sorted(planted - caught)}"
