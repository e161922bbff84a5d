"""In a real browser (issue #16): Restore in the history table restores (a POST to the
restore view, no CSRF token in any URL); form mode has no blank rows, "Add row" adds one,
and the form is validated as you type with a summary that stays in view."""

from __future__ import annotations

import difflib

import pytest

from registry import servers
from repository_app.editor import saving
from repository_app.models import ConfigRevision

from .conftest import login, wait_js

pytestmark = [pytest.mark.integration, pytest.mark.browser]


@pytest.fixture()
def add_sub_config(triton):  # type: ignore[no-untyped-def]
    path = triton.repository / "add_sub" / "config.pbtxt"
    before = path.read_bytes()
    yield path
    path.write_bytes(before)


@pytest.fixture()
def add_batched_config(triton):  # type: ignore[no-untyped-def]
    path = triton.repository / "add_batched" / "config.pbtxt"
    before = path.read_bytes()
    yield path
    path.write_bytes(before)


def test_restore_in_the_history_table_posts_and_restores(
    browser, web_server, admin_credentials, add_sub_config
):
    original = add_sub_config.read_text()
    changed = original.replace("max_batch_size: 8", "max_batch_size: 4")
    saving.save_config(
        "add_sub",
        changed,
        server=servers.default(),
        base_sha256=saving.read_current("add_sub", servers.default()).sha256,
        author_id=None,
        source="text",
    )  # revision #1: the file as first seen, #2: this save
    first = ConfigRevision.objects.get(model="add_sub", number=1)
    context = browser.new_context()
    page = context.new_page()
    requests: list[tuple[str, str]] = []
    page.on("request", lambda r: requests.append((r.method, r.url)))
    try:
        login(page, web_server.url, *admin_credentials)
        page.goto(f"{web_server.url}/models/add_sub/config/history/")
        row = page.locator("tr[data-number='1']")
        assert "#1" in row.text_content()
        row.locator("button.restore").click()
        page.wait_for_selector(".messages li:has-text('Restored revision #1 as new revision #3.')")
        assert add_sub_config.read_text() == original
        restore = f"/models/add_sub/config/revisions/{first.pk}/restore"
        assert ("POST", f"{web_server.url}{restore}") in requests
        assert not [url for _, url in requests if "csrfmiddlewaretoken" in url]
        assert not [url for _, url in requests if "/config/diff/" in url]
        newest = ConfigRevision.objects.filter(model="add_sub").order_by("-id").first()
        assert newest is not None and (newest.number, newest.source) == (3, "restore")

        # Compare still compares, without a token in its URL either.
        page.check("input[name=a][aria-label='left #1']")
        page.check("input[name=b][aria-label='right #2']")
        page.click("#compare-button")
        page.wait_for_selector("h1:has-text('revision #1 → #2')")
        assert "csrfmiddlewaretoken" not in page.url
    finally:
        context.close()


def test_add_row_and_live_validation_in_form_mode(
    browser, web_server, admin_credentials, add_batched_config
):
    original = add_batched_config.read_text()
    context = browser.new_context(viewport={"width": 1200, "height": 700})
    page = context.new_page()
    summary = "document.getElementById('summary-text').textContent"
    try:
        login(page, web_server.url, *admin_credentials)
        page.goto(f"{web_server.url}/models/add_batched/config/")
        page.wait_for_selector("input[name='cfg-max_batch_size']")
        # No blank row (its preset KIND_AUTO looked like data): "Add row" adds one.
        assert page.locator("input[name='instance_group-1-count']").count() == 0
        assert page.input_value("input[name='instance_group-TOTAL_FORMS']") == "1"
        page.click("#add-instance_group")
        page.wait_for_selector("input[name='instance_group-1-count']")
        assert page.input_value("input[name='instance_group-TOTAL_FORMS']") == "2"
        page.fill("input[name='instance_group-1-count']", "2")
        page.select_option("select[name='instance_group-1-kind']", "KIND_CPU")

        # Validated as you type: the finding appears at its field and in the summary.
        page.fill("input[name='cfg-max_batch_size']", "4")
        preferred = (
            "document.querySelector(\"[data-field='cfg-preferred_batch_size'] .finding.error\")"
        )
        wait_js(page, preferred)
        wait_js(page, f"{summary}.includes('errors block saving')")
        assert (
            "exceeds max_batch_size 4"
            in page.locator("#summary-findings li.error").first.text_content()
        )

        # A format error in one field: the other findings are still shown.
        page.fill("input[name='input-0-dims']", "abc")
        dims_error = "document.querySelector(\"[data-field='input-0-dims'] .field-error\")"
        wait_js(page, f"{dims_error} && {preferred}")
        wait_js(page, "!document.getElementById('summary-format').hidden")
        unreadable = page.locator("#summary-findings li.format-error").text_content()
        assert unreadable.startswith("cannot read input[0].dims: 'abc' is not a whole number")
        assert (
            "'abc' is not a whole number"
            in page.locator("[data-field='input-0-dims'] .field-error").text_content()
        )

        # The summary stays in view at the bottom of the form.
        page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
        top = page.evaluate("document.getElementById('form-summary').getBoundingClientRect().top")
        assert 0 <= top < 700

        page.fill("input[name='input-0-dims']", "16")
        page.fill("input[name='cfg-max_batch_size']", "64")
        wait_js(page, f"!{dims_error} && !{preferred} && !{summary}.includes('block saving')")
        wait_js(page, "document.getElementById('summary-format').hidden")
        page.click("#save-button")
        page.wait_for_selector(".messages li:has-text('Saved config.pbtxt as revision')")
        changes = [
            line
            for line in difflib.unified_diff(
                original.splitlines(), add_batched_config.read_text().splitlines(), lineterm="", n=0
            )
            if line[:1] in "+-" and not line.startswith(("---", "+++"))
        ]
        assert changes == [
            "-instance_group [ { count: 1 kind: KIND_CPU } ]",
            "+instance_group [ { count: 1 kind: KIND_CPU }, { count: 2 kind: KIND_CPU } ]",
        ]
    finally:
        context.close()


def test_the_diff_keeps_line_numbers_narrow_and_wraps_code_between_words(
    browser, web_server, admin_credentials, add_sub_config
):
    original = add_sub_config.read_text()
    words = " ".join(f"word{i:03d}xyz" for i in range(80))
    saving.save_config(
        "add_sub", original + f"# LONGLINE {words}\n", server=servers.default(),
        base_sha256=saving.read_current("add_sub", servers.default()).sha256,
        author_id=None, source="text",
    )  # fmt: skip
    first, second = ConfigRevision.objects.filter(model="add_sub").order_by("-id")[:2][::-1]
    context = browser.new_context(viewport={"width": 1000, "height": 800})
    page = context.new_page()
    try:
        login(page, web_server.url, *admin_credentials)
        page.goto(f"{web_server.url}/models/add_sub/config/diff/?a={first.pk}&b={second.pk}")
        page.wait_for_selector("#diff")
        table, number = page.evaluate(
            "[document.getElementById('diff').getBoundingClientRect().width,"
            " document.querySelector('#diff td.ln').getBoundingClientRect().width]"
        )
        assert number < table * 0.1, (number, table)
        # The long line wraps onto several lines, and no word is cut across two.
        wrapped, split = page.evaluate(
            """(() => {
              const pre = [...document.querySelectorAll('#diff td.r pre')]
                .find(p => p.textContent.includes('LONGLINE'));
              const node = pre.firstChild, split = [], re = /\\S+/g;
              let m;
              while ((m = re.exec(node.textContent))) {
                const range = document.createRange();
                range.setStart(node, m.index);
                range.setEnd(node, m.index + m[0].length);
                const tops = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
                if (tops.size > 1) split.push(m[0]);
              }
              const line = parseFloat(getComputedStyle(pre).lineHeight) || 16;
              return [pre.getBoundingClientRect().height / line, split];
            })()"""
        )
        assert wrapped >= 3 and split == [], (wrapped, split)
    finally:
        context.close()
