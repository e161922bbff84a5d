"""A sequence sweep's kind and defaults without Triton: stored at creation (page form, REST
API), shown on the sweep page with the note that perf_analyzer's defaults apply, and the
by-position charts for a built-in sequence sweep only."""

from __future__ import annotations

import dataclasses
import html
from pathlib import Path

import pytest
from django.contrib.auth.models import Permission

from profiler_app import jobs, sweeps
from profiler_app.model_kind import kind_of
from profiler_app.models import Sweep, SweepPoint
from profiler_app.params import SweepParams
from repository_app.modelconfig import parse_config

pytestmark = pytest.mark.django_db

DEMO = Path(__file__).resolve().parent.parent / "examples" / "model_repository"
NOTE = (
    "seq_accumulate is a sequence model and no sequence flag was given: perf_analyzer's "
    "defaults apply (--sequence-length 20, --sequence-length-variation 20%, ids from 1)"
)
CHARTS = ('id="chart-position-throughput"', 'id="chart-position-latency"')


def _kind(name: str):  # type: ignore[no-untyped-def]
    return kind_of(parse_config((DEMO / name / "config.pbtxt").read_text()).config)


@pytest.fixture()
def viewer(django_user_model, client, redis_db):  # type: ignore[no-untyped-def]
    user = django_user_model.objects.create_user("vera", password="pw-vera-1")
    user.user_permissions.add(Permission.objects.get(codename="run_sweeps"))
    client.force_login(user)
    return client


def _sweep(model: str, kind: str, engine: str = "builtin", **flags) -> Sweep:
    params = dataclasses.asdict(SweepParams(model=model, start=1, end=2, **flags))
    sweep = Sweep.objects.create(
        model=model, server="t:8001", params=params, engine=engine, model_kind=kind,
        state=Sweep.State.SUCCEEDED, levels_total=2,
    )  # fmt: skip
    extra = {"first_throughput": 30.0, "middle_throughput": 60.0, "last_throughput": 30.0}
    SweepPoint.objects.create(
        sweep=sweep, level=1, window=-1, throughput=120, requests=120, p95_us=900, extra=extra
    )
    return sweep


def test_the_page_of_a_sequence_sweep_shows_its_kind_its_defaults_and_the_position_charts(
    viewer,
):
    page = viewer.get(f"/sweeps/{_sweep('seq_accumulate', 'sequence (direct)').pk}/")
    text = html.unescape(page.content.decode())
    assert '<dd id="sweep-kind">sequence (direct)</dd>' in text
    assert NOTE in text
    assert "length 20 ± 20% · ids from 1" in text
    assert all(chart in text for chart in CHARTS)


def test_no_note_nor_position_chart_where_they_do_not_belong(viewer):
    told = _sweep("seq_accumulate", "sequence (direct)", sequence_length=5)
    text = html.unescape(viewer.get(f"/sweeps/{told.pk}/").content.decode())
    assert "no sequence flag was given" not in text and all(c in text for c in CHARTS)
    # perf_analyzer measures no position: its sequence sweep has the note, not the charts.
    pa = _sweep("seq_accumulate", "sequence (direct)", engine="perf_analyzer")
    text = html.unescape(viewer.get(f"/sweeps/{pa.pk}/").content.decode())
    assert NOTE in text and not any(c in text for c in CHARTS)
    plain = _sweep("add_batched", "stateless")
    text = html.unescape(viewer.get(f"/sweeps/{plain.pk}/").content.decode())
    assert '<dd id="sweep-kind">stateless</dd>' in text
    assert "perf_analyzer's defaults" not in text and not any(c in text for c in CHARTS)
    older = _sweep("add_batched", "")  # created before kinds were stored
    assert 'id="sweep-kind"' not in viewer.get(f"/sweeps/{older.pk}/").content.decode()


@pytest.fixture()
def served_kind(monkeypatch):  # type: ignore[no-untyped-def]
    """The preflight, as it answers for seq_accumulate on Triton; nothing queued."""
    monkeypatch.setattr(
        sweeps, "preflight", lambda server, params, engine="builtin": _kind(params.model)
    )
    monkeypatch.setattr(jobs, "dispatch", lambda job_id: True)


def test_the_api_stores_the_kind_and_answers_the_defaults_note(viewer, served_kind):
    response = viewer.post(
        "/api/v1/sweeps/", {"model": "seq_accumulate"}, content_type="application/json"
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["notes"] == [NOTE] and body["model_kind"] == "sequence (direct)"
    assert Sweep.objects.get(pk=body["id"]).model_kind == "sequence (direct)"
    told = viewer.post(
        "/api/v1/sweeps/",
        {"model": "seq_accumulate", "sequence_length": 5},
        content_type="application/json",
    )
    assert told.status_code == 201 and told.json()["notes"] == []


def test_the_form_stores_the_kind_and_a_rerun_keeps_it(viewer, served_kind):
    form = {
        "mode": "concurrency", "concurrency_range": "1:2:1", "percentile": "95",
        "measurement_interval": "500", "stability_percentage": "50", "max_trials": "3",
        "batch_size": "1", "input_data": "random", "engine": "builtin", "protocol": "grpc",
        "sequence_length": "20", "sequence_length_variation": "20", "num_of_sequences": "4",
    }  # fmt: skip
    response = viewer.post("/models/seq_accumulate/benchmark/", form)
    assert response.status_code == 302, response.content.decode()[-3000:]
    sweep = Sweep.objects.get()
    assert sweep.model_kind == "sequence (direct)" and sweep.sequence
    assert sweeps.rerun(sweep.pk).model_kind == "sequence (direct)"
