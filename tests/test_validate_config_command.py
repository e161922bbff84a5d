"""``manage.py validate_config``: output format, JSON, auto-detection and exit status."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

GOOD = 'name: "m" backend: "python"\ninput [ { name: "I" data_type: TYPE_FP32 dims: [ 1 ] } ]\n'
BAD = 'name: "m"\nbackend: "onnxruntime"\nmax_batch_size: 8\ndynamic_batching { preferred_batch_size: [ 16 ] }\n'


def model(tmp_path: Path, text: str, name: str = "m") -> Path:
    folder = tmp_path / name
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(text)
    (folder / "1" / "model.py").write_text("")
    (folder / "1" / "model.onnx").write_text("")
    return folder


def run_command(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "dashboard.settings"}
    return subprocess.run(
        [sys.executable, "manage.py", "validate_config", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_it_prints_compiler_style_lines_and_exits_1_on_errors(tmp_path: Path) -> None:
    folder = model(tmp_path, BAD)
    result = run_command(str(folder / "config.pbtxt"))
    assert result.returncode == 1, result.stderr
    line = next(x for x in result.stdout.splitlines() if "preferred-above-max" in x)
    assert line.startswith(f"{folder / 'config.pbtxt'}:4:44: error: ")
    assert line.endswith("[dynamic-batching.preferred-above-max]")


def test_it_exits_0_when_there_are_only_warnings(tmp_path: Path) -> None:
    result = run_command(str(model(tmp_path, GOOD.replace('name: "m" ', ""))))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "warning:" in result.stdout and "[model.name-missing]" in result.stdout


def test_it_emits_json(tmp_path: Path) -> None:
    result = run_command("--format", "json", str(model(tmp_path, BAD)))
    assert result.returncode == 1
    findings = json.loads(result.stdout)
    assert {"severity", "rule", "message", "field", "line", "col", "file"} <= set(findings[0])
    assert any(f["rule"] == "dynamic-batching.preferred-above-max" for f in findings)


def test_it_validates_a_whole_repository_and_reports_each_model(tmp_path: Path) -> None:
    model(tmp_path, GOOD, "m")
    model(tmp_path, BAD.replace('"m"', '"n"'), "n")
    from django.core.management import call_command

    out = StringIO()
    with pytest.raises(SystemExit) as exit_info:
        call_command("validate_config", str(tmp_path), stdout=out, stderr=StringIO())
    assert exit_info.value.code == 1
    assert str(tmp_path / "n" / "config.pbtxt") in out.getvalue()
    assert str(tmp_path / "m") not in out.getvalue()


def test_it_takes_server_gpus_into_account(tmp_path: Path) -> None:
    text = GOOD + "instance_group [ { kind: KIND_GPU gpus: [ 1 ] } ]\n"
    folder = model(tmp_path, text)
    assert run_command(str(folder)).returncode == 0
    result = run_command("--gpus", "0", str(folder))
    assert result.returncode == 1 and "[instance-group.gpu-unavailable]" in result.stdout


def test_a_missing_path_is_an_error(tmp_path: Path) -> None:
    result = run_command(str(tmp_path / "nope"))
    assert result.returncode == 1 and "[file.missing]" in result.stdout
