"""Building request tensors from model metadata, shapes and input data."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from profiler_app.engine.inputs import (
    STRING_CHARS,
    InputError,
    InputSpec,
    build_payloads,
    input_specs,
)

METADATA = {
    "name": "m",
    "inputs": [
        {"name": "INPUT0", "datatype": "FP32", "shape": ["-1", "16"]},
        {"name": "TOKENS", "datatype": "INT64", "shape": ["-1", "-1"]},
    ],
}
CONFIG = {"config": {"name": "m", "max_batch_size": "8"}}


def test_specs_drop_the_batch_dimension_of_a_batching_model() -> None:
    specs = input_specs(METADATA, CONFIG)
    assert specs == [InputSpec("INPUT0", "FP32", (16,)), InputSpec("TOKENS", "INT64", (-1,))]


def test_specs_keep_all_dimensions_when_the_model_does_not_batch() -> None:
    specs = input_specs(
        {"inputs": [{"name": "X", "datatype": "FP32", "shape": [4, 4]}]}, {"max_batch_size": 0}
    )
    assert specs == [InputSpec("X", "FP32", (4, 4))]


def test_random_data_is_batched_and_seeded() -> None:
    specs = input_specs(METADATA, CONFIG)
    first = build_payloads(specs, batch_size=4, shapes={"TOKENS": [7]}, seed=3)
    again = build_payloads(specs, batch_size=4, shapes={"TOKENS": [7]}, seed=3)
    other = build_payloads(specs, batch_size=4, shapes={"TOKENS": [7]}, seed=4)
    tensors = {t.name: t.array for t in first[0]}
    assert tensors["INPUT0"].shape == (4, 16) and tensors["INPUT0"].dtype == np.float32
    assert tensors["TOKENS"].shape == (4, 7) and tensors["TOKENS"].dtype == np.int64
    # Compared as bytes: random floats may be NaN, which never equals itself.
    assert tensors["INPUT0"].tobytes() == again[0][0].array.tobytes()
    assert tensors["INPUT0"].tobytes() != other[0][0].array.tobytes()


def test_random_data_is_random_bytes_like_perf_analyzers() -> None:
    specs = [InputSpec("F", "FP32", (4096,)), InputSpec("I", "INT64", (512,))]
    f, i = (t.array for t in build_payloads(specs, batching=False)[0])
    exponents = np.unique((f.view(np.uint32) >> 23) & 0xFF)
    assert len(exponents) > 250  # denormals (0) to NaN/inf (255), not just [0, 1)'s
    assert np.isnan(f).any() and (np.abs(f[np.isfinite(f)]) > 1e30).any()
    assert (i < 0).any() and (i > 2**40).any()  # the whole int64 range
    strings = build_payloads([InputSpec("S", "BYTES", (3,))], batching=False)[0][0].array
    assert all(len(s) == 128 and set(s) <= set(STRING_CHARS.encode()) for s in strings)
    assert len(set(strings)) == 3


def test_a_variable_dimension_without_a_shape_names_the_input() -> None:
    with pytest.raises(InputError, match="TOKENS"):
        build_payloads(input_specs(METADATA, CONFIG))


def test_a_shape_that_contradicts_the_model_is_refused() -> None:
    with pytest.raises(InputError, match="INPUT0"):
        build_payloads(input_specs(METADATA, CONFIG), shapes={"INPUT0": [8], "TOKENS": [2]})


def test_a_shape_for_an_unknown_input_is_refused() -> None:
    with pytest.raises(InputError, match="NOPE"):
        build_payloads(input_specs(METADATA, CONFIG), shapes={"NOPE": [1], "TOKENS": [2]})


def test_zeros_are_zeros() -> None:
    payload = build_payloads([InputSpec("X", "INT32", (3,))], data="zeros", batch_size=2)[0]
    assert payload[0].array.tolist() == [[0, 0, 0], [0, 0, 0]]


def test_bytes_inputs_get_object_arrays() -> None:
    payload = build_payloads([InputSpec("S", "BYTES", (2,))], batch_size=1)[0]
    assert payload[0].array.dtype == np.object_ and payload[0].array.shape == (1, 2)


def test_input_data_json_in_perf_analyzer_format_is_read(tmp_path: Path) -> None:
    document = {
        "data": [
            {"INPUT0": list(range(16))},
            {"INPUT0": {"content": [1.0] * 16, "shape": [16]}},
        ]
    }
    path = tmp_path / "data.json"
    path.write_text(json.dumps(document))
    specs = [InputSpec("INPUT0", "FP32", (16,))]
    payloads = build_payloads(specs, data=str(path), batch_size=2)
    assert len(payloads) == 2  # one request per starting sample, round-robin
    assert payloads[0][0].array[0].tolist() == [float(i) for i in range(16)]
    assert payloads[0][0].array[1].tolist() == [1.0] * 16
    assert payloads[1][0].array[0].tolist() == [1.0] * 16


def test_input_data_with_content_and_shape_fills_a_variable_dimension() -> None:
    document = {"data": [{"TOKENS": {"content": [1, 2, 3, 4, 5, 6], "shape": [6]}}]}
    payload = build_payloads([InputSpec("TOKENS", "INT64", (-1,))], data=document)[0]
    assert payload[0].array.tolist() == [[1, 2, 3, 4, 5, 6]]


def test_input_data_missing_an_input_names_it() -> None:
    with pytest.raises(InputError, match="INPUT1"):
        build_payloads(
            [InputSpec("INPUT0", "FP32", (2,)), InputSpec("INPUT1", "FP32", (2,))],
            data={"data": [{"INPUT0": [1, 2]}]},
        )


def test_input_data_with_the_wrong_number_of_values_is_refused() -> None:
    with pytest.raises(InputError, match="INPUT0"):
        build_payloads([InputSpec("INPUT0", "FP32", (16,))], data={"data": [{"INPUT0": [1, 2]}]})


def test_batch_size_above_one_needs_a_batching_model() -> None:
    with pytest.raises(InputError, match="does not batch"):
        build_payloads([InputSpec("X", "FP32", (2,))], batching=False, batch_size=2)
