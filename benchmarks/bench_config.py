"""config.pbtxt validator speed: a typical config, and Triton's whole conformance corpus.

.venv/bin/python benchmarks/bench_config.py [--runs 200]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from repository_app.modelconfig import validate_repository, validate_text  # noqa: E402

CORPUS = Path(os.environ.get("CONFORMANCE_DIR", ROOT.parent / "shared" / "conformance"))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    typical = (
        ROOT / "examples" / "model_repository" / "busy_compute" / "config.pbtxt"
    ).read_bytes()
    densenet = (CORPUS / "triton-docs-examples" / "densenet_onnx" / "config.pbtxt").read_bytes()
    rows = []
    for label, text, folder in (
        ("busy_compute (demo, dynamic batching, parameters)", typical, "busy_compute"),
        ("densenet_onnx (Triton docs example)", densenet, "densenet_onnx"),
    ):
        validate_text(text, folder_name=folder)  # warm caches
        samples = []
        for _ in range(args.runs):
            start = time.perf_counter()
            validate_text(text, folder_name=folder)
            samples.append((time.perf_counter() - start) * 1000)
        rows.append((label, statistics.median(samples), max(samples)))

    files = sorted(CORPUS.rglob("*.pbtxt"))
    ensembles = [
        p
        for p in (CORPUS / "triton-l0-model-config" / "autofill_noplatform" / "ensemble").iterdir()
        if p.is_dir()
    ]
    start = time.perf_counter()
    for path in files:
        validate_text(path.read_bytes(), folder_name=path.parent.name)
    for case in ensembles:
        validate_repository(case)
    corpus_s = time.perf_counter() - start

    print("### config.pbtxt validator\n")
    print(f"| config ({args.runs} runs) | median ms | max ms |")
    print("|---|---|---|")
    for label, median, worst in rows:
        print(f"| {label} | {median:.2f} | {worst:.2f} |")
    print(
        f"\nWhole conformance corpus: {len(files)} config files plus {len(ensembles)} ensemble "
        f"repositories validated in {corpus_s:.2f} s (target: under 5 s)."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
