"""Configs Triton loads that the validator used to reject (issue #21), one test per cause.

Each config is small and in the shape of the real one (quickstart sequence models, DALI,
FasterTransformer, Python backend, TensorRT-LLM's ensemble, densenet without platform),
written for these tests.
"""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from repository_app.modelconfig.python_model import defines_auto_complete
from repository_app.modelconfig.validate import validate_model_dir, validate_path, validate_text


def errors(findings: list) -> set[str]:
    return {f.rule for f in findings if f.is_error}


def warnings(findings: list) -> set[str]:
    return {f.rule for f in findings if not f.is_error}


def write_onnx(path: Path, inputs: list[tuple], outputs: list[tuple]) -> None:
    ins = [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs]
    outs = [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs]
    nodes = [helper.make_node("Identity", [inputs[0][0]], [o[0]]) for o in outputs]
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(helper.make_model(helper.make_graph(nodes, "g", ins, outs)), str(path))


def model_folder(root: Path, name: str, config: str, files: dict[str, str] | None = None) -> Path:
    folder = root / name
    (folder / "1").mkdir(parents=True)
    (folder / "config.pbtxt").write_text(config)
    for rel, text in (files or {}).items():
        (folder / rel).write_text(text)
    return folder


I32 = TensorProto.INT32
SEQUENCE = """
name: "counter"
backend: "onnxruntime"
max_batch_size: 4
sequence_batching {
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
  state [ { input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
}
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""


class TestOnnxCrossCheck:
    def test_sequence_controls_and_state_tensors_count_as_declared(self, tmp_path: Path) -> None:
        folder = model_folder(tmp_path, "counter", SEQUENCE)
        write_onnx(
            folder / "1" / "model.onnx",
            [
                ("INPUT", I32, ["B", 1]),
                ("START", I32, ["B", 1]),
                ("READY", I32, ["B", 1]),
                ("CORRID", TensorProto.UINT64, ["B", 1]),
                ("STATE_IN", I32, ["B", 1]),
            ],
            [("OUTPUT", I32, ["B", 1]), ("STATE_OUT", I32, ["B", 1])],
        )
        findings = validate_model_dir(folder)
        assert findings == [], [f.format() for f in findings]

    def test_an_input_no_section_names_is_still_missing(self, tmp_path: Path) -> None:
        folder = model_folder(tmp_path, "counter", SEQUENCE)
        write_onnx(
            folder / "1" / "model.onnx",
            [
                ("INPUT", I32, ["B", 1]),
                ("START", I32, ["B", 1]),
                ("READY", I32, ["B", 1]),
                ("CORRID", TensorProto.UINT64, ["B", 1]),
                ("STATE_IN", I32, ["B", 1]),
                ("MASK", I32, ["B", 1]),
            ],
            [("OUTPUT", I32, ["B", 1]), ("STATE_OUT", I32, ["B", 1])],
        )
        [finding] = [f for f in validate_model_dir(folder) if f.is_error]
        assert finding.rule == "onnx.missing-input" and "'MASK'" in finding.message

    def test_batch_inputs_and_ragged_inputs_follow_the_onnx_runtime_backend(
        self, tmp_path: Path
    ) -> None:
        config = """
        name: "ragged"
        backend: "onnxruntime"
        max_batch_size: 16
        input [ { name: "RAGGED" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true } ]
        batch_input [ { kind: BATCH_ACCUMULATED_ELEMENT_COUNT target_name: "INDEX"
                        data_type: TYPE_FP32 source_input: "RAGGED" } ]
        output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] } ]
        """
        folder = model_folder(tmp_path, "ragged", config)
        write_onnx(
            folder / "1" / "model.onnx",
            [("RAGGED", TensorProto.FLOAT, ["N"]), ("INDEX", TensorProto.FLOAT, ["M"])],
            [("OUT", TensorProto.FLOAT, ["B", 4])],
        )
        findings = validate_model_dir(folder)
        assert findings == [], [f.format() for f in findings]


DALI = """
name: "decode"
backend: "dali"
max_batch_size: 64
input [ { name: "DALI_INPUT_0" data_type: TYPE_UINT8 dims: [ -1 ] } ]
output [ { name: "DALI_OUTPUT_0" } ]
"""


class TestBackendsThatCompleteIO:
    @pytest.mark.parametrize("backend", ["dali", "my_tokenizer", "vllm"])
    def test_a_backend_that_may_fill_io_gets_a_warning_naming_it(self, backend: str) -> None:
        findings = validate_text(DALI.replace('"dali"', f'"{backend}"'), folder_name="decode")
        assert not errors(findings), [f.format() for f in findings]
        missing = [f for f in findings if f.rule.startswith("output.")]
        assert {f.rule for f in missing} == {"output.data-type-missing", "output.dims-missing"}
        assert all(f"the {backend} backend" in f.message for f in missing)

    def test_strict_stays_strict(self) -> None:
        findings = validate_text(DALI, folder_name="decode", strict=True)
        assert {"output.data-type-missing", "output.dims-missing"} <= errors(findings)

    @pytest.mark.parametrize("backend", ["pytorch", "fil", "identity", "tensorrtllm"])
    def test_a_backend_known_not_to_fill_io_still_gets_an_error(self, backend: str) -> None:
        findings = validate_text(DALI.replace('"dali"', f'"{backend}"'), folder_name="decode")
        assert {"output.data-type-missing", "output.dims-missing"} <= errors(findings)

    def test_fastertransformer_bert_hidden_states_get_their_type_from_the_backend(self) -> None:
        config = """
        name: "ft_bert"
        backend: "fastertransformer"
        max_batch_size: 8
        input [ { name: "input_hidden_state" dims: [ -1, -1 ] },
                { name: "sequence_lengths" data_type: TYPE_INT32 dims: [ 1 ] } ]
        output [ { name: "output_hidden_state" dims: [ -1, -1 ] } ]
        parameters { key: "model_type" value: { string_value: "bert" } }
        parameters { key: "data_type" value: { string_value: "fp16" } }
        """
        # The backend sets these data types even with auto-complete disabled.
        for strict in (False, True):
            findings = validate_text(config, folder_name="ft_bert", strict=strict)
            assert not errors(findings), [f.format() for f in findings]
        other = config.replace('"bert"', '"GPT"')
        assert "input.data-type-missing" in errors(validate_text(other, folder_name="ft_bert"))


PY_CONFIG = """
name: "embed"
backend: "python"
max_batch_size: 8
input [ { name: "TEXT" } ]
output [ { name: "VECTOR" } ]
"""
WITH_HOOK = """
class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.add_input({"name": "TEXT", "data_type": "TYPE_STRING", "dims": [1]})
        return auto_complete_model_config

    def execute(self, requests):
        return []
"""
WITHOUT_HOOK = """
class TritonPythonModel:
    def execute(self, requests):
        return []
"""


class TestPythonModels:
    def test_with_auto_complete_config_missing_io_is_fine(self, tmp_path: Path) -> None:
        folder = model_folder(tmp_path, "embed", PY_CONFIG, {"1/model.py": WITH_HOOK})
        assert validate_model_dir(folder) == []

    def test_without_it_missing_dims_and_types_are_errors_in_default_mode(
        self, tmp_path: Path
    ) -> None:
        folder = model_folder(tmp_path, "embed", PY_CONFIG, {"1/model.py": WITHOUT_HOOK})
        findings = validate_model_dir(folder)
        assert {"input.data-type-missing", "input.dims-missing", "output.dims-missing"} <= errors(
            findings
        )
        assert any("no auto_complete_config" in f.message for f in findings)

    def test_no_inputs_with_auto_complete_config_is_not_said_to_reject_requests(
        self, tmp_path: Path
    ) -> None:
        config = 'name: "gen" backend: "python"\n'
        with_hook = model_folder(tmp_path, "gen", config, {"1/model.py": WITH_HOOK})
        assert validate_model_dir(with_hook) == []
        without = model_folder(tmp_path / "b", "gen", config, {"1/model.py": WITHOUT_HOOK})
        [finding] = [f for f in validate_model_dir(without) if f.rule == "python.no-inputs"]
        assert "rejects every request" in finding.message

    def test_text_alone_cannot_tell_so_it_only_warns(self) -> None:
        findings = validate_text(PY_CONFIG, folder_name="embed")
        assert not errors(findings)
        assert all("auto_complete_config" in f.message for f in findings)
        [no_inputs] = [
            f for f in validate_text('name: "g" backend: "python"') if f.rule == "python.no-inputs"
        ]
        assert "unless model.py defines auto_complete_config" in no_inputs.message

    @pytest.mark.parametrize(
        "source,expected",
        [
            (WITH_HOOK, True),
            (WITHOUT_HOOK, False),
            (
                "class Base:\n    def auto_complete_config(c):\n        return c\n"
                "class TritonPythonModel(Base):\n    pass\n",
                True,
            ),
            ("from helpers import Base\nclass TritonPythonModel(Base):\n    pass\n", None),
            ("from helpers import TritonPythonModel\n", None),
            ("class TritonPythonModel(:\n", None),
        ],
        ids=["static-method", "none", "inherited-here", "inherited-elsewhere", "imported", "bad"],
    )
    def test_model_py_is_read_with_ast(self, source: str, expected: bool | None) -> None:
        assert defines_auto_complete(source) is expected


ENSEMBLE = """
name: "ensemble"
platform: "ensemble"
max_batch_size: 8
input [ { name: "text_input" data_type: TYPE_STRING dims: [ 1 ] } ]
output [
  { name: "text_output" data_type: TYPE_STRING dims: [ -1 ] },
  { name: "kv_cache_alloc_total_blocks" data_type: TYPE_INT64 dims: [ 1 ] },
  { name: "kv_cache_alloc_total_blocks" data_type: TYPE_INT64 dims: [ 1 ] }
]
ensemble_scheduling {
  step [
    {
      model_name: "llm"
      model_version: -1
      input_map { key: "PROMPT" value: "text_input" }
      output_map { key: "TEXT" value: "text_output" }
      output_map { key: "BLOCKS" value: "kv_cache_alloc_total_blocks" }
    }
  ]
}
"""


class TestDuplicateNames:
    def test_a_repeated_output_is_a_warning_naming_both_lines(self) -> None:
        findings = validate_text(ENSEMBLE, folder_name="ensemble")
        assert not errors(findings), [f.format() for f in findings]
        [dup] = [f for f in findings if f.rule == "output.duplicate-name"]
        assert "lines 8 and 9" in dup.message and dup.line == 9

    def test_a_repeated_required_input_is_still_an_error(self) -> None:
        text = (
            'name: "m" backend: "identity" input [ { name: "a" data_type: TYPE_FP32 dims: [1] },'
            ' { name: "a" data_type: TYPE_FP32 dims: [1] } ]'
        )
        [dup] = [f for f in validate_text(text) if f.rule == "input.duplicate-name"]
        assert dup.is_error and "every request" in dup.message


DENSENET = """
name: "densenet"
max_batch_size: 0
input [ { name: "data_0" data_type: TYPE_FP32 format: FORMAT_NCHW dims: [ 3, 224, 224 ] } ]
output [ { name: "fc6_1" data_type: TYPE_FP32 dims: [ 1000 ] } ]
"""


class TestStrictSingleFile:
    def test_the_backend_comes_from_the_version_folder_as_in_the_folder_check(
        self, tmp_path: Path
    ) -> None:
        folder = model_folder(tmp_path, "densenet", DENSENET)
        write_onnx(
            folder / "1" / "model.onnx",
            [("data_0", TensorProto.FLOAT, [3, 224, 224])],
            [("fc6_1", TensorProto.FLOAT, [1000])],
        )
        file_level = validate_path(folder / "config.pbtxt", strict=True)
        assert not errors([f for fs in file_level.values() for f in fs]), file_level
        assert not errors(validate_model_dir(folder, strict=True))

    def test_the_backend_comes_from_a_model_dot_backend_folder_name(self, tmp_path: Path) -> None:
        text = DENSENET.replace('name: "densenet"\n', "")
        folder = model_folder(tmp_path, "passthrough.identity", text)
        file_level = validate_path(folder / "config.pbtxt", strict=True)
        assert not errors([f for fs in file_level.values() for f in fs]), file_level
        assert not errors(validate_text(text, folder_name="passthrough.identity", strict=True))

    def test_a_folder_without_a_model_file_is_refused_at_both_levels(self, tmp_path: Path) -> None:
        folder = model_folder(tmp_path, "densenet", DENSENET)
        file_level = [f for fs in validate_path(folder / "config.pbtxt").values() for f in fs]
        assert "model.backend-undetermined" in errors(file_level)
        assert "model.backend-undetermined" in errors(validate_model_dir(folder))


class TestBatchDimAdvice:
    @pytest.mark.parametrize("dims", ["-1, -1, 3", "-1, 384"])
    def test_a_leading_minus_one_is_only_a_question(self, dims: str) -> None:
        text = (
            f'name: "m" backend: "onnxruntime" max_batch_size: 4 '
            f'input [ {{ name: "x" data_type: TYPE_UINT8 dims: [ {dims} ] }} ]'
        )
        [finding] = [f for f in validate_text(text) if f.rule == "io.batch-dim-in-dims"]
        assert not finding.is_error and "is that -1 the batch dimension?" in finding.message
        assert "if it is a variable size" in finding.message

    def test_the_model_file_settles_it(self, tmp_path: Path) -> None:
        text = (
            'name: "det" backend: "onnxruntime" max_batch_size: 4 '
            'input [ { name: "x" data_type: TYPE_UINT8 dims: [ -1, -1, 3 ] } ]'
        )
        folder = model_folder(tmp_path, "det", text)
        write_onnx(folder / "1" / "model.onnx", [("x", TensorProto.UINT8, ["B", "H", "W", 3])], [])
        assert validate_model_dir(folder) == []
        wrong = model_folder(tmp_path / "b", "det", text)
        write_onnx(wrong / "1" / "model.onnx", [("x", TensorProto.UINT8, ["B", "H", 3])], [])
        [finding] = [f for f in validate_model_dir(wrong) if f.is_error]
        assert finding.rule == "onnx.input-dims"
        assert "the config's dims include the batch dimension" in finding.message


class TestBrokenModelFiles:
    CONFIG = (
        'name: "m" backend: "onnxruntime" max_batch_size: 8 '
        'input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ] '
        'output [ { name: "y" data_type: TYPE_FP32 dims: [ 4 ] } ]'
    )

    def folder(self, tmp_path: Path) -> Path:
        return model_folder(tmp_path, "m", self.CONFIG)

    def test_an_empty_file_is_named_as_such(self, tmp_path: Path) -> None:
        folder = self.folder(tmp_path)
        (folder / "1" / "model.onnx").write_bytes(b"")
        [finding] = validate_model_dir(folder)
        assert finding.rule == "model-file.empty"
        assert finding.message.startswith("model.onnx is empty (0 bytes)")
        assert "allowed inputs are: none" not in finding.message

    def test_a_truncated_file_says_where_it_stops(self, tmp_path: Path) -> None:
        folder = self.folder(tmp_path)
        path = folder / "1" / "model.onnx"
        write_onnx(path, [("x", TensorProto.FLOAT, ["B", 4])], [("y", TensorProto.FLOAT, ["B", 4])])
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
        [finding] = validate_model_dir(folder)
        assert finding.rule == "onnx.truncated"
        assert f"model.onnx is not a valid ONNX file (truncated at byte {len(data) // 2}" in (
            finding.message
        )

    def test_a_git_lfs_pointer_is_named_as_such(self, tmp_path: Path) -> None:
        folder = self.folder(tmp_path)
        (folder / "1" / "model.onnx").write_text(
            "version https://git-lfs.github.com/spec/v1\noid sha256:ab\nsize 9\n"
        )
        [finding] = validate_model_dir(folder)
        assert finding.rule == "model-file.lfs-pointer" and "git lfs pull" in finding.message
