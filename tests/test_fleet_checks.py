"""The fleet matrix marks each cell where the model's checks ran on that server: every
check's last run passed, or how many failed (hover: which, the worst difference); read
for the whole matrix in one query."""

from __future__ import annotations

import pytest
from django.test import Client

from inference.models import Check, CheckRun

pytestmark = [pytest.mark.integration]


def _run(check: Check, passed: bool, worst: float | None = None) -> None:
    CheckRun.objects.create(saved_check=check, server="default", username="ada",
                            trigger="on demand", state="succeeded", passed=passed, worst=worst)  # fmt: skip


@pytest.mark.django_db
def test_the_matrix_marks_where_checks_passed_or_failed(triton, django_user_model):
    admin = django_user_model.objects.create_superuser("ada", password="pw-ada-12345")
    made = {}
    for model, name in (("add_sub", "sum"), ("add_sub", "difference"), ("add_sub", "third"),
                        ("add_batched", "plus one")):  # fmt: skip
        made[name] = Check.objects.create(
            model=model, name=name, request={}, expected={}, username="ada"
        )
    _run(made["sum"], False, 0.5)  # an older failure, superseded below
    _run(made["sum"], True, 0.0)
    _run(made["difference"], False, 0.25)
    _run(made["third"], True, 0.0)
    _run(made["plus one"], True, 0.0)
    client = Client()
    client.force_login(admin)
    html = client.get("/fleet/").content.decode()

    def mark(model: str) -> str:
        cell = html.split(f'<tr data-model="{model}">')[1].split("</tr>")[0]
        cell = cell.split('td data-server="default"')[1].split("</td>")[0]
        return cell.split('data-k="checks"')[1] if 'data-k="checks"' in cell else ""

    assert 'title="failing: difference; worst difference 0.25">✗ 1 of 3 checks</span>' in mark(
        "add_sub"
    )
    assert ">✓ checks</span>" in mark("add_batched")
    assert mark("busy_compute") == ""  # no check ran there
    listed = client.get("/fleet/states.json").json()["checks"]
    assert {(m["model"], m["text"]) for m in listed} == {
        ("add_sub", "✗ 1 of 3 checks"), ("add_batched", "✓ checks"),
    }  # fmt: skip
