"""Numbers a user types never crash a page or the API: a digit that int() refuses ('²', full-
width digits), more digits than int() reads, or an integer no database column holds each get
a 4xx or a finding naming the field, and nothing is stored (security review, item 7)."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from profiler_app import params
from profiler_app.models import Sweep
from team.roles import VIEWER, set_role

pytestmark = pytest.mark.django_db


@pytest.fixture()
def viewer() -> Client:
    user = get_user_model().objects.create_user("vic", password="pw-vic-12345")
    set_role(user, VIEWER)
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.parametrize(
    "ids",
    [["\u00b2", "1"], ["9" * 5000, "1"], [str(10**23), "1"], ["\uff11", "\uff12"]],
    ids=["superscript", "5000-digits", "1e23", "full-width"],
)
def test_compare_with_ids_that_name_no_sweep_says_pick_two(viewer, ids):
    response = viewer.get("/sweeps/compare/", {"ids": ids})
    assert response.status_code == 302 and response["Location"] == "/sweeps/"


@pytest.mark.parametrize("query", [{"limit": str(10**30)}, {"offset": str(10**30)}])
def test_the_audit_api_clamps_its_limit_and_offset(viewer, query):
    response = viewer.get("/api/v1/audit/", query)
    assert response.status_code == 200, response.content[:300]
    assert isinstance(response.json()["results"], list)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("9" * 5000, "in whole numbers"),
        ("1:" + "9" * 5000, "in whole numbers"),
        ("\uff11:\uff11\uff10", "in whole numbers"),  # full-width digits: \d took them
        ("1:" + str(2**64), "must lie between 1 and"),
    ],
    ids=["5000-digits", "an-end-of-5000-digits", "full-width", "past-uint64"],
)
def test_a_sequence_id_range_of_odd_digits_is_refused_on_its_field(text, words):
    with pytest.raises(params.ParamsError) as refused:
        params.from_flags({"model": "m", "sequence_id_range": text})
    assert words in refused.value.errors["sequence_id_range"]
    assert not Sweep.objects.exists()
