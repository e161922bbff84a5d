"""Judging a config against the target Triton release (2.40 to the newest).

Release facts (Triton core version = NGC container release): model_metrics 2.52 (24.11),
ensemble max_inflight_requests 2.63 (25.11), platform torch_aoti with model.pt2 2.67
(26.03), the explicit-load model-name check 2.67 (any '..' or '/') relaxed in 2.68 (26.04:
only '..' itself or a '/', after trimming whitespace).
"""

from __future__ import annotations

import io
from pathlib import Path
from unittest import mock

import pytest
from django.core.management import CommandError, call_command

from registry import servers
from repository_app import server_facts as server_facts_module
from repository_app.modelconfig.validate import ServerFacts, validate_model_dir, validate_text
from repository_app.modelconfig.versions import parse_triton_version
from triton_api.client import TritonClient, TritonError

IO = """
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]
"""
METRICS = (
    'name: "m" backend: "python"'
    + IO
    + """model_metrics { metric_control [ {
    metric_identifier { family: "nv_inference_first_response_histogram_ms" }
    histogram_options { buckets: [ 1, 10, 100 ] } } ] }"""
)
INFLIGHT = """name: "ens" platform: "ensemble" max_batch_size: 4
input [ { name: "RAW" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 16 ] } ]
ensemble_scheduling {
  max_inflight_requests: 8
  step [ { model_name: "m" input_map { key: "INPUT0" value: "RAW" }
           output_map { key: "OUTPUT0" value: "OUT" } } ]
}"""
AOTI = 'name: "m" backend: "pytorch" platform: "torch_aoti" max_batch_size: 8' + IO


def on(version: str) -> ServerFacts:
    return ServerFacts(gpus_known=False, version=parse_triton_version(version))


def rules_of(findings: list) -> set[str]:
    return {f.rule for f in findings if f.is_error}


@pytest.mark.parametrize(
    "text,field,added,older,newer",
    [
        (METRICS, "model_metrics", "2.52", "2.51", "2.52"),
        (INFLIGHT, "ensemble_scheduling.max_inflight_requests", "2.63", "2.62", "2.63"),
        ('name: "m" backend: "python" runtime: "model.py"' + IO, "runtime", "2.42", "2.41", "2.42"),
    ],
    ids=["model_metrics", "max_inflight_requests", "runtime"],
)
def test_a_field_newer_than_the_server_is_an_error_naming_the_release(
    text: str, field: str, added: str, older: str, newer: str
) -> None:
    folder = "ens" if text is INFLIGHT else "m"
    [finding] = [
        f
        for f in validate_text(text, folder_name=folder, server=on(older))
        if f.rule == "version.field-too-new"
    ]
    assert finding.is_error and finding.field == field and finding.line is not None
    assert f"'{field}' was added in Triton {added}" in finding.message
    assert f"the server is Triton {older}" in finding.message
    for server in (on(newer), None):
        assert "version.field-too-new" not in rules_of(
            validate_text(text, folder_name=folder, server=server)
        )


def test_torch_aoti_needs_2_67(tmp_path: Path) -> None:
    assert rules_of(validate_text(AOTI, folder_name="m", server=on("2.67"))) == set()
    assert rules_of(validate_text(AOTI, folder_name="m")) == set()
    [finding] = [f for f in validate_text(AOTI, folder_name="m", server=on("2.60")) if f.is_error]
    assert finding.rule == "version.platform-too-new" and "2.67 (release 26.03)" in finding.message


def test_the_platform_is_inferred_from_model_pt2_like_triton(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text('name: "m" max_batch_size: 8' + IO)
    (folder / "1" / "model.pt2").write_bytes(b"PK\x03\x04 stand-in")
    assert rules_of(validate_model_dir(folder, server=on("2.67"))) == set()
    assert "version.platform-too-new" in rules_of(validate_model_dir(folder, server=on("2.66")))


@pytest.mark.parametrize(
    "name,version,rule",
    [
        ("llama..v2", "2.67", "model.name-invalid"),
        ("llama..v2", "2.68", None),
        ("llama..v2", "2.66", None),
        ("llama..v2", None, "model.name-dots"),  # unknown server: a warning, not an error
        ("a/b", "2.73", "model.name-invalid"),
        (" ", "2.68", "model.name-invalid"),
    ],
)
def test_model_names_follow_the_target_releases_checks(
    name: str, version: str | None, rule: str | None
) -> None:
    text = f'name: "{name}" backend: "python"' + IO
    server = on(version) if version else None
    found = {f.rule: f for f in validate_text(text, folder_name=name, server=server)}
    name_rules = {r for r in found if r.startswith("model.name-") and r != "model.name-mismatch"}
    assert name_rules == ({rule} if rule else set())
    if rule == "model.name-invalid" and name != " ":
        assert "must not contain path traversal characters" in found[rule].message


def test_versions_are_read_as_triton_writes_them() -> None:
    assert parse_triton_version("2.51.0") == (2, 51)
    assert parse_triton_version("2.73.0dev") == (2, 73)
    assert parse_triton_version("2.40") == (2, 40)
    for bad in ("24.10", "latest", "", "3.1"):
        with pytest.raises(ValueError):
            parse_triton_version(bad)


def test_the_cli_takes_triton_version(tmp_path: Path) -> None:
    config = tmp_path / "m" / "config.pbtxt"
    config.parent.mkdir()
    config.write_text(METRICS)
    out = io.StringIO()
    with pytest.raises(SystemExit):
        call_command(
            "validate_config",
            str(config),
            "--no-server",
            "--triton-version",
            "2.51",
            stdout=out,
            stderr=io.StringIO(),
        )
    assert "[version.field-too-new]" in out.getvalue()
    ok = io.StringIO()
    call_command(
        "validate_config",
        str(config),
        "--no-server",
        "--triton-version",
        "2.52",
        stdout=ok,
        stderr=io.StringIO(),
    )
    assert "error" not in ok.getvalue()
    with pytest.raises(CommandError, match="container release"):
        call_command("validate_config", str(config), "--triton-version", "24.10")


def test_server_facts_carry_the_servers_version(monkeypatch: pytest.MonkeyPatch) -> None:
    client = mock.create_autospec(TritonClient, instance=True)
    client.metrics_url = "http://triton.test/metrics"
    client.server_metadata.return_value = {"name": "triton", "version": "2.51.0"}
    client.metrics.return_value = []
    monkeypatch.setattr(server_facts_module, "get_client", lambda *_: client)
    monkeypatch.setattr(server_facts_module, "_cache", {})
    facts = server_facts_module.server_facts(servers.default())
    assert facts == ServerFacts(gpu_ids=[], gpus_known=True, version=(2, 51))
    # Metrics down, metadata up: the version still counts, the GPUs are unknown.
    client.metrics.side_effect = TritonError("metrics unreachable", unreachable=True)
    monkeypatch.setattr(server_facts_module, "_cache", {})
    assert server_facts_module.server_facts(servers.default()) == ServerFacts(
        gpus_known=False, version=(2, 51)
    )
    kind_gpu = 'name: "m" backend: "python" instance_group [ { kind: KIND_GPU } ]' + IO
    assert not rules_of(
        validate_text(kind_gpu, server=server_facts_module.server_facts(servers.default()))
    )
    # Nothing answers: no facts at all (and no second timeout for the metrics).
    client.server_metadata.side_effect = TritonError("down", unreachable=True)
    client.metrics.reset_mock()
    monkeypatch.setattr(server_facts_module, "_cache", {})
    assert server_facts_module.server_facts(servers.default()) is None
    client.metrics.assert_not_called()
