"""Prometheus parsing and the server page's derived rates."""

from triton_api.prometheus import parse_prometheus
from triton_api.statistics import derive_server_metrics, summarize_model_stats

SCRAPE_1 = """
# HELP nv_inference_request_success Number of successful inference requests
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="add",version="1"} 100
nv_inference_request_failure{model="add",version="1"} 0
nv_inference_count{model="add",version="1"} 100
nv_inference_queue_duration_us{model="add",version="1"} 5000
nv_inference_pending_request_count{model="add",version="1"} 3
nv_gpu_utilization{gpu_uuid="GPU-1"} 0.5
nv_gpu_memory_used_bytes{gpu_uuid="GPU-1"} 1000
bad line here
nan_metric{model="x"} NaN
"""
SCRAPE_2 = SCRAPE_1.replace("} 100\n", "} 300\n").replace("5000", "9000")


def test_it_parses_labels_and_values_and_skips_junk():
    samples = parse_prometheus(SCRAPE_1)
    names = [s.name for s in samples]
    assert "nan_metric" not in names and "bad" not in names
    first = samples[0]
    assert first.name == "nv_inference_request_success"
    assert first.labels == {"model": "add", "version": "1"}
    assert first.value == 100


def test_rates_between_two_scrapes():
    derived = derive_server_metrics(parse_prometheus(SCRAPE_1), parse_prometheus(SCRAPE_2), 2.0)
    row = derived["models"]["add"]
    assert row["requests_per_s"] == 100.0  # 200 more requests in 2 s
    assert row["queue_us"] == 20.0  # 4000 µs over 200 inferences
    assert row["pending"] == 3
    assert derived["gpu_metrics_present"] is True
    assert derived["gpus"]["GPU-1"] == {"utilization": 0.5, "memory_used_bytes": 1000}


def test_a_cpu_only_server_has_no_gpu_metrics():
    derived = derive_server_metrics(None, parse_prometheus(SCRAPE_1.split("nv_gpu")[0]), 0)
    assert derived["gpu_metrics_present"] is False
    assert derived["models"]["add"]["requests_per_s"] is None


def test_statistics_summary_gives_average_batch_and_stage_times():
    entry = {
        "version": "1",
        "inference_count": "40",
        "execution_count": "10",
        "inference_stats": {
            "success": {"count": "10", "ns": "1000000"},
            "queue": {"count": "10", "ns": "200000"},
            "compute_infer": {"count": "10", "ns": "500000"},
        },
    }
    summary = summarize_model_stats(entry)
    assert summary["avg_batch_size"] == 4.0
    assert summary["success_count"] == 10 and summary["fail_count"] == 0
    assert summary["avg_queue_us"] == 20.0
    assert summary["avg_compute_infer_us"] == 50.0
    assert summary["avg_compute_input_us"] is None
