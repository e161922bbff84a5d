"""The Grafana dashboard queries only metrics that Triton exports: every name in its JSON
appears in a real tritonserver 2.51's /metrics (with the latency summaries on), or in the
short list below of families Triton's metrics guide documents as GPU-only or optional."""

from __future__ import annotations

import json
import re
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from django.conf import settings

from devstack import services as svc
from triton_api import gpus, statistics

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "compose" / "grafana" / "triton-dashboard.json"
PROMETHEUS = ROOT / "compose" / "prometheus" / "prometheus.yml"

# Triton's metrics guide (docs/user_guide/metrics.md), "GPU Metrics": collected through
# DCGM, so absent on a server without a GPU (as on these machines).
GPU_ONLY = {
    "nv_gpu_utilization",
    "nv_gpu_memory_total_bytes",
    "nv_gpu_memory_used_bytes",
    "nv_gpu_power_usage",
    "nv_gpu_power_limit",
    "nv_energy_consumption",
}
# The same guide, "Histograms": decoupled models only, with
# --metrics-config histogram_latencies=true. 2.51 exported none with that flag and a
# decoupled Python model; later releases do.
OPTIONAL = {"nv_inference_first_response_histogram_ms"}
# What the dashboard must show (the list).
REQUIRED = {
    "nv_inference_request_success",
    "nv_inference_request_failure",
    "nv_inference_count",
    "nv_inference_exec_count",
    "nv_inference_request_duration_us",
    "nv_inference_queue_duration_us",
    "nv_inference_compute_input_duration_us",
    "nv_inference_compute_infer_duration_us",
    "nv_inference_compute_output_duration_us",
    "nv_inference_pending_request_count",
    "nv_cpu_utilization",
    "nv_cpu_memory_used_bytes",
    "nv_cpu_memory_total_bytes",
    "nv_gpu_utilization",
    "nv_gpu_memory_used_bytes",
    "nv_gpu_power_usage",
    "nv_inference_request_summary_us",
}
_NAME = re.compile(r"\bnv_[a-z0-9_]+\b")
_TYPE = re.compile(r"^# TYPE (\S+) (\S+)", re.MULTILINE)


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Family name -> type, from a real tritonserver with every optional latency family on
    and a model loaded (per-model families appear only for loaded models)."""
    work = tmp_path_factory.mktemp("triton-metrics")
    repository = work / "model_repository"
    repository.mkdir()
    shutil.copytree(ROOT / "examples" / "model_repository" / "add_sub", repository / "add_sub")
    ports = svc.TritonPorts(svc.free_port(), svc.free_port(), svc.free_port())
    process = svc.start_tritonserver(
        repository, Path(settings.VAR_DIR), ports, work / "tritonserver.log", load=("add_sub",),
        extra_args=("--metrics-config=summary_latencies=true",
                    "--metrics-config=histogram_latencies=true"),
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{ports.metrics}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
    finally:
        svc.stop(process)
    families = dict(_TYPE.findall(text))
    for line in text.splitlines():  # samples without a TYPE line, if any
        if line and not line.startswith("#"):
            families.setdefault(re.split(r"[{\s]", line, maxsplit=1)[0], "untyped")
    yield families


def _family(name: str, families: dict[str, str]) -> str:
    """nv_x_bucket / _sum / _count -> nv_x for histogram and summary families."""
    for suffix in ("_bucket", "_sum", "_count"):
        base = name.removesuffix(suffix)
        if base != name and (families.get(base) in ("histogram", "summary") or base in OPTIONAL):
            return base
    return name


def _queried_names() -> set[str]:
    board = json.loads(DASHBOARD.read_text())
    texts = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    texts += [v["definition"] for v in board["templating"]["list"] if "definition" in v]
    return {name for text in texts for name in _NAME.findall(text)}


def test_every_metric_the_dashboard_queries_is_exported_or_documented_as_optional(exported):
    names = {_family(n, exported) for n in _queried_names()}
    unknown = names - set(exported) - GPU_ONLY - OPTIONAL
    assert not unknown, f"not exported by tritonserver 2.51 nor documented: {sorted(unknown)}"
    assert names >= REQUIRED
    # The summaries are real families of this server, queried by quantile.
    assert exported["nv_inference_request_summary_us"] == "summary"
    # The optional list stays honest: a CPU-only 2.51 server really lacks these.
    assert not (GPU_ONLY | OPTIONAL) & set(exported)


def test_the_history_reads_the_names_a_real_server_exports(exported):
    names = {n for group in statistics.COUNTERS.values() for n in group}
    names |= set(statistics.CPU_GAUGES) | {statistics.REQUEST_SUMMARY}
    names.add("nv_inference_pending_request_count")
    assert names <= set(exported)
    assert set(gpus.GPU_GAUGES) <= GPU_ONLY


def test_the_dashboard_is_importable_and_the_scrape_example_targets_the_metrics_port():
    board = json.loads(DASHBOARD.read_text())
    assert board["uid"] and board["schemaVersion"] >= 36
    assert {v["name"] for v in board["templating"]["list"]} == {"datasource", "instance", "model"}
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}" and panel["targets"]
    scrape = yaml.safe_load(PROMETHEUS.read_text())["scrape_configs"][0]
    assert scrape["metrics_path"] == "/metrics"
    assert all(t.endswith(":8002") for t in scrape["static_configs"][0]["targets"])
