"""perf_analyzer's invocation: where the binary is, the environment it needs, and its
command line for a sweep.

The binary is perf_analyzer 2.48 from the `tritonclient==2.48.0` manylinux wheel
(`scripts/install_perf_analyzer.py` puts it in var/tools/). It needs `libcudart.so.12`
on LD_LIBRARY_PATH even without a GPU; `perf_analyzer_env` arranges that.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from ..params import DEFAULTS, SweepParams

ROOT = Path(__file__).resolve().parents[2]
TOOLS_DIR = ROOT / "var" / "tools"
PROJECT_BINARY = TOOLS_DIR / "perf_analyzer"


class PerfAnalyzerNotFound(FileNotFoundError):
    """No perf_analyzer binary; the message says how to install one."""


def locate_perf_analyzer() -> Path:
    """The perf_analyzer binary: $PERF_ANALYZER, then PATH, then var/tools/perf_analyzer."""
    configured = os.environ.get("PERF_ANALYZER")
    if configured:
        path = Path(configured)
        if path.is_file() and os.access(path, os.X_OK):
            return path
        raise PerfAnalyzerNotFound(f"PERF_ANALYZER={configured} is not an executable file")
    found = shutil.which("perf_analyzer")
    if found:
        return Path(found)
    if PROJECT_BINARY.is_file() and os.access(PROJECT_BINARY, os.X_OK):
        return PROJECT_BINARY
    raise PerfAnalyzerNotFound(
        "perf_analyzer not found: run `.venv/bin/python scripts/install_perf_analyzer.py` "
        "(puts it in var/tools/), or set PERF_ANALYZER to the binary"
    )


def perf_analyzer_env(binary: Path, base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for the binary: libcudart.so.12 from <binary dir>/lib or var/tools/lib."""
    env = dict(os.environ if base is None else base)
    dirs = [
        d for d in (binary.parent / "lib", TOOLS_DIR / "lib") if (d / "libcudart.so.12").exists()
    ]
    env["LD_LIBRARY_PATH"] = os.pathsep.join(
        dict.fromkeys([*map(str, dirs), *filter(None, [env.get("LD_LIBRARY_PATH")])])
    )
    return env


def _fmt(value: float) -> str:
    return f"{value:g}"


def build_command(
    params: SweepParams,
    url: str,
    *,
    binary: Path | str = "perf_analyzer",
    csv_path: Path | str | None = None,
    input_data_path: Path | str | None = None,
    bls_composing_models: Sequence[str] = (),
) -> list[str]:
    """perf_analyzer's command line for the same sweep as `params`.

    Input data other than "random"/"zeros" must be written to a file first and passed as
    `input_data_path`. `bls_composing_models` ("model" or "model:version", names checked
    by `composing.check_names`) are the models a BLS model calls.
    """
    cmd = [str(binary), "-m", params.model]
    if params.version:
        cmd += ["-x", params.version]
    if bls_composing_models:
        cmd += ["--bls-composing-models", ",".join(bls_composing_models)]
    cmd += ["-i", params.protocol, "-u", url, "-b", str(params.batch_size)]
    span = f"{_fmt(params.start)}:{_fmt(params.end)}:{_fmt(params.step)}"
    if params.mode == "concurrency":
        cmd += ["--concurrency-range", span]
    else:
        cmd += ["--request-rate-range", span, "--request-distribution", params.arrival]
        # Said even at its default (4 there), so the stored command shows the limit.
        cmd += ["--max-threads", str(params.max_threads)]
    if params.percentile != "avg":
        cmd += [f"--percentile={int(params.percentile)}"]
    cmd += [
        "--measurement-interval",
        str(params.measurement_window_ms),
        "--stability-percentage",
        _fmt(params.stability_percentage),
        "--max-trials",
        str(params.max_windows),
    ]
    if params.latency_threshold_ms:
        # perf_analyzer takes whole milliseconds
        cmd += ["--latency-threshold", str(max(1, round(params.latency_threshold_ms)))]
    if params.streaming:
        cmd += ["--streaming"]
    # The sequence flags only where they differ from perf_analyzer's defaults (the same as
    # ours): the command of a stateless model's sweep stays free of them.
    if params.sequence_length != DEFAULTS["sequence_length"]:
        cmd += ["--sequence-length", str(params.sequence_length)]
    if params.sequence_length_variation != DEFAULTS["sequence_length_variation"]:
        cmd += ["--sequence-length-variation", _fmt(params.sequence_length_variation)]
    if params.sequence_id_range:
        cmd += ["--sequence-id-range", params.sequence_id_range]
    if params.mode == "request_rate" and params.num_of_sequences != DEFAULTS["num_of_sequences"]:
        cmd += ["--num-of-sequences", str(params.num_of_sequences)]
    for name, dims in sorted(params.shapes.items()):
        cmd += ["--shape", f"{name}:{','.join(str(d) for d in dims)}"]
    if input_data_path is not None:
        cmd += ["--input-data", str(input_data_path)]
    elif params.input_data in ("random", "zeros"):
        cmd += ["--input-data", "random" if params.input_data == "random" else "zero"]
    else:
        raise ValueError("input data given as JSON needs input_data_path")
    if csv_path is not None:
        cmd += ["-f", str(csv_path), "--verbose-csv"]
    cmd += ["-v"]  # per-window "Pass" lines, for streaming
    return cmd
