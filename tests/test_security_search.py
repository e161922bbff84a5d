"""Config searches count before they build, bound every knob, and are cancelled or
resumed only by their owner or an admin.

The search space is counted by arithmetic (values per knob, then the product of the
sizes) before any list or grid exists; each knob has at most 64 values and its own bounds
(max_batch_size within Triton's int32, delays up to 10 s, windows up to 600000 ms, the
sweep's concurrency bound), refused on the field with no Search row. Actors: alice
(Operator) owns the searches, bob is another Operator, dana an Admin.
"""

from __future__ import annotations

import builtins
import shutil
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from django.utils import timezone

from profiler_app import jobs, sweeps
from profiler_app.models import Search, Sweep
from profiler_app.search import forms as search_forms
from profiler_app.search import runner, target
from profiler_app.search.forms import SearchForm
from profiler_app.search.objective import Constraints
from profiler_app.search.space import Dimensions, Knobs, Space, SpaceError
from registry import servers
from team.models import AuditEvent
from team.roles import ADMIN, OPERATOR, set_role

pytestmark = pytest.mark.django_db

DEMO = Path(__file__).resolve().parent.parent / "examples" / "model_repository"
MODEL = "busy_compute"
GOOD = {
    "mode": "grid", "kind": "KIND_CPU", "counts": "1:2", "batching_on": "on",
    "delays": "200", "preferred": "none", "concurrency_range": "2",
    "measurement_interval": "300", "max_trials": "3", "stability_percentage": "100",
    "percentile": "95", "latency_budget": "50", "objective": "max_throughput",
}  # fmt: skip
# The request that spent 47 s of web CPU before its 400.
HUGE = {"counts": "1:64", "max_batch_sizes": "1:300", "delays": "0:300"}

# (field changes, the field that answers, words of the message)
BAD = [
    (HUGE, "max_batch_sizes", "300 max_batch_size values is too many: at most 64 values per knob"),
    (
        {"max_batch_sizes": "1:100000000000"},
        "max_batch_sizes",
        "100,000,000,000 max_batch_size values is too many: at most 64",
    ),
    (
        {"max_batch_sizes": "8,100000000000"},
        "max_batch_sizes",
        "max_batch_size values must be between 1 and 2147483647",
    ),
    (
        {"max_batch_sizes": ",".join(str(v) for v in range(1, 66))},
        "max_batch_sizes",
        "65 max_batch_size values is too many",
    ),
    ({"max_runs": str(2**63)}, "max_runs", "less than or equal to 10000"),  # was a 500
    ({"counts": "0:2"}, "counts", "instance counts must be between 1 and 64"),
    ({"delays": "0,10000001"}, "delays", "between 0 and 10000000"),
    ({"delays": "0:1000000000000:1"}, "delays", "is too many: at most 64 values per knob"),
    ({"preferred": "4; 8,3000000000"}, "preferred", "preferred batch sizes must be between 1"),
    ({"preferred": "; ".join(["4"] * 65)}, "preferred", "65 preferred batch size sets"),
    ({"measurement_interval": "1000000000"}, "measurement_interval", "at most 600000 ms"),
    ({"concurrency_range": "1e308"}, "concurrency_range", "Concurrency can be at most 4096"),
    ({"concurrency_range": "1:2:1e-300"}, "concurrency_range", "far more than 200 levels"),
    ({"concurrency_range": "1:inf"}, "concurrency_range", "inf is not a finite number"),
]


@pytest.fixture(autouse=True)
def no_triton_no_big_lists(monkeypatch):
    """Refusals come before Triton is asked, and no knob's range is listed past 64
    values: either fails the test at once (a reverted fix would otherwise hang it on
    range(1, 10**11))."""

    def asked_triton(*_a):
        raise AssertionError("Triton was asked before the search was refused")

    def small_range(*args):
        values = builtins.range(*args)
        if len(values) > 1000:
            raise AssertionError(f"a knob's range of {len(values):,} values was listed")
        return values

    monkeypatch.setattr(target, "get_client", asked_triton)
    monkeypatch.setattr(runner, "get_client", asked_triton)
    monkeypatch.setattr(sweeps, "get_client", asked_triton)
    monkeypatch.setattr(target, "has_gpus", lambda *_: False)
    monkeypatch.setattr(search_forms, "range", small_range, raising=False)
    monkeypatch.setattr(jobs, "dispatch", lambda sweep_id: True)


@pytest.fixture()
def repository(settings, tmp_path):
    shutil.copytree(DEMO / MODEL, tmp_path / MODEL)
    settings.MODEL_REPOSITORY = tmp_path
    return tmp_path


def _user(name: str, role: str):
    user = get_user_model().objects.create_user(name, password=f"pw-{name}-12345")
    set_role(user, role)
    return user


def _page(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture()
def alice():
    return _user("alice", OPERATOR)


@pytest.fixture()
def bob():
    return _user("bob", OPERATOR)


@pytest.fixture()
def dana():
    return _user("dana", ADMIN)


# --- counting and bounds ----------------------------------------------------------------------


@pytest.mark.parametrize(("change", "field", "message"), BAD)
def test_the_form_refuses_each_bad_knob_on_its_field(change, field, message):
    form = SearchForm({**GOOD, **change}, model=MODEL, server=servers.default())
    assert not form.is_valid()
    assert field in form.errors, form.errors
    assert any(message in e for e in form.errors[field]), form.errors[field]
    assert form.search_request is None


def test_the_api_refuses_each_bad_knob_with_400_naming_the_field(alice, repository, redis_db):
    api = _page(alice)
    for change, field, message in BAD:
        response = api.post(
            "/api/v1/searches/", {"model": MODEL, **GOOD, **change}, content_type="application/json"
        )
        assert response.status_code == 400, (change, response.content)
        assert response.json()["field"] == field, (change, response.json())
        assert message in response.json()["message"], (change, response.json())
    assert not Search.objects.exists() and not Sweep.objects.exists()


def test_the_api_searches_on_the_server_the_body_names(alice, repository, redis_db):
    api = _page(alice)
    body = {"model": MODEL, **GOOD, "server": "nope"}
    unknown = api.post("/api/v1/searches/", body, content_type="application/json")
    assert unknown.status_code == 404, unknown.content
    assert "no Triton server named 'nope'" in unknown.content.decode()
    clash = api.post(
        "/api/v1/searches/?server=default", {**body, "server": "other"},
        content_type="application/json",
    )  # fmt: skip
    assert clash.status_code == 400 and clash.json()["field"] == "server", clash.content
    assert not Search.objects.exists() and not Sweep.objects.exists()


def test_the_grid_is_counted_before_any_candidate_is_built(monkeypatch):
    built = []

    def knobs(self, point):
        built.append(point)
        if len(built) > 1000:
            raise AssertionError("the grid was built before it was counted")
        return real(self, point)

    real = Dimensions.knobs
    monkeypatch.setattr(Dimensions, "knobs", knobs)
    values = tuple(range(1, 65))
    dims = Dimensions(
        counts=values,
        kind="KIND_CPU",
        max_batch_sizes=values,
        batching=(None, *values),
        preferred=tuple((v,) for v in values),
    )
    assert dims.candidate_count() == 64 * 64 * (1 + 64 * 64)
    with pytest.raises(SpaceError, match="16,781,312 candidates is too many"):
        dims.grid()
    assert built == []
    small = Space(counts=(1, 2), batching_off=True, delays_us=(0, 100), preferred=((), (4,)))
    grid = small.dimensions(Knobs(1, "KIND_CPU", 8, False)).grid()
    assert len(grid) == small.dimensions(Knobs(1, "KIND_CPU", 8, False)).candidate_count() == 10


def test_a_space_built_in_code_is_bounded_too():
    for bad in (
        {"max_batch_sizes": (10**11,)},
        {"delays_us": (10**9,)},
        {"preferred": ((2**31,),)},
        {"counts": tuple(range(1, 66))},
    ):
        with pytest.raises(SpaceError):
            Space(**bad)
    assert Space(counts=(1, 64), max_batch_sizes=(2**31 - 1,), delays_us=(10_000_000,))


# --- who may cancel and resume ----------------------------------------------------------------


def _search(owner, state: str = "queued") -> Search:
    carrier = Sweep.objects.create(
        model=MODEL, server="default",
        kind="search", params={"model": MODEL, "start": 2, "end": 2, "step": 1},
        created_by=owner, state=state, queued_at=timezone.now(), levels_total=2,
    )  # fmt: skip
    return Search.objects.create(
        sweep=carrier, model=MODEL, mode="grid", space=Space(counts=(1, 2)).to_json(),
        constraints=Constraints().to_json(), baseline=Knobs(1, "KIND_CPU", 8, False).to_json(),
    )  # fmt: skip


def test_another_operator_cannot_cancel_or_resume_a_search(alice, bob, redis_db):
    queued, failed = _search(alice), _search(alice, "failed")
    client = _page(bob)
    refusals = [
        client.post(f"/searches/{queued.pk}/cancel", HTTP_ACCEPT="application/json"),
        client.post(f"/api/v1/searches/{queued.pk}/cancel"),
        client.post(f"/searches/{failed.pk}/resume", HTTP_ACCEPT="application/json"),
        client.post(f"/api/v1/searches/{failed.pk}/resume"),
    ]
    for response in refusals:
        assert response.status_code == 403, response.content
        assert response.json()["message"] == (
            "Started by alice: only the user who started it, or an Admin, can cancel or resume "
            "this search."
        )
    assert Sweep.objects.get(pk=queued.sweep_id).state == "queued"
    assert Sweep.objects.get(pk=failed.sweep_id).state == "failed"
    denied = AuditEvent.objects.filter(username="bob", outcome="denied")
    assert sorted(denied.values_list("action", flat=True)) == [
        "search.cancel",
        "search.cancel",
        "search.resume",
        "search.resume",
    ]


def test_the_owner_and_an_admin_may_cancel_a_search(alice, dana, redis_db):
    mine, theirs, cli = _search(alice), _search(alice), _search(None)
    assert _page(alice).post(f"/api/v1/searches/{mine.pk}/cancel").status_code == 200
    assert _page(dana).post(f"/api/v1/searches/{theirs.pk}/cancel").status_code == 200
    refused = _page(alice).post(f"/api/v1/searches/{cli.pk}/cancel")
    assert refused.status_code == 403 and "only an Admin" in refused.json()["message"]
    assert _page(dana).post(f"/api/v1/searches/{cli.pk}/cancel").status_code == 200
    assert {s.state for s in Sweep.objects.all()} == {"cancelled"}


def test_the_search_page_says_who_may_cancel_and_hides_the_buttons(alice, bob, redis_db):
    search = _search(alice)
    note = (
        "Started by alice: only the user who started it, or an Admin, can cancel or resume "
        "this search."
    )
    theirs = _page(bob).get(f"/searches/{search.pk}/").content.decode()
    assert note in theirs
    assert 'id="btn-cancel"' not in theirs and 'id="btn-resume"' not in theirs
    mine = _page(alice).get(f"/searches/{search.pk}/").content.decode()
    assert note in mine and 'id="btn-cancel"' in mine


def test_the_report_file_name_is_escaped(alice, redis_db):
    search = _search(alice, "succeeded")
    Search.objects.filter(pk=search.pk).update(model='a"b\r\nX-Injected: 1')
    response = _page(alice).get(f"/searches/{search.pk}/report.html")
    assert response.status_code == 200
    assert response["Content-Disposition"] == (
        f"attachment; filename*=utf-8''config-search-{search.pk}-a%22b%0D%0AX-Injected%3A%201.html"
    )
    assert not response.has_header("X-Injected")
