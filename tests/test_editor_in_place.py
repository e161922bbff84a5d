"""Edits change only what the user changed (issue #16): every writer of config.pbtxt (form
save, the search's Apply, the version-policy shortcut, Fill from model) writes the changed
fields into the file's text in place; the unified diff of a one-field change is that line.
Also: per-model revision numbers, the mode after a save, the form's live check, and the
suggestion and message fixes."""

from __future__ import annotations

import difflib
import importlib
import shutil
import string
from pathlib import Path
from typing import Any
from unittest import mock

import onnx
import pytest
from django.apps import apps as django_apps
from django.contrib.auth.models import Permission
from django.core.management import call_command
from django.test import Client
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper
from tritonclient.grpc import model_config_pb2 as pb

from profiler_app.models import Search, SearchCandidate, Sweep
from profiler_app.search import applying, target
from profiler_app.search.errors import SearchError
from profiler_app.search.objective import Constraints
from profiler_app.search.space import Knobs, Space
from registry import servers
from repository_app.editor import fill, form_building, saving
from repository_app.modelconfig import parse_config, validate_text
from repository_app.modelconfig.suggest import suggest
from repository_app.modelconfig.text_edit import CannotEditInPlace, edit_in_place
from repository_app.models import ConfigRevision
from repository_app.uploads import version_policy
from repository_app.uploads.staging import UploadError
from triton_api.client import TritonClient

DEMO = Path(__file__).resolve().parent.parent / "examples" / "model_repository"
NAME = "oddly"
URL = f"/models/{NAME}/config/"

# Comments, backend first, one-line messages, "dims: [ 16 ]" next to repeated "dims: 16
# dims: 32", a list without spaces, a blank line: everything a rewrite would lose.
ODD = """backend: "python"   # backend first, on purpose
name: "oddly"

# Batching: keep it small, reviewed by the infra team.
max_batch_size: 8
input { name: "A" data_type: TYPE_FP32 dims: 16 dims: 32 }
input [ { name: "B" data_type: TYPE_INT64 dims: [ -1 ] } ]
output [{name: "Y" data_type: TYPE_FP32 dims: [ 16 ]}]
dynamic_batching { max_queue_delay_microseconds: 100 }

instance_group [ { count: 1 kind: KIND_CPU } ]  # one is enough on two cores
parameters { key: "alpha" value { string_value: "1" } }
"""


def parsed(text: str) -> pb.ModelConfig:
    result = parse_config(text)
    assert result.config is not None, result.findings
    return result.config


def diff(before: str, after: str) -> list[str]:
    """The changed lines of a unified diff, as '-line' / '+line' (no headers or context)."""
    lines = difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
    return [line for line in lines if line[:1] in "+-" and not line.startswith(("---", "+++"))]


def edited(text: str, change: Any) -> str:
    config = parsed(text)
    change(config)
    result = edit_in_place(text, config)
    assert parsed(result) == config
    return result


# --- the text editor itself ---------------------------------------------------------------


def _set(path: str, value: Any):  # type: ignore[no-untyped-def]
    def change(c: Any) -> None:
        *parents, last = path.split(".")
        for part in parents:
            c = c[int(part)] if part.isdigit() else getattr(c, part)
        if isinstance(value, list):
            getattr(c, last)[:] = value
        else:
            setattr(c, last, value)

    return change


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            _set("max_batch_size", 4),
            ["-max_batch_size: 8", "+max_batch_size: 4"],
        ),
        (
            _set("max_batch_size", 0),  # a number set to its default keeps its line
            ["-max_batch_size: 8", "+max_batch_size: 0"],
        ),
        (
            _set("input.0.dims", [16, 64]),  # repeated style stays repeated
            [
                '-input { name: "A" data_type: TYPE_FP32 dims: 16 dims: 32 }',
                '+input { name: "A" data_type: TYPE_FP32 dims: 16 dims: 64 }',
            ],
        ),
        (
            _set("input.0.dims", [16, 32, 8]),
            [
                '-input { name: "A" data_type: TYPE_FP32 dims: 16 dims: 32 }',
                '+input { name: "A" data_type: TYPE_FP32 dims: 16 dims: 32 dims: 8 }',
            ],
        ),
        (
            _set("input.1.dims", [-1, 4]),  # bracketed stays bracketed
            [
                '-input [ { name: "B" data_type: TYPE_INT64 dims: [ -1 ] } ]',
                '+input [ { name: "B" data_type: TYPE_INT64 dims: [ -1, 4 ] } ]',
            ],
        ),
        (
            _set("instance_group.0.count", 2),  # the trailing comment stays
            [
                "-instance_group [ { count: 1 kind: KIND_CPU } ]  # one is enough on two cores",
                "+instance_group [ { count: 2 kind: KIND_CPU } ]  # one is enough on two cores",
            ],
        ),
        (
            _set("backend", "onnxruntime"),
            [
                '-backend: "python"   # backend first, on purpose',
                '+backend: "onnxruntime"   # backend first, on purpose',
            ],
        ),
        (
            _set("default_model_filename", "model.py"),  # new: after its last sibling
            ['+default_model_filename: "model.py"'],
        ),
        (
            lambda c: c.ClearField("dynamic_batching"),
            ["-dynamic_batching { max_queue_delay_microseconds: 100 }"],
        ),
        (
            lambda c: c.dynamic_batching.preferred_batch_size.extend([4, 8]),
            [
                "-dynamic_batching { max_queue_delay_microseconds: 100 }",
                "+dynamic_batching { preferred_batch_size: [ 4, 8 ] max_queue_delay_microseconds: 100 }",
            ],
        ),
        (
            lambda c: c.parameters["alpha"].MergeFrom(pb.ModelParameter(string_value="2")),
            [
                '-parameters { key: "alpha" value { string_value: "1" } }',
                '+parameters { key: "alpha" value { string_value: "2" } }',
            ],
        ),
        (
            lambda c: c.parameters["beta"].MergeFrom(pb.ModelParameter(string_value="b")),
            ['+parameters { key: "beta" value { string_value: "b" } }'],
        ),
        (
            lambda c: c.version_policy.latest.MergeFrom(
                pb.ModelVersionPolicy.Latest(num_versions=2)
            ),
            ["+version_policy { latest { num_versions: 2 } }"],
        ),
        (
            lambda c: c.instance_group.add(count=2, kind=pb.ModelInstanceGroup.KIND_CPU),
            [
                "-instance_group [ { count: 1 kind: KIND_CPU } ]  # one is enough on two cores",
                "+instance_group [ { count: 1 kind: KIND_CPU }, { count: 2 kind: KIND_CPU } ]"
                "  # one is enough on two cores",
            ],
        ),
        (
            lambda c: c.input.pop(0),
            ['-input { name: "A" data_type: TYPE_FP32 dims: 16 dims: 32 }'],
        ),
    ],
)
def test_a_one_field_change_is_that_line_in_the_files_own_style(change, expected):
    assert diff(ODD, edited(ODD, change)) == expected


def test_a_removed_field_takes_its_comment_lines_but_never_the_files_header():
    text = (
        "# The header of the file stays.\n"
        'name: "m"\n'
        "max_batch_size: 8\n"
        "# two CPU instances: the box has two cores\n"
        "instance_group [ { count: 2 kind: KIND_CPU } ]\n"
        "\n"
        "# kept: a blank line separates it\n"
        "\n"
        "dynamic_batching { }\n"
    )
    result = edited(text, lambda c: c.ClearField("instance_group"))
    assert diff(text, result) == [
        "-# two CPU instances: the box has two cores",
        "-instance_group [ { count: 2 kind: KIND_CPU } ]",
    ]
    header = edited(text, lambda c: setattr(c, "name", ""))
    assert diff(text, header) == ['-name: "m"']
    kept = edited(text, lambda c: c.ClearField("dynamic_batching"))
    assert diff(text, kept) == ["-dynamic_batching { }"]


def test_lists_of_one_element_per_line_keep_that_layout():
    text = (DEMO / "add_sub" / "config.pbtxt").read_text()

    def add_input(c: Any) -> None:
        c.input.add(name="INPUT2", data_type=pb.TYPE_FP32, dims=[16])

    assert diff(text, edited(text, add_input)) == [
        '-  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] }',
        '+  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 16 ] },',
        '+  { name: "INPUT2" data_type: TYPE_FP32 dims: [ 16 ] }',
    ]
    # Deleting the first input is that input's line, not a rewrite of the ones after it.
    assert diff(text, edited(text, lambda c: c.input.pop(0))) == [
        '-  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] },'
    ]
    # A comment after an element stays with that element.
    commented = 'input [\n  { name: "A" },  # first\n  { name: "B" }  # second\n]\n'
    assert diff(commented, edited(commented, lambda c: c.input.add(name="C"))) == [
        '-  { name: "B" }  # second',
        '+  { name: "B" },  # second',
        '+  { name: "C" }',
    ]


def test_crlf_files_keep_their_line_ends():
    text = ODD.replace("\n", "\r\n")
    result = edited(text, _set("default_model_filename", "model.py"))
    assert result.count("\r\n") == text.count("\r\n") + 1 and "\n" not in result.replace("\r\n", "")


@pytest.mark.parametrize(
    ("text", "change", "reason"),
    [
        ("max_batch_size: [", _set("max_batch_size", 4), "does not parse"),
        (
            'parameters { key: "a" value { string_value: "1" } }\n'
            'parameters { key: "a" value { string_value: "2" } }\n',
            lambda c: c.parameters["a"].MergeFrom(pb.ModelParameter(string_value="3")),
            "written twice",
        ),
    ],
)
def test_what_cannot_be_edited_in_place_says_why(text, change, reason):
    config = parse_config(text).config or pb.ModelConfig()
    change(config)
    with pytest.raises(CannotEditInPlace, match=reason):
        edit_in_place(text, config)


def test_an_edit_that_would_not_read_back_is_refused_not_rewritten(monkeypatch):
    # The last guard: whatever the edit produced must parse to exactly the new config.
    from repository_app.modelconfig import text_edit

    monkeypatch.setattr(text_edit._Editor, "result", lambda self: self.text)
    with pytest.raises(CannotEditInPlace, match="would not read back"):
        edit_in_place(ODD, parsed(ODD.replace("max_batch_size: 8", "max_batch_size: 4")))


# --- a property: any change reads back as the new config, nothing else moves ----------------

BASES = [
    ODD,
    (DEMO / "add_batched" / "config.pbtxt").read_text(),
    (DEMO / "add_sub" / "config.pbtxt").read_text(),
    (DEMO / "busy_compute" / "config.pbtxt").read_text(),
]
NAMES = st.text(alphabet=string.ascii_letters, min_size=1, max_size=6)
MUTATIONS = st.one_of(
    st.tuples(st.just("max_batch_size"), st.integers(0, 256)),
    st.tuples(st.just("count"), st.integers(0, 8)),
    st.tuples(st.just("gpus"), st.lists(st.integers(0, 3), max_size=3)),
    st.tuples(st.just("dims"), st.integers(0, 2), st.lists(st.integers(-1, 64), max_size=4)),
    st.tuples(st.just("delay"), st.integers(0, 10**6)),
    st.tuples(st.just("preferred"), st.lists(st.integers(1, 64), max_size=4)),
    st.tuples(st.just("no_batching")),
    st.tuples(st.just("param"), st.sampled_from(["alpha", "compute_us_per_item", "new"]), NAMES),
    st.tuples(st.just("drop_param"), st.sampled_from(["alpha", "compute_ms_per_batch"])),
    st.tuples(st.just("filename"), st.sampled_from(["", "model.py", 'a "quoted" name'])),
    st.tuples(st.just("add_input"), NAMES),
    st.tuples(st.just("drop_input"), st.integers(0, 2)),
    st.tuples(st.just("policy"), st.sampled_from(["latest", "all", "specific", "none"])),
)
# What a mutation may touch: a changed or removed line names one of these, or is a line of
# brackets and list elements ("{ ... },", "]", "}").
TOUCHES = {
    "max_batch_size": {"max_batch_size"},
    "count": {"count", "instance_group"},
    "gpus": {"gpus", "instance_group"},
    "dims": {"dims", "input"},
    "delay": {"max_queue_delay_microseconds", "dynamic_batching"},
    "preferred": {"preferred_batch_size", "dynamic_batching"},
    "no_batching": {"dynamic_batching", "max_queue_delay_microseconds", "preferred_batch_size"},
    "param": {"parameters", "key"},
    "drop_param": {"parameters", "key"},
    "filename": {"default_model_filename"},
    "add_input": {"input"},
    "drop_input": {"input"},
    "policy": {"version_policy"},
}


def mutate(config: pb.ModelConfig, mutation: tuple) -> None:
    kind, *args = mutation
    if kind == "max_batch_size":
        config.max_batch_size = args[0]
    elif kind in ("count", "gpus"):
        group = config.instance_group[0] if config.instance_group else config.instance_group.add()
        if kind == "count":
            group.count = args[0]
        else:
            group.gpus[:] = args[0]
    elif kind == "dims" and args[0] < len(config.input):
        config.input[args[0]].dims[:] = args[1]
    elif kind == "delay":
        config.dynamic_batching.max_queue_delay_microseconds = args[0]
    elif kind == "preferred":
        config.dynamic_batching.preferred_batch_size[:] = args[0]
    elif kind == "no_batching":
        config.ClearField("dynamic_batching")
    elif kind == "param":
        config.parameters[args[0]].string_value = args[1]
    elif kind == "drop_param" and args[0] in config.parameters:
        del config.parameters[args[0]]
    elif kind == "filename":
        config.default_model_filename = args[0]
    elif kind == "add_input":
        config.input.add(name=args[0], data_type=pb.TYPE_FP32, dims=[1])
    elif kind == "drop_input" and args[0] < len(config.input):
        del config.input[args[0]]
    elif kind == "policy":
        config.ClearField("version_policy")
        if args[0] == "latest":
            config.version_policy.latest.num_versions = 2
        elif args[0] == "all":
            config.version_policy.all.SetInParent()
        elif args[0] == "specific":
            config.version_policy.specific.versions[:] = [1, 3]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(base=st.sampled_from(BASES), mutations=st.lists(MUTATIONS, min_size=1, max_size=4))
def test_any_change_reads_back_exactly_and_leaves_every_other_line(base, mutations):
    config = parsed(base)
    for mutation in mutations:
        mutate(config, mutation)
    result = edit_in_place(base, config)  # these bases never need a rewrite
    assert parsed(result) == config
    touched = set().union(*(TOUCHES[m[0]] for m in mutations))
    for line in diff(base, result):
        if line.startswith("-"):
            content = line[1:].strip()
            assert any(n in content for n in touched) or content[:1] in "{}]", line
    for line in base.splitlines():
        if "#" in line:
            assert line.split("#", 1)[1] in result, "a comment was dropped"
    assert result.count("\n\n") == base.count("\n\n"), "blank lines stay"


# --- the writers --------------------------------------------------------------------------


@pytest.fixture()
def repo(tmp_path: Path, settings) -> Path:  # type: ignore[no-untyped-def]
    root = tmp_path / "repo"
    (root / NAME / "1").mkdir(parents=True)
    (root / NAME / "1" / "model.py").write_text("class TritonPythonModel: pass\n")
    (root / NAME / "config.pbtxt").write_text(ODD)
    settings.MODEL_REPOSITORY = root
    return root


def on_disk(root: Path) -> str:
    return (root / NAME / "config.pbtxt").read_text()


@pytest.fixture()
def admin(django_user_model) -> Any:  # type: ignore[no-untyped-def]
    return django_user_model.objects.create_superuser("ada", password="pw-ada-12345")


@pytest.fixture()
def operator(django_user_model) -> Client:  # type: ignore[no-untyped-def]
    user = django_user_model.objects.create_user("olivia", password="pw-olivia-1")
    user.user_permissions.add(Permission.objects.get(codename="control_models"))
    client = Client()
    client.force_login(user)
    return client


def form_data(root: Path, **changes: str) -> dict[str, str]:
    text = on_disk(root)
    data = form_building.post_data(form_building.build_forms(parsed(text), NAME))
    data.update(
        mode="form", action="save", base_sha=saving.read_current(NAME, servers.default()).sha256
    )
    data.update(base_text=text, **changes)
    return data


@pytest.mark.django_db
def test_a_form_save_writes_only_the_changed_line(repo, operator):
    response = operator.post(URL, form_data(repo, **{"cfg-max_batch_size": "4"}))
    assert response.status_code == 302
    assert diff(ODD, on_disk(repo)) == ["-max_batch_size: 8", "+max_batch_size: 4"]
    # Browsers post the hidden textarea with CRLF and without a leading newline; the file's
    # own bytes are the base all the same, so the diff is still that one line.
    before = "\n" + on_disk(repo)
    (repo / NAME / "config.pbtxt").write_text(before)
    data = form_data(repo, **{"instance_group-0-count": "2"})
    data["base_text"] = before.removeprefix("\n").replace("\n", "\r\n")
    assert operator.post(URL, data).status_code == 302
    assert diff(before, on_disk(repo)) == [
        "-instance_group [ { count: 1 kind: KIND_CPU } ]  # one is enough on two cores",
        "+instance_group [ { count: 2 kind: KIND_CPU } ]  # one is enough on two cores",
    ]
    assert on_disk(repo).startswith("\nbackend") and "\r" not in on_disk(repo)


@pytest.mark.django_db
def test_a_form_save_that_cannot_be_made_in_place_asks_before_rewriting(repo, operator):
    text = ODD + 'parameters { key: "alpha" value { string_value: "again" } }\n'
    (repo / NAME / "config.pbtxt").write_text(text)  # a key written twice: the last wins
    data = form_data(repo, **{"parameters-0-value": "changed"})
    response = operator.post(URL, data)
    assert response.status_code == 422
    html = response.content.decode()
    assert 'id="rewrite-note"' in html and "alpha" in html and "written twice" in html
    assert on_disk(repo) == text  # nothing written without asking
    data["cfg-rewrite"] = "on"
    assert operator.post(URL, data).status_code == 302
    assert (
        "#" not in on_disk(repo)
        and parsed(on_disk(repo)).parameters["alpha"].string_value == "changed"
    )


@pytest.mark.django_db
def test_apply_writes_only_the_knobs_that_change(repo, admin, monkeypatch):
    client = mock.create_autospec(TritonClient, instance=True)
    client.model_states.return_value = []
    client.control_mode.return_value = "explicit"  # Apply claims the model, as every door does
    client.load.return_value = []
    monkeypatch.setattr(target, "get_client", lambda *_: client)
    monkeypatch.setattr("repository_app.control.get_client", lambda *_: client)
    search = _measured_search(Knobs(2, "KIND_CPU", 8, True, 100))
    message = applying.apply_candidate(search, "2xCPU/mbs8/dyn100p", admin)
    assert message.startswith("Saved as revision #2 and")  # #1: the file as first seen
    assert diff(ODD, on_disk(repo)) == [
        "-instance_group [ { count: 1 kind: KIND_CPU } ]  # one is enough on two cores",
        "+instance_group [ { count: 2 kind: KIND_CPU } ]  # one is enough on two cores",
    ]
    assert applying.candidate_config_text(search, "2xCPU/mbs8/dyn100p") == on_disk(repo)


@pytest.mark.django_db
def test_apply_refuses_what_it_cannot_write_in_place(repo, admin, monkeypatch):
    def cannot(text: str, config: Any) -> str:
        raise CannotEditInPlace("a construct this editor does not handle")

    monkeypatch.setattr(applying, "edit_in_place", cannot)
    search = _measured_search(Knobs(2, "KIND_CPU", 8, True, 100))
    with pytest.raises(SearchError, match="cannot be written into config.pbtxt in place"):
        applying.apply_candidate(search, "2xCPU/mbs8/dyn100p", admin)
    assert on_disk(repo) == ODD


def _measured_search(knobs: Knobs) -> Search:
    carrier = Sweep.objects.create(
        model=NAME, server="default", state="succeeded", queued_at=timezone.now(),
        kind="search", params={"model": NAME, "start": 1, "end": 1, "step": 1}, levels_total=1,
    )  # fmt: skip
    search = Search.objects.create(
        sweep=carrier, model=NAME, mode="grid", space=Space(counts=(1, 2)).to_json(),
        constraints=Constraints().to_json(), baseline=Knobs(1, "KIND_CPU", 8, True, 100).to_json(),
    )  # fmt: skip
    SearchCandidate.objects.create(
        search=search, key=knobs.key, knobs=knobs.to_json(), state="measured"
    )
    return search


@pytest.mark.django_db
def test_the_version_policy_shortcut_writes_only_the_policy_line(repo, admin):
    version_policy.set_version_policy(servers.default(), NAME, "latest", user=admin, num_versions=2)
    assert diff(ODD, on_disk(repo)) == ["+version_policy { latest { num_versions: 2 } }"]
    version_policy.set_version_policy(
        servers.default(), NAME, "specific", user=admin, versions="1, 3"
    )
    assert diff(ODD, on_disk(repo)) == ["+version_policy { specific { versions: [ 1, 3 ] } }"]
    revision = ConfigRevision.objects.filter(model=NAME).order_by("-id").first()
    assert revision is not None and revision.message == "version policy: versions 1, 3"


@pytest.mark.django_db
def test_the_version_policy_shortcut_refuses_what_it_cannot_write_in_place(
    repo, admin, monkeypatch
):
    from repository_app.modelconfig import text_edit

    def cannot(text: str, config: Any) -> str:
        raise CannotEditInPlace("a construct this editor does not handle")

    monkeypatch.setattr(text_edit, "edit_in_place", cannot)
    with pytest.raises(UploadError, match="cannot be written into config.pbtxt in place"):
        version_policy.set_version_policy(servers.default(), NAME, "all", user=admin)
    assert on_disk(repo) == ODD


CLASSIFIER = """# An ONNX classifier: inputs and outputs come from the graph.
name: "classifier"
platform: "onnxruntime_onnx"   # the platform, not the backend, on purpose
max_batch_size: 8

instance_group [ { count: 1 kind: KIND_CPU } ]  # CPU only
"""


def _onnx(path: Path) -> None:
    x = helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, 8, 8])
    y = helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["batch", 10])
    w = helper.make_tensor("w", TensorProto.FLOAT, [192, 10], [0.0] * 1920)
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [-1, 192])
    nodes = [
        helper.make_node("Reshape", ["images", "shape"], ["flat"]),
        helper.make_node("MatMul", ["flat", "w"], ["scores"]),
    ]
    onnx.save(helper.make_model(helper.make_graph(nodes, "g", [x], [y], [w, shape])), path)


def test_fill_from_model_writes_the_inputs_and_outputs_into_the_text(settings, tmp_path):
    (tmp_path / "classifier" / "1").mkdir(parents=True)
    _onnx(tmp_path / "classifier" / "1" / "model.onnx")
    settings.MODEL_REPOSITORY = tmp_path
    text, note = fill.fill_from_model("classifier", CLASSIFIER, servers.default())
    assert diff(CLASSIFIER, text) == [
        '+input [ { name: "images" data_type: TYPE_FP32 dims: [ 3, 8, 8 ] } ]',
        '+output [ { name: "scores" data_type: TYPE_FP32 dims: [ 10 ] } ]',
    ]
    # Filled again: nothing left to change.
    assert fill.fill_from_model("classifier", text, servers.default())[0] == text
    changed = text.replace("dims: [ 10 ]", "dims: [ 12 ]")
    assert diff(changed, fill.fill_from_model("classifier", changed, servers.default())[0]) == [
        '-output [ { name: "scores" data_type: TYPE_FP32 dims: [ 12 ] } ]',
        '+output [ { name: "scores" data_type: TYPE_FP32 dims: [ 10 ] } ]',
    ]


# --- revision numbers, the mode after a save ----------------------------------------------


@pytest.mark.django_db
def test_revisions_are_numbered_per_model_and_pages_show_the_number(repo, operator):
    shutil.copytree(DEMO / "add_batched", repo / "add_batched")
    other = "/models/add_batched/config/"
    for url in (URL, other):
        operator.get(url)  # #1 of each: the file as first seen
    operator.post(URL, form_data(repo, **{"cfg-max_batch_size": "4"}))
    text = (repo / "add_batched" / "config.pbtxt").read_text().replace("64", "32")
    sha = saving.read_current("add_batched", servers.default()).sha256
    response = operator.post(
        other, {"mode": "text", "action": "save", "text": text, "base_sha": sha}
    )
    page = operator.get(response["Location"]).content.decode()
    assert "Saved config.pbtxt as revision #2." in page
    numbers = {
        model: list(
            ConfigRevision.objects.filter(model=model)
            .order_by("id")
            .values_list("number", flat=True)
        )
        for model in (NAME, "add_batched")
    }
    assert numbers == {NAME: [1, 2], "add_batched": [1, 2]}
    history = operator.get(f"{other}history/").content.decode()
    assert ">#1" in history and ">#2" in history and ">#3" not in history
    first = ConfigRevision.objects.get(model="add_batched", number=1)
    restored = operator.post(
        f"{other}revisions/{first.pk}/restore",
        {"base_sha": saving.read_current("add_batched", servers.default()).sha256},
    )
    assert (
        "Restored revision #1 as new revision #3."
        in operator.get(restored["Location"]).content.decode()
    )
    raw = operator.put(
        "/api/v1/models/add_batched/config", text, content_type="text/plain",
        HTTP_IF_MATCH=saving.read_current("add_batched", servers.default()).sha256,
    )  # fmt: skip
    assert raw.json()["revision"] == 4  # the API's "revision" is the per-model number


@pytest.mark.django_db
def test_the_data_migration_numbers_existing_revisions_per_model_in_id_order():
    for model in ("a", "b", "a", "a", "b"):
        ConfigRevision.objects.create(model=model, text="", sha256="0", source="disk")
    # As the rows were before the migration: numbers that are not per model.
    for revision in ConfigRevision.objects.all():
        ConfigRevision.objects.filter(pk=revision.pk).update(number=100 + revision.pk)
    migration = importlib.import_module("repository_app.migrations.0004_configrevision_number")
    migration.number_revisions(django_apps, None)
    rows = ConfigRevision.objects.order_by("id").values_list("model", "number")
    assert list(rows) == [("a", 1), ("b", 1), ("a", 2), ("a", 3), ("b", 2)]


@pytest.mark.django_db
def test_after_a_save_the_editor_stays_in_the_mode_it_was_saved_from(repo, operator):
    text = ODD.replace("max_batch_size: 8", "max_batch_size: 6")
    sha = saving.read_current(NAME, servers.default()).sha256
    response = operator.post(URL, {"mode": "text", "action": "save", "text": text, "base_sha": sha})
    assert response.status_code == 302 and response["Location"] == f"{URL}?mode=text"
    assert 'id="config-text"' in operator.get(response["Location"]).content.decode()
    response = operator.post(URL, form_data(repo, **{"cfg-max_batch_size": "4"}))
    assert response.status_code == 302 and response["Location"] == URL


# --- form mode: live check, no blank rows ---------------------------------------------------


@pytest.mark.django_db
def test_the_live_check_returns_findings_even_when_a_field_cannot_be_read(repo, operator):
    data = form_data(repo, action="check", **{"cfg-max_batch_size": "0", "input-1-dims": "abc"})
    data["cfg-preferred_batch_size"] = "4"
    body = operator.post(URL, data, HTTP_ACCEPT="application/json").json()
    assert body["field_errors"] == {
        "input-1-dims": [
            "'abc' is not a whole number: write numbers separated by commas, e.g. 8, 16"
        ]
    }
    preferred = [f for f in body["findings"] if f["rule"] == "dynamic-batching.preferred-above-max"]
    assert preferred and preferred[0]["target"] == "cfg-preferred_batch_size"
    assert body["errors"] >= 1 and body["ok"] is False
    assert on_disk(repo) == ODD
    # The page itself lists the unreadable field in the summary, by its config path.
    page = operator.post(URL, {**data, "action": "check"}).content.decode()
    summary = page.split('id="summary-findings"')[1].split("</ul>")[0]
    assert (
        "cannot read <code>input[1].dims</code>: &#x27;abc&#x27; is not a whole number" in summary
    )
    assert "dynamic-batching.preferred-above-max" in summary


@pytest.mark.django_db
def test_the_form_has_no_blank_rows_and_an_add_row_button_per_table(repo, operator):
    html = operator.get(URL).content.decode()
    for prefix, rows in (("input", 2), ("output", 1), ("instance_group", 1), ("parameters", 1)):
        assert f'name="{prefix}-TOTAL_FORMS" value="{rows}"' in html
        assert f'name="{prefix}-{rows}-' not in html.split("<template")[0]
        assert f'id="add-{prefix}"' in html
    assert 'id="form-summary"' in html and "/static/js/editor_form." in html


# --- suggestions and messages ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("wrong", "meant"),
    [
        ("TYPE_FLOAT", "TYPE_FP32"),
        ("FLOAT", "TYPE_FP32"),
        ("float32", "TYPE_FP32"),
        ("FLOAT32", "TYPE_FP32"),
        ("INT", "TYPE_INT32"),
        ("DOUBLE", "TYPE_FP64"),
        ("HALF", "TYPE_FP16"),
        ("STRING", "TYPE_STRING"),
        ("FP32", "TYPE_FP32"),
        ("TYPE_FP23", "TYPE_FP32"),
    ],
)
def test_the_cli_and_the_editor_suggest_the_same_data_type(wrong, meant, tmp_path, capsys):
    assert suggest(wrong, pb.DataType.keys()) == meant
    text = f'name: "m"\ninput [ {{ name: "a" data_type: {wrong} dims: [ 1 ] }} ]\n'
    editor = [f.message for f in validate_text(text) if f.rule == "parse.unknown-enum"]
    assert editor == [f"unknown value {wrong} for DataType: did you mean {meant}?"]
    path = tmp_path / "config.pbtxt"
    path.write_text(text)
    with pytest.raises(SystemExit):
        call_command("validate_config", str(path), "--no-server")
    assert f"did you mean {meant}?" in capsys.readouterr().out


def test_preferred_sizes_with_max_batch_size_0_say_batching_needs_1():
    text = 'name: "m"\nbackend: "python"\nmax_batch_size: 0\ndynamic_batching { preferred_batch_size: [ 4, 8 ] }\n'
    messages = [
        f.message for f in validate_text(text) if f.rule == "dynamic-batching.preferred-above-max"
    ]
    assert messages and all("needs max_batch_size >= 1" in m for m in messages)
    assert all("at least 8" in m and "at most 0" not in m for m in messages)
