"""Two people, two browsers: one loads a model, the other sees it happen without reloading."""

import pytest
from django.contrib.auth import get_user_model

from registry import servers
from team.roles import OPERATOR, VIEWER, set_role
from triton_api.client import TritonClient

from .conftest import login, wait_js

pytestmark = [pytest.mark.integration, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_viewer_sees_an_operators_load_live(browser, web_server, celery_worker, triton):
    for name, role in (("olga", OPERATOR), ("vince", VIEWER)):
        user = get_user_model().objects.create_user(name, password=f"pw-{name}-12345")
        set_role(user, role)
    operator_ctx, viewer_ctx = browser.new_context(), browser.new_context()
    try:
        operator, viewer = operator_ctx.new_page(), viewer_ctx.new_page()
        login(operator, web_server.url, "olga", "pw-olga-12345")
        login(viewer, web_server.url, "vince", "pw-vince-12345")
        viewer.wait_for_selector("#live-status.ok")  # the overview's activity feed
        models_page = viewer_ctx.new_page()
        models_page.goto(f"{web_server.url}/models/")
        models_page.wait_for_selector("#live-status.ok")

        # The viewer's buttons are disabled with the reason.
        viewer.goto(f"{web_server.url}/models/busy_compute/")
        assert viewer.get_attribute("button[data-action=load]", "disabled") is not None
        assert "your role cannot load or unload models" in viewer.text_content("#control-disabled")
        viewer.goto(f"{web_server.url}/")
        viewer.wait_for_selector("#live-status.ok")

        operator.goto(f"{web_server.url}/models/busy_compute/")
        operator.wait_for_selector("#live-status.ok")
        operator.click("button[data-action=load]")
        wait_js(
            operator,
            "document.getElementById('model-state').textContent === 'READY'",
        )
        wait_js(
            models_page,
            "document.querySelector('tr[data-model=\"busy_compute\"] [data-state-cell]').textContent === 'READY'",
        )
        wait_js(
            viewer,
            "document.getElementById('activity').textContent.includes('busy_compute loaded')",
        )
        first_row = viewer.text_content("#activity tr:first-child")
        assert "olga" in first_row and "load" in first_row and "ok" in first_row
    finally:
        operator_ctx.close()
        viewer_ctx.close()
        TritonClient(triton.grpc_url, triton.metrics_url).unload("busy_compute")


def test_two_people_watch_the_same_sweep_grow_live(browser, web_server, celery_worker, triton):
    from profiler_app import sweeps
    from profiler_app.params import SweepParams

    for name, role in (("sara", OPERATOR), ("tom", VIEWER)):
        user = get_user_model().objects.create_user(name, password=f"pw-{name}-12345")
        set_role(user, role)
    TritonClient(triton.grpc_url, triton.metrics_url).load("add_batched")
    first_ctx, second_ctx = browser.new_context(), browser.new_context()
    try:
        sara, tom = first_ctx.new_page(), second_ctx.new_page()
        login(sara, web_server.url, "sara", "pw-sara-12345")
        login(tom, web_server.url, "tom", "pw-tom-12345")
        sweep = sweeps.create_sweep(servers.default(),
            SweepParams(model="add_batched", start=1, end=3, measurement_window_ms=700,
                        stability_percentage=50, max_windows=4),
            user=get_user_model().objects.get(username="sara"),
        )  # fmt: skip
        for page in (sara, tom):
            page.goto(f"{web_server.url}/sweeps/{sweep.pk}/")
            page.wait_for_selector("#live-status.ok")
        points = "document.getElementById('chart-throughput').data[0].x.length"
        for page in (sara, tom):
            wait_js(page, f"{points} >= 2")
        for page in (sara, tom):
            wait_js(
                page, "document.getElementById('sweep-state').textContent === 'succeeded'", 120000
            )
            assert page.evaluate(points) == 3
        # The owner gets a notification that the sweep finished; the other viewer does not.
        wait_js(sara, "document.getElementById('toasts').textContent.includes('succeeded')")
        assert "succeeded" not in tom.text_content("#toasts")
    finally:
        first_ctx.close()
        second_ctx.close()
        TritonClient(triton.grpc_url, triton.metrics_url).unload("add_batched")
