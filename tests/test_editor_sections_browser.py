"""In a real browser (issue #21): the template banner fills a template into unsaved text,
the sequence-batching form (strategy, control inputs, validated as you type) saves only its
lines, and an ensemble's step graph is drawn from the config, follows edits of the tensor
maps, and a map edit saves that line. Every wait is for a condition, never for a time."""

from __future__ import annotations

import difflib
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import login, wait_js

pytestmark = [pytest.mark.integration, pytest.mark.browser]

TEMPLATE = """name: "tpl_demo"
backend: "python"
max_batch_size: ${triton_max_batch_size}
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
parameters { key: "engine_dir" value { string_value: "${engine_dir}" } }
"""
SEQUENCE = """# A stateful counter (test model).
name: "seq_demo"
backend: "python"
max_batch_size: 4
input [
  { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "START" data_type: TYPE_INT32 dims: [ 1 ] }
]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { count: 1 kind: KIND_CPU } ]
"""
PRE = """name: "pre_demo"
backend: "python"
input [ { name: "RAW" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "FEAT" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""
CLS = """name: "cls_demo"
backend: "python"
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [
  { name: "Y" data_type: TYPE_FP32 dims: [ 2 ] },
  { name: "SCORES" data_type: TYPE_FP32 dims: [ 2 ] }
]
"""
ENSEMBLE = """name: "ens_demo"
platform: "ensemble"   # pre_demo, then cls_demo
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] } ]
ensemble_scheduling {
  step [
    {
      model_name: "pre_demo"
      model_version: -1
      input_map { key: "RAW" value: "IN" }
      output_map { key: "FEAT" value: "mid" }
    },
    {
      model_name: "cls_demo"
      model_version: -1
      input_map { key: "X" value: "mid" }
      output_map { key: "Y" value: "OUT" }
    }
  ]
}
"""


@pytest.fixture()
def models(triton) -> Iterator[dict[str, Path]]:  # type: ignore[no-untyped-def]
    """Model folders of this test in the Triton fixture's repository (config.pbtxt only:
    nothing is loaded), removed afterwards."""
    made: dict[str, Path] = {}
    for name, text in {
        "tpl_demo": TEMPLATE,
        "seq_demo": SEQUENCE,
        "pre_demo": PRE,
        "cls_demo": CLS,
        "ens_demo": ENSEMBLE,
    }.items():
        folder = triton.repository / name
        folder.mkdir()
        (folder / "config.pbtxt").write_text(text)
        made[name] = folder / "config.pbtxt"
    yield made
    for path in made.values():
        shutil.rmtree(path.parent, ignore_errors=True)


def changed_lines(before: str, after: str) -> list[str]:
    return [
        line
        for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("---", "+++"))
    ]


def open_editor(browser, web_server, admin_credentials, model: str):  # type: ignore[no-untyped-def]
    context = browser.new_context(viewport={"width": 1300, "height": 900})
    page = context.new_page()
    login(page, web_server.url, *admin_credentials)
    page.goto(f"{web_server.url}/models/{model}/config/")
    return context, page


def checked_after(page, before: str) -> None:
    """Wait for a live check newer than ``before`` (form.dataset.checked counts them)."""
    wait_js(page, f"(document.getElementById('editor-form').dataset.checked || '0') !== '{before}'")


def check_count(page) -> str:
    return page.evaluate("() => document.getElementById('editor-form').dataset.checked || '0'")


def test_the_template_banner_fills_the_placeholders_into_unsaved_text(
    browser, web_server, admin_credentials, models
):
    context, page = open_editor(browser, web_server, admin_credentials, "tpl_demo")
    try:
        page.wait_for_selector("#template-banner")
        assert "This is a template" in page.text_content("#template-banner h2")
        rows = page.locator("#template-banner tr[data-placeholder]")
        assert rows.count() == 2
        assert "3:17" in page.text_content("tr[data-placeholder='triton_max_batch_size']")
        page.fill("input[name='tpl-triton_max_batch_size']", "8")
        page.fill("input[name='tpl-engine_dir']", "/engines/llama")
        page.click("#fill-template-button")
        page.wait_for_selector(".messages li:has-text('Nothing is saved yet')")
        wait_js(
            page,
            "window.configEditor && window.configEditor.getValue().includes('max_batch_size: 8')",
        )
        text = page.evaluate("() => window.configEditor.getValue()")
        assert (
            text.strip()
            == TEMPLATE.replace("${triton_max_batch_size}", "8")
            .replace("${engine_dir}", "/engines/llama")
            .strip()
        )
        assert page.input_value("input[name=mode]") == "text"
        assert page.locator("#template-banner").count() == 0  # nothing left to fill
        assert models["tpl_demo"].read_text() == TEMPLATE  # not saved
        page.click("#save-button")
        page.wait_for_selector(".messages li:has-text('Saved config.pbtxt as revision')")
        assert "max_batch_size: 8\n" in models["tpl_demo"].read_text()
    finally:
        context.close()


def test_the_sequence_batching_form_validates_as_you_type_and_saves_its_lines(
    browser, web_server, admin_credentials, models
):
    context, page = open_editor(browser, web_server, admin_credentials, "seq_demo")
    try:
        page.wait_for_selector("#section-sequence")
        assert not page.evaluate("() => document.getElementById('section-sequence').open")
        page.click("#section-sequence > summary")
        page.check("input[name='cfg-seq_enabled']")
        page.select_option("select[name='cfg-seq_strategy']", "oldest")
        # Only the chosen strategy's fields are shown.
        assert page.is_visible("input[name='cfg-seq_oldest_max_candidate_sequences']")
        assert not page.is_visible("input[name='cfg-seq_direct_max_queue_delay_microseconds']")
        page.fill("input[name='cfg-seq_oldest_max_candidate_sequences']", "4")

        page.click("#add-control_input")
        page.wait_for_selector("input[name='control_input-0-name']")
        page.fill("input[name='control_input-0-name']", "START")
        page.select_option("select[name='control_input-0-kind']", "CONTROL_SEQUENCE_START")
        page.select_option("select[name='control_input-0-false_true_kind']", "int32_false_true")
        before = check_count(page)
        page.fill("input[name='control_input-0-false_true']", "1")
        checked_after(page, before)
        # One value is not a false and a true: the validator says so at the field.
        count_error = (
            "document.querySelector(\"[data-field='control_input-0-false_true'] .finding.error\")"
        )
        wait_js(page, count_error)
        assert "exactly 2 entries" in page.text_content(
            "[data-field='control_input-0-false_true'] .finding.error"
        )
        # A value that is no number cannot be read at all.
        page.fill("input[name='control_input-0-false_true']", "0, yes")
        wait_js(
            page,
            "document.querySelector(\"[data-field='control_input-0-false_true'] .field-error\")",
        )
        page.fill("input[name='control_input-0-false_true']", "0, 1")
        wait_js(
            page,
            f"!{count_error} && !document.querySelector(\"[data-field='control_input-0-false_true'] .field-error\")"
            " && !document.getElementById('summary-text').textContent.includes('block saving')",
        )
        page.click("#save-button")
        page.wait_for_selector(".messages li:has-text('Saved config.pbtxt as revision')")
        assert changed_lines(SEQUENCE, models["seq_demo"].read_text()) == [
            "+sequence_batching {",
            "+  oldest { max_candidate_sequences: 4 }",
            '+  control_input [ { name: "START" control [ { int32_false_true: [ 0, 1 ] } ] } ]',
            "+}",
        ]
        # Back in form mode, the section opens with what was saved.
        assert page.evaluate("() => document.getElementById('section-sequence').open")
        assert page.input_value("input[name='control_input-0-false_true']") == "0, 1"
    finally:
        context.close()


def test_the_ensemble_graph_is_drawn_follows_map_edits_and_a_map_edit_saves_its_lines(
    browser, web_server, admin_credentials, models
):
    context, page = open_editor(browser, web_server, admin_credentials, "ens_demo")
    try:
        page.wait_for_selector("#ensemble-graph svg")
        steps = page.locator("#ensemble-graph g.node.step")
        assert steps.count() == 2
        assert [steps.nth(i).get_attribute("data-model") for i in range(2)] == [
            "pre_demo",
            "cls_demo",
        ]
        edges = page.locator("#ensemble-graph g.edge")
        assert sorted(
            (edges.nth(i).get_attribute("data-from"), edges.nth(i).get_attribute("data-to"),
             edges.nth(i).get_attribute("data-tensor"))
            for i in range(edges.count())
        ) == [("in", "step0", "IN"), ("step0", "step1", "mid"), ("step1", "out", "OUT")]  # fmt: skip

        # The model tensors are offered from each step model's own config.pbtxt.
        assert page.get_attribute("input[name='step_map-3-key']", "list") == "step-output-cls_demo"
        assert page.locator("datalist#step-output-cls_demo option[value='SCORES']").count() == 1
        # "Complete the maps" adds the step model's unmapped output.
        page.click("#complete-step-maps")
        page.wait_for_selector("input[name='step_map-4-key']")
        assert page.input_value("input[name='step_map-4-key']") == "SCORES"
        assert page.input_value("select[name='step_map-4-parent']") == "1"
        assert page.input_value("select[name='step_map-4-direction']") == "output"
        page.check("input[name='step_map-4-DELETE']")

        # Renaming the intermediate tensor: the graph follows the form.
        page.fill("input[name='step_map-1-value']", "features")
        page.fill("input[name='step_map-2-value']", "features")
        wait_js(
            page,
            "document.querySelector(\"#ensemble-graph g.edge[data-tensor='features'][data-from='step0'][data-to='step1']\")",
        )
        assert page.locator("#ensemble-graph g.edge[data-tensor='mid']").count() == 0
        wait_js(
            page, "!document.getElementById('summary-text').textContent.includes('block saving')"
        )
        page.click("#save-button")
        page.wait_for_selector(".messages li:has-text('Saved config.pbtxt as revision')")
        assert changed_lines(ENSEMBLE, models["ens_demo"].read_text()) == [
            '-      output_map { key: "FEAT" value: "mid" }',
            '+      output_map { key: "FEAT" value: "features" }',
            '-      input_map { key: "X" value: "mid" }',
            '+      input_map { key: "X" value: "features" }',
        ]
        page.wait_for_selector("#ensemble-graph g.edge[data-tensor='features']")
    finally:
        context.close()
