"""In a real browser: edit add_batched in form mode, see the inline error, fix it, save,
find the revision in the history; then see text mode mark an error at its line."""

import pytest

from repository_app.models import ConfigRevision

from .conftest import login

pytestmark = [pytest.mark.integration, pytest.mark.browser]


@pytest.fixture()
def add_batched_config(triton):
    path = triton.repository / "add_batched" / "config.pbtxt"
    before = path.read_bytes()
    yield path
    path.write_bytes(before)


def test_a_form_edit_shows_the_inline_error_then_saves_and_appears_in_the_history(
    browser, web_server, admin_credentials, add_batched_config
):
    context = browser.new_context()
    page = context.new_page()
    try:
        login(page, web_server.url, *admin_credentials)
        page.goto(f"{web_server.url}/models/add_batched/")
        page.click("#edit-config")
        page.wait_for_selector("input[name='cfg-max_batch_size']")
        assert page.input_value("input[name='cfg-preferred_batch_size']") == "8, 16"

        page.fill("input[name='cfg-max_batch_size']", "4")
        page.click("#save-button")
        error = page.locator("[data-field='cfg-preferred_batch_size'] .finding.error").first
        error.wait_for()
        assert "exceeds max_batch_size 4" in error.text_content()
        assert b"max_batch_size: 64" in add_batched_config.read_bytes()  # nothing written

        page.fill("input[name='cfg-preferred_batch_size']", "2, 4")
        page.fill("input[name='message']", "fit the batch to 4")
        page.click("#save-button")
        page.wait_for_selector(".messages li:has-text('Saved config.pbtxt as revision')")
        text = add_batched_config.read_text()
        assert "max_batch_size: 4" in text and "preferred_batch_size: [ 2, 4 ]" in text
        assert text.startswith("# Adds 1 to a FP32 vector")  # written in place, comment kept

        page.click("#history-link")
        revision = ConfigRevision.objects.filter(model="add_batched", source="form").get()
        row = page.locator(f"tr[data-revision='{revision.pk}']")
        assert "form editor" in row.text_content()
        assert "alice" in row.text_content() and "fit the batch to 4" in row.text_content()

        # Text mode: CodeMirror with line numbers marks the validator's error at its line.
        page.goto(f"{web_server.url}/models/add_batched/config/?mode=text")
        page.wait_for_selector(".CodeMirror-linenumber")
        page.evaluate(
            "window.configEditor.setValue("
            "window.configEditor.getValue().replace('max_batch_size: 4', 'max_batch_size: 2'))"
        )
        page.wait_for_selector(".CodeMirror-lint-marker-error")
        item = page.locator("#findings li.error").first
        item.wait_for()
        assert "exceeds max_batch_size 2" in item.text_content()
        assert item.locator("a.goto").text_content().startswith("line ")
    finally:
        context.close()
