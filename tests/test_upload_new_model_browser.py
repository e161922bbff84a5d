"""In a real browser: an Operator uploads resnet.onnx as a new model, is told it was stored
as model.onnx, clicks "Load it now", and the model page explains that this Triton (the
nvidia-pytriton build) has no onnxruntime backend."""

from __future__ import annotations

import shutil

import pytest
from django.contrib.auth import get_user_model

from team.roles import OPERATOR, VIEWER, set_role
from triton_api.client import TritonClient

from .conftest import login, wait_js
from .test_upload_protocol import tiny_onnx

pytestmark = [pytest.mark.integration, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_a_new_model_under_any_name_is_stored_as_model_onnx_and_offered_a_trial_load(
    browser, web_server, celery_worker, triton, tmp_path
):
    name = "resnet_trial"
    folder = triton.repository / name
    source = tmp_path / "resnet.onnx"
    source.write_bytes(tiny_onnx())
    for user, role in (("otto", OPERATOR), ("vera", VIEWER)):
        set_role(get_user_model().objects.create_user(user, password=f"pw-{user}-12345"), role)
    context = browser.new_context()
    page = context.new_page()
    try:
        # A viewer's upload page offers no upload, so no trial load either.
        login(page, web_server.url, "vera", "pw-vera-12345")
        page.goto(f"{web_server.url}/uploads/new-model/")
        assert page.locator("#upload-form").count() == 0
        context.clear_cookies()

        login(page, web_server.url, "otto", "pw-otto-12345")
        page.goto(f"{web_server.url}/uploads/new-model/")
        page.fill("#upload-model", name)
        page.select_option("#upload-backend", "onnxruntime")
        page.set_input_files("#upload-file", str(source))
        page.click("#upload-start")
        wait_js(page, "document.querySelector('.upload-done') !== null")
        assert page.text_content(".upload-done") == "version 1 published"
        assert page.text_content(".upload-model-link") == f"open {name}"
        note = page.text_content(".upload-note")
        assert "stored as model.onnx, the name Triton loads (uploaded as resnet.onnx)" in note
        assert "config.pbtxt generated from the ONNX graph" in note
        assert sorted(p.name for p in (folder / "1").iterdir()) == ["model.onnx"]

        page.click(".upload-load-button")
        page.wait_for_url(f"{web_server.url}/models/{name}/")
        wait_js(
            page,
            "document.getElementById('action-message').textContent"
            ".includes('This Triton has no onnxruntime backend')",
        )
        # The failure replaced "load started": no green message of it stays beside it.
        assert page.locator(".messages").count() == 0
        message = page.text_content("#action-message")
        assert "started" not in message
        assert "unable to find backend library for backend 'onnxruntime'" in message
        assert "serves Python models only" in message
    finally:
        context.close()
        TritonClient(triton.grpc_url, triton.metrics_url).unload(name)
        shutil.rmtree(folder, ignore_errors=True)
