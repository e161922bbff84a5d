"""Compare across servers: each sweep names its server, the server facts that differ are
listed, and no engine ratio pairs sweeps of different servers (stored sweeps, no Triton)."""

from __future__ import annotations

from typing import Any

import pytest

from profiler_app import export, sweeps
from profiler_app.models import Sweep, SweepPoint
from profiler_app.params import SweepParams
from registry import servers

pytestmark = pytest.mark.django_db

H100 = {
    "server": "h100", "grpc_url": "h100-host:8001", "triton_version": "2.51.0", "gpu_count": 1,
    "gpus": [{"uuid": "GPU-a", "memory_total_bytes": 80 * 2**30}], "gpu_metrics": True,
    "labels": {"gpu": "H100", "env": "prod"},
}  # fmt: skip
H200 = {
    **H100, "server": "h200", "grpc_url": "h200-host:8001", "triton_version": "2.52.0",
    "gpus": [{"uuid": "GPU-b", "memory_total_bytes": 141 * 2**30}],
    "labels": {"gpu": "H200", "env": "prod"},
}  # fmt: skip


def _sweep(server: str, facts: dict[str, Any], engine: str = "builtin") -> Sweep:
    sweep = sweeps.create_sweep(
        servers.default(), SweepParams(model="add_batched", start=1, end=1), engine=engine,
        enqueue=False,
    )  # fmt: skip
    Sweep.objects.filter(pk=sweep.pk).update(
        server=server, server_facts=facts, config_sha256="same", state="succeeded"
    )
    SweepPoint.objects.create(
        sweep=sweep, level=1, window=-1, throughput=1000.0, requests=300, p95_us=900.0,
        stable=True,
    )  # fmt: skip
    return Sweep.objects.get(pk=sweep.pk)


def test_the_server_facts_that_differ_are_listed_per_sweep(redis_db, admin_client):
    old, new = _sweep("h100", H100), _sweep("h200", H200)
    data = export.compare([new, old])
    assert [item["server"] for item in data["sweeps"]] == ["h100", "h200"]
    differences = {row["fact"]: row["values"] for row in data["server_differences"]}
    assert differences == {
        "server": ["h100", "h200"],
        "address": ["h100-host:8001", "h200-host:8001"],
        "Triton version": ["2.51.0", "2.52.0"],
        "GPU memory": ["80.0 GiB", "141.0 GiB"],
        "label gpu": ["H100", "H200"],
    }, "the GPU count and the env label are the same: not listed"
    page = admin_client.get(f"/sweeps/compare/?ids={old.pk}&ids={new.pk}").content.decode()
    section = page.split('id="server-differences"')[1].split("</section>")[0]
    assert 'data-fact="label gpu"' in section and "H200" in section
    assert 'data-fact="GPUs"' not in section


def test_a_sweep_that_recorded_no_facts_is_not_assumed_the_same():
    recorded, unrecorded = _sweep("h100", H100), _sweep("h100", {})
    differences = {
        row["fact"]: row["values"]
        for row in export.compare([recorded, unrecorded])["server_differences"]
    }
    assert differences["Triton version"] == ["2.51.0", "not recorded"]
    assert differences["label gpu"] == ["H100", "not recorded"]
    assert "server" not in differences


def test_no_engine_ratio_pairs_sweeps_of_different_servers_or_before_and_after_an_upgrade(
    redis_db,
):
    ours = _sweep("h100", H100)
    other_server = _sweep("h200", H200, engine="perf_analyzer")
    assert export.compare([ours, other_server])["engine_ratios"] == []
    upgraded = _sweep("h100", {**H100, "triton_version": "2.52.0"}, engine="perf_analyzer")
    assert export.compare([ours, upgraded])["engine_ratios"] == []
    same = _sweep("h100", H100, engine="perf_analyzer")
    (ratio,) = export.compare([ours, same])["engine_ratios"]
    assert (ratio["builtin"], ratio["perf_analyzer"]) == (ours.pk, same.pk)
