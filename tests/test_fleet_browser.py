"""The fleet overview in a real browser, over two real tritonservers ("default" and "solo")
watched by the Celery worker's pollers: the matrix, a load on solo arriving live, a label
filter, and solo stopped then shown down."""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.authtoken.models import Token

from team.roles import OPERATOR, set_role
from triton_api.client import TritonClient

from .conftest import SOLO_ONLY, login, wait_js

pytestmark = [pytest.mark.integration, pytest.mark.browser]
MODEL = "add_sub"  # in both repositories


def _cell(model: str, server: str) -> str:
    return f'document.querySelector(\'#fleet-matrix tr[data-model="{model}"] td[data-server="{server}"]\')'


@pytest.mark.django_db(transaction=True)
def test_the_matrix_follows_a_load_a_label_filter_and_a_stopped_server(
    browser, web_server, celery_worker, admin_credentials, triton, triton_solo, solo_server,
    django_user_model,
):  # fmt: skip
    default = TritonClient(triton.grpc_url, triton.metrics_url)
    was_ready = any(s.state == "READY" for s in default.model_states(MODEL))
    default.load(MODEL)
    operator = django_user_model.objects.create_user("ops-robot")
    set_role(operator, OPERATOR)
    api = Client(HTTP_AUTHORIZATION=f"Token {Token.objects.create(user=operator).key}")
    page = browser.new_page()
    try:
        login(page, web_server.url, *admin_credentials)
        page.goto(f"{web_server.url}/fleet/")
        # Loaded on default and not on solo; a model only solo's repository has. The page
        # shows the poller's last snapshot, which may predate the load above by one poll:
        # the cell then turns READY live.
        wait_js(page, f"{_cell(MODEL, 'default')}.dataset.state === 'READY'")
        assert page.get_attribute(f'tr[data-model="{MODEL}"] td[data-server="solo"]',
                                  "data-state") != "READY"  # fmt: skip
        assert page.get_attribute(f'tr[data-model="{SOLO_ONLY}"] td[data-server="default"]',
                                  "data-state") == "absent"  # fmt: skip
        page.evaluate("() => { window.notReloaded = true; }")
        loaded = api.post(f"/api/v1/models/{MODEL}/load?wait=1&server=solo")
        assert loaded.status_code == 200, loaded.content
        wait_js(page, f"{_cell(MODEL, 'solo')}.dataset.state === 'READY'")
        assert page.evaluate("() => window.notReloaded === true")
        link = page.get_attribute(f'tr[data-model="{MODEL}"] td[data-server="solo"] a', "href")
        assert link == f"/models/{MODEL}/?server=solo"

        page.check('#label-filter input[value="role=solo"]')
        with page.expect_navigation():
            page.click("#label-filter-apply")
        assert "label=role%3Dsolo" in page.url
        assert page.query_selector('[data-server-card="default"]') is None
        assert page.query_selector('[data-server-card="solo"]') is not None
        assert page.query_selector('#fleet-matrix th[data-server="default"]') is None

        triton_solo.stop()
        try:
            note = '#fleet-matrix th[data-server="solo"] [data-k="column-note"]'
            wait_js(
                page,
                f"document.querySelector('{note}').textContent.startsWith('unreachable since')",
            )
            assert page.get_attribute(f'tr[data-model="{SOLO_ONLY}"] td[data-server="solo"]',
                                      "data-state") == "unknown"  # fmt: skip
            assert "down" in page.inner_text('[data-server-card="solo"] [data-k="health"]')
        finally:
            triton_solo.restart()
    finally:
        page.close()
        if not was_ready:
            default.unload(MODEL)
