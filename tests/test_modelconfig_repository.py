"""Folder and repository rules: versions, model files, ensembles across models, ONNX."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from repository_app.modelconfig.onnx_io import io_from_onnx
from repository_app.modelconfig.validate import validate_model_dir, validate_repository


def write_model(
    repo: Path, name: str, config: str, versions: dict[str, list[str]] | None = None
) -> Path:
    folder = repo / name
    folder.mkdir(parents=True)
    (folder / "config.pbtxt").write_text(config)
    for version, files in (versions or {}).items():
        (folder / version).mkdir()
        for file in files:
            if file.endswith(".onnx"):  # a stub that is still ONNX (an empty graph)
                graph = helper.make_graph([], "g", [], [])
                onnx.save(helper.make_model(graph), str(folder / version / file))
            else:
                (folder / version / file).write_text("x")
    return folder


def rules(findings: list) -> set[str]:
    return {f.rule for f in findings if f.is_error}


IDENTITY = """name: "{name}" backend: "identity" max_batch_size: {mbs}
input [ {{ name: "INPUT0" data_type: {dtype} dims: [ {dims} ] }} ]
output [ {{ name: "OUTPUT0" data_type: {dtype} dims: [ {dims} ] }} ]
"""


def identity(name: str, mbs: int = 8, dtype: str = "TYPE_FP32", dims: str = "16") -> str:
    return IDENTITY.format(name=name, mbs=mbs, dtype=dtype, dims=dims)


class TestModelFolder:
    def test_a_complete_onnx_model_folder_is_clean(self, tmp_path: Path) -> None:
        folder = write_model(
            tmp_path, "m", 'name: "m" backend: "onnxruntime"', {"1": ["model.onnx"]}
        )
        assert validate_model_dir(folder) == []

    def test_it_requires_the_folder_to_match_the_model_name(self, tmp_path: Path) -> None:
        folder = write_model(tmp_path, "folder", 'name: "m" backend: "python"', {"1": ["model.py"]})
        [finding] = [f for f in validate_model_dir(folder) if f.is_error]
        assert finding.rule == "model.name-mismatch" and finding.file == str(
            folder / "config.pbtxt"
        )
        assert finding.line == 1

    def test_it_requires_at_least_one_version_folder(self, tmp_path: Path) -> None:
        folder = write_model(tmp_path, "m", 'name: "m" backend: "python"')
        assert "version.none-available" in rules(validate_model_dir(folder))

    @pytest.mark.parametrize(
        "version,rule,is_error",
        [
            ("01", "version.leading-zero", True),
            ("0", "version.zero", True),
            ("v1", "version.not-numeric", False),
        ],
    )
    def test_it_checks_version_folder_names(
        self, tmp_path: Path, version: str, rule: str, is_error: bool
    ) -> None:
        folder = write_model(
            tmp_path, "m", 'name: "m" backend: "python"', {"2": ["model.py"], version: ["model.py"]}
        )
        [finding] = [f for f in validate_model_dir(folder) if f.rule == rule]
        assert finding.is_error is is_error

    @pytest.mark.parametrize(
        "config,files,missing",
        [
            ('backend: "onnxruntime"', [], "model.onnx"),
            ('platform: "tensorrt_plan"', ["model.onnx"], "model.plan"),
            ('backend: "pytorch"', [], "model.pt"),
            ('backend: "python"', [], "model.py"),
            ('backend: "dali"', [], "model.dali"),
            ('backend: "openvino"', ["model.xml"], "model.bin"),
            ('platform: "tensorflow_graphdef"', [], "model.graphdef"),
            (
                'backend: "onnxruntime" default_model_filename: "net.onnx"',
                ["model.onnx"],
                "net.onnx",
            ),
        ],
    )
    def test_it_requires_the_backends_model_file_in_each_version(
        self, tmp_path: Path, config: str, files: list[str], missing: str
    ) -> None:
        folder = write_model(tmp_path, "m", f'name: "m" {config}', {"1": files})
        [finding] = [
            f for f in validate_model_dir(folder) if f.rule == "version.model-file-missing"
        ]
        assert f"'{missing}'" in finding.message

    def test_it_honours_the_version_policy_when_checking_files(self, tmp_path: Path) -> None:
        config = 'name: "m" backend: "python" version_policy { specific { versions: [ 2, 3 ] } }'
        folder = write_model(tmp_path, "m", config, {"1": [], "2": ["model.py"]})
        found = rules(validate_model_dir(folder))
        assert found == {"version.specific-missing"}

    def test_it_infers_the_backend_from_the_model_file_like_triton(self, tmp_path: Path) -> None:
        folder = write_model(tmp_path, "m", 'name: "m" max_batch_size: 2', {"1": ["model.plan"]})
        assert validate_model_dir(folder) == []

    def test_it_reports_tritons_error_when_no_backend_can_be_inferred(self, tmp_path: Path) -> None:
        folder = write_model(tmp_path, "m", 'name: "m"', {"1": ["weights.bin"]})
        [finding] = [
            f for f in validate_model_dir(folder) if f.rule == "model.backend-undetermined"
        ]
        assert "Could not determine backend for model 'm'" in finding.message

    def test_a_custom_backend_is_taken_from_the_folder_suffix(self, tmp_path: Path) -> None:
        folder = write_model(tmp_path, "m.identity", "", {"1": []})
        assert rules(validate_model_dir(folder)) == set()

    def test_a_syntax_error_is_reported_against_the_config_file(self, tmp_path: Path) -> None:
        folder = write_model(tmp_path, "m", 'name: "m"\nmax_batch_size: x', {"1": []})
        [finding] = validate_model_dir(folder)
        assert finding.rule == "parse.syntax" and finding.file == str(folder / "config.pbtxt")
        assert finding.line == 2


class TestEnsembles:
    ENSEMBLE = """name: "pipe" platform: "ensemble" max_batch_size: {mbs}
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 16 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 16 ] }} ]
ensemble_scheduling {{ step [
  {{ model_name: "{a}" model_version: {version} input_map {{ key: "INPUT0" value: "IN" }} output_map {{ key: "OUTPUT0" value: "mid" }} }},
  {{ model_name: "{b}" model_version: -1 input_map {{ key: "INPUT0" value: "mid" }} output_map {{ key: "OUTPUT0" value: "OUT" }} }}
] }}
"""

    def repo(
        self,
        tmp_path: Path,
        *,
        mbs: int = 4,
        a: str = "a",
        b: str = "b",
        version: int = -1,
        b_config: str | None = None,
    ) -> dict:
        write_model(
            tmp_path, "pipe", self.ENSEMBLE.format(mbs=mbs, a=a, b=b, version=version), {"1": []}
        )
        write_model(tmp_path, "a", identity("a"), {"1": []})
        write_model(tmp_path, "b", b_config or identity("b"), {"1": []})
        return validate_repository(tmp_path)

    def test_a_consistent_ensemble_repository_is_clean(self, tmp_path: Path) -> None:
        result = self.repo(tmp_path)
        assert {k: v for k, v in result.items() if v} == {}

    @pytest.mark.parametrize(
        "kwargs,rule,phrase",
        [
            (
                {"b": "missing_model"},
                "ensemble.step-model-missing",
                "contains models that are not available or ambiguous: missing_model",
            ),
            (
                {"version": 3},
                "ensemble.step-version-missing",
                "whose required version 3 is not loaded",
            ),
            (
                {"mbs": 16},
                "ensemble.step-batch-size",
                "allows maximum batch size 16, but it contains model a",
            ),
            (
                {"b_config": identity("b", dtype="TYPE_INT32")},
                "ensemble.tensor-mismatch",
                "inconsistent data type: TYPE_FP32 is inferred from model a while TYPE_INT32",
            ),
            (
                {"b_config": identity("b", dims="4, 4")},
                "ensemble.tensor-mismatch",
                "inconsistent shape: [-1,16] is inferred from model a while [-1,4,4]",
            ),
            (
                {"b_config": identity("b").replace("INPUT0", "IN_B")},
                "ensemble.map-unknown-input",
                "is mapping to non-existing input INPUT0 in model b",
            ),
            (
                {"b_config": identity("b").replace("OUTPUT0", "OUT_B")},
                "ensemble.map-unknown-output",
                "is mapped from non-existing output OUTPUT0 in model b",
            ),
        ],
    )
    def test_it_rejects_inconsistent_ensembles(
        self, tmp_path: Path, kwargs: dict, rule: str, phrase: str
    ) -> None:
        findings = self.repo(tmp_path, **kwargs)["pipe"]
        matching = [f for f in findings if f.rule == rule]
        assert matching and phrase in matching[0].message, [f.format() for f in findings]
        assert matching[0].file == str(tmp_path / "pipe" / "config.pbtxt")

    def test_it_reports_an_unmapped_step_input(self, tmp_path: Path) -> None:
        b = identity("b").replace(
            'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]',
            'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] }, { name: "EXTRA" data_type: TYPE_FP32 dims: [ 1 ] } ]',
        )
        findings = self.repo(tmp_path, b_config=b)["pipe"]
        assert "ensemble.step-input-unmapped" in rules(findings)

    def test_an_optional_step_input_may_stay_unmapped(self, tmp_path: Path) -> None:
        b = identity("b").replace(
            'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]',
            'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] }, { name: "EXTRA" data_type: TYPE_FP32 dims: [ 1 ] optional: true } ]',
        )
        assert self.repo(tmp_path, b_config=b)["pipe"] == []

    def test_it_finds_cycles_between_ensembles(self, tmp_path: Path) -> None:
        self.repo(tmp_path)
        loop = self.ENSEMBLE.format(mbs=4, a="a", b="pipe", version=-1).replace(
            'name: "pipe" platform', 'name: "loop" platform'
        )
        write_model(tmp_path, "loop", loop, {"1": []})
        pipe = (
            (tmp_path / "pipe" / "config.pbtxt")
            .read_text()
            .replace('model_name: "b"', 'model_name: "loop"')
        )
        (tmp_path / "pipe" / "config.pbtxt").write_text(pipe)
        result = validate_repository(tmp_path)
        [finding] = [f for f in result["pipe"] if f.rule == "ensemble.circular-dependency"]
        assert (
            "circular dependency between ensembles: pipe -> ... -> loop -> pipe" in finding.message
        )

    def test_an_empty_repository_is_a_warning(self, tmp_path: Path) -> None:
        [finding] = validate_repository(tmp_path)[""]
        assert finding.rule == "repository.empty" and not finding.is_error


def make_onnx(path: Path, *, batch: bool = True, in_type: int = TensorProto.FLOAT) -> None:
    first = "N" if batch else 1
    inp = helper.make_tensor_value_info("x", in_type, [first, 3, 8])
    out = helper.make_tensor_value_info("y", in_type, [first, 3, 8])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [inp], [out])
    onnx.save(helper.make_model(graph), str(path))


class TestOnnx:
    def folder(self, tmp_path: Path, config: str, **onnx_kwargs: object) -> Path:
        folder = write_model(tmp_path, "m", config, {"1": []})
        make_onnx(folder / "1" / "model.onnx", **onnx_kwargs)  # type: ignore[arg-type]
        return folder

    def test_io_from_onnx_reads_names_types_dims_and_infers_batching(self, tmp_path: Path) -> None:
        make_onnx(tmp_path / "model.onnx")
        io = io_from_onnx(tmp_path / "model.onnx")
        assert [(t.name, t.data_type, t.dims) for t in io.inputs] == [
            ("x", "TYPE_FP32", [-1, 3, 8])
        ]
        assert io.supports_batching and io.suggested_max_batch_size > 0
        config = io.to_config("m")
        assert list(config.input[0].dims) == [3, 8] and config.output[0].name == "y"

    def test_io_from_onnx_sees_a_fixed_first_dim_as_no_batching(self, tmp_path: Path) -> None:
        make_onnx(tmp_path / "model.onnx", batch=False)
        io = io_from_onnx(tmp_path / "model.onnx")
        assert not io.supports_batching and io.suggested_max_batch_size == 0

    def test_io_from_onnx_rejects_garbage(self, tmp_path: Path) -> None:
        (tmp_path / "model.onnx").write_bytes(b"not onnx")
        with pytest.raises(ValueError):
            io_from_onnx(tmp_path / "model.onnx")

    def test_a_matching_config_passes_the_cross_check(self, tmp_path: Path) -> None:
        config = 'name: "m" backend: "onnxruntime" max_batch_size: 4 input [ { name: "x" data_type: TYPE_FP32 dims: [3, 8] } ] output [ { name: "y" data_type: TYPE_FP32 dims: [3, 8] } ]'
        assert validate_model_dir(self.folder(tmp_path, config)) == []

    @pytest.mark.parametrize(
        "replace,rule",
        [
            (('name: "x"', 'name: "z"'), "onnx.unknown-input"),
            (
                ("TYPE_FP32 dims: [3, 8] } ] output", "TYPE_INT32 dims: [3, 8] } ] output"),
                "onnx.input-data-type",
            ),
            (("dims: [3, 8] } ] output", "dims: [3, 9] } ] output"), "onnx.input-dims"),
            (("dims: [3, 8] } ] output", "dims: [-1, 3, 8] } ] output"), "onnx.input-dims"),
        ],
    )
    def test_it_cross_checks_the_config_against_the_onnx_file(
        self, tmp_path: Path, replace: tuple[str, str], rule: str
    ) -> None:
        config = 'name: "m" backend: "onnxruntime" max_batch_size: 4 input [ { name: "x" data_type: TYPE_FP32 dims: [3, 8] } ] output [ { name: "y" data_type: TYPE_FP32 dims: [3, 8] } ]'
        assert replace[0] in config
        findings = validate_model_dir(self.folder(tmp_path, config.replace(*replace)))
        assert rule in rules(findings), [f.format() for f in findings]

    def test_it_rejects_batching_a_model_with_a_fixed_first_dim(self, tmp_path: Path) -> None:
        config = 'name: "m" backend: "onnxruntime" max_batch_size: 4 input [ { name: "x" data_type: TYPE_FP32 dims: [3, 8] } ]'
        findings = validate_model_dir(self.folder(tmp_path, config, batch=False))
        assert "onnx.batch-dim-fixed" in rules(findings)
