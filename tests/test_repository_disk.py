"""The repository module reads model folders; a broken config never hides a model."""

import pytest

from repository_app import disk, repository
from repository_app.status import filter_and_sort, merge
from triton_api.client import ModelState

GOOD = """
name: "m"
backend: "python"
max_batch_size: 4
input [ { name: "X" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 2 ] } ]
dynamic_batching { }
instance_group [ { count: 2 kind: KIND_GPU gpus: [ 0 ] }, { kind: KIND_CPU } ]
"""


def _model(root, name, config=GOOD, versions=("1",)):
    folder = root / name
    folder.mkdir()
    (folder / "config.pbtxt").write_text(config)
    for v in versions:
        (folder / v).mkdir()
        (folder / v / "model.py").write_text("# model\n")
    return folder


def test_it_lists_every_model_folder_with_its_config(tmp_path):
    _model(tmp_path, "b")
    _model(tmp_path, "a", versions=("1", "2", "010", "x"))
    (tmp_path / ".hidden").mkdir()
    models = repository.scan(tmp_path)
    assert [m.name for m in models] == ["a", "b"]
    a = models[0]
    # "010" has a leading zero and "x" is not a number: Triton ignores both.
    assert a.versions == [1, 2]
    assert a.backend == "python"
    assert a.max_batch_size == 4
    assert a.dynamic_batching is True
    assert a.instances == "2 × KIND_GPU [0], 1 × KIND_CPU"


def _ensemble(name: str, *steps: str) -> str:
    step = '{{ model_name: "{}" model_version: -1 input_map {{ key: "X" value: "X" }} }}'
    return (
        f'name: "{name}"\nplatform: "ensemble"\nmax_batch_size: 4\n'
        "ensemble_scheduling { step [ " + ", ".join(step.format(s) for s in steps) + " ] }\n"
    )


def test_the_dependants_of_a_model_are_the_ensembles_whose_steps_use_it(tmp_path):
    for name in ("add", "mul", "lonely"):
        _model(tmp_path, name)
    _model(tmp_path, "pipe", _ensemble("pipe", "add", "mul"), versions=("1",))
    _model(tmp_path, "outer", _ensemble("outer", "pipe"), versions=("1",))  # through pipe
    _model(tmp_path, "broken", "not a config {", versions=("1",))
    assert repository.dependants(tmp_path, "add") == ["outer", "pipe"]
    assert repository.dependants(tmp_path, "pipe") == ["outer"]
    assert repository.dependants(tmp_path, "lonely") == []
    assert repository.dependants(tmp_path, "outer") == []


def test_version_folders_are_ascii_numbers_without_leading_zeros_everywhere(tmp_path):
    # "²" and "٣" are digits to str.isdigit() but not to int(): they once broke the listing.
    folder = _model(tmp_path, "m", versions=("3", "0", "01", "²", "٣", "-1"))
    (folder / "7").write_text("a file, not a folder")
    [model] = repository.scan(tmp_path)
    assert model.versions == [3]
    assert disk.version_numbers(folder) == [3]
    assert [disk.version_number(n) for n in ("1", "10", "0", "01", "²", "1 ")] == [
        1, 10, None, None, None, None,
    ]  # fmt: skip


def test_a_broken_config_is_listed_with_its_parse_error(tmp_path):
    _model(tmp_path, "broken", config='name: "broken"\nmax_batch_size: oops\n')
    _model(tmp_path, "binary", config="\x00\x01garbage")
    (tmp_path / "noconfig").mkdir()
    models = {m.name: m for m in repository.scan(tmp_path)}
    assert set(models) == {"broken", "binary", "noconfig"}
    assert models["broken"].config is None
    assert models["broken"].config_error.startswith("2:")
    assert "NUL" in models["binary"].config_error
    assert models["noconfig"].config_error == "config.pbtxt is missing"


def test_the_config_cache_notices_edits(tmp_path):
    folder = _model(tmp_path, "m")
    assert repository.scan(tmp_path)[0].max_batch_size == 4
    (folder / "config.pbtxt").write_text(GOOD.replace("max_batch_size: 4", "max_batch_size: 16"))
    assert repository.scan(tmp_path)[0].max_batch_size == 16


@pytest.mark.parametrize("name", ["", ".", "..", ".hidden", "a/b", "a\\b", "a\x00b", "x" * 256])
def test_it_rejects_names_that_leave_the_repository(tmp_path, name):
    with pytest.raises(repository.RepositoryError):
        repository.get_model(tmp_path, name)


def test_rows_merge_disk_and_triton_both_ways():
    folders = [repository.ModelFolder("on_disk_only", None, None, "", [1])]  # type: ignore[arg-type]
    folders.append(repository.ModelFolder("both", None, None, "", [1, 2]))  # type: ignore[arg-type]
    index = [
        ModelState("both", "1", "UNAVAILABLE", "unloaded"),
        ModelState("both", "2", "READY"),
        ModelState("triton_only", "1", "UNAVAILABLE", "boom"),
        ModelState("never_loaded", "", ""),
    ]
    rows = {r.name: r for r in merge(folders, index)}
    assert rows["on_disk_only"].state == "not loaded"
    assert rows["both"].state == "READY"
    assert rows["triton_only"].state == "UNAVAILABLE" and not rows["triton_only"].on_disk
    assert rows["triton_only"].reason == "boom"
    assert rows["never_loaded"].state == "not loaded"
    assert [r.name for r in filter_and_sort(list(rows.values()), state="READY")] == ["both"]
    assert [r.name for r in filter_and_sort(list(rows.values()), query="ONLY")] == [
        "on_disk_only",
        "triton_only",
    ]
    by_state = [r.name for r in filter_and_sort(list(rows.values()), sort="state")]
    assert by_state[0] == "both" and by_state[1] == "triton_only"


@pytest.mark.django_db
def test_sha256_is_computed_once_and_recomputed_after_a_change(tmp_path, django_assert_num_queries):
    import hashlib

    path = tmp_path / "model.bin"
    path.write_bytes(b"abc")
    assert repository.sha256_of(path, tmp_path) == hashlib.sha256(b"abc").hexdigest()
    with django_assert_num_queries(1):  # the cached digest only
        assert repository.sha256_of(path, tmp_path) == hashlib.sha256(b"abc").hexdigest()
    path.write_bytes(b"abcd")
    assert repository.sha256_of(path, tmp_path) == hashlib.sha256(b"abcd").hexdigest()
