"""A Try request's inputs from what the user gave: each fill mode, the batch dimension,
open dimensions, and every refusal naming its input before anything is sent."""

from __future__ import annotations

import base64
import io
import json

import numpy as np
import pytest

from inference.model_io import describe
from inference.tensors import BadInput, InputSpec, fill

VEC = InputSpec("INPUT0", "FP32", (16,))
ANY = InputSpec("TEXT", "BYTES", (-1,))
SMALL = InputSpec("I8", "INT8", (2, 2))


def _npy(array: np.ndarray) -> str:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return base64.b64encode(buffer.getvalue()).decode()


def test_typed_values_fill_the_model_s_shape_with_the_batch_in_front():
    got = fill(VEC, "values", values=" ".join(str(i) for i in range(16)), batch=1)
    assert got.array.dtype == np.float32 and got.array.shape == (1, 16)
    assert got.array[0, 15] == 15.0
    nested = fill(SMALL, "values", values="[[1, -2], [3, 127]]")
    assert nested.array.dtype == np.int8 and nested.array.tolist() == [[1, -2], [3, 127]]
    two = fill(VEC, "values", values=json.dumps([list(range(16)), list(range(16))]), batch=2)
    assert two.array.shape == (2, 16)


def test_an_open_dimension_is_read_from_the_values_or_given():
    text = fill(ANY, "values", values="hello\nworld")
    assert text.array.tolist() == [b"hello", b"world"]
    assert fill(ANY, "zeros", dims="3").array.shape == (3,)
    with pytest.raises(BadInput, match="give its dims"):
        fill(ANY, "random")


def test_random_and_zeros_stay_within_the_datatype():
    rng = np.random.default_rng(7)
    for datatype in ("INT8", "UINT16", "FP16", "BOOL", "BYTES", "INT64"):
        spec = InputSpec("X", datatype, (64,))
        got = fill(spec, "random", rng=rng).array
        assert got.shape == (64,)
        assert fill(spec, "zeros").array.shape == (64,)
    floats = fill(VEC, "random", rng=rng, batch=3).array
    assert floats.shape == (3, 16) and floats.min() >= 0 and floats.max() < 1


def test_a_json_document_in_triton_s_request_shape():
    document = {
        "inputs": [{"name": "I8", "shape": [2, 2], "datatype": "INT8", "data": [1, 2, 3, 4]}]
    }
    assert fill(SMALL, "json", values=json.dumps(document)).array.tolist() == [[1, 2], [3, 4]]
    one = {"shape": [1, 16], "datatype": "FP32", "data": list(range(16))}
    assert fill(VEC, "json", values=json.dumps(one), batch=1).array.shape == (1, 16)


def test_a_npy_upload_of_the_input_s_dtype():
    array = np.arange(4, dtype=np.int8).reshape(2, 2)
    assert fill(SMALL, "npy", values=_npy(array)).array.tolist() == [[0, 1], [2, 3]]
    strings = fill(ANY, "npy", values=_npy(np.array(["a", "bc"]))).array
    assert strings.tolist() == [b"a", b"bc"]


@pytest.mark.parametrize(
    ("spec", "mode", "values", "batch", "message"),
    [
        (VEC, "values", "1 2 3", 1, r"INPUT0: 3 values given, the shape \[1, 16\] takes 16"),
        (SMALL, "values", "[[1, 2], [3, 300]]", None, r"I8: 300 is out of INT8's range \(-128 to 127\)"),
        (SMALL, "values", "[[1, 2], [3, 4.5]]", None, r"I8: 4.5 is not a whole number"),
        (SMALL, "values", "1 2 x 4", None, r"I8: 'x' is not a whole number"),
        (VEC, "values", "[1, 2,", 1, r"INPUT0: not valid JSON: Expecting value at line 1"),
        (InputSpec("H", "FP16", (1,)), "values", "70000", None, r"H: 70000 is out of FP16's range"),
        (SMALL, "values", "[[1, 2, 3], [4, 5, 6]]", None, r"I8: shape \[2, 3\] does not match the model's \[2, 2\]"),
        (SMALL, "json", '{"data": [1, 2]', None, r"I8: not valid JSON"),
        (SMALL, "json", '{"datatype": "FP32", "data": [1, 2, 3, 4]}', None, r"I8: the document says FP32, the model wants INT8"),
        (SMALL, "npy", _npy(np.zeros((2, 2), np.float64)), None, r"I8: the .npy holds float64, the model wants INT8"),
        (SMALL, "npy", _npy(np.zeros((3, 2), np.int8)), None, r"I8: shape \[3, 2\] does not match the model's \[2, 2\]"),
        (SMALL, "npy", "not base64!", None, r"I8: the .npy upload is not base64"),
        (VEC, "values", json.dumps([list(range(16))] * 2), 1, r"INPUT0: the values hold a batch of 2, the batch size is 1"),
        (VEC, "guess", "", None, r"INPUT0: fill with one of values, random, zeros, json, npy"),
    ],
)  # fmt: skip
def test_bad_input_is_refused_on_its_field_before_anything_is_sent(
    spec, mode, values, batch, message
):
    with pytest.raises(BadInput, match=message) as refused:
        fill(spec, mode, values=values, batch=batch)
    assert refused.value.field == f"inputs.{spec.name}"


def test_the_model_s_description_from_metadata_and_config():
    metadata = {
        "name": "add_sub", "versions": ["1"],
        "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": ["-1", "16"]},
                   {"name": "MASK", "datatype": "BOOL", "shape": ["-1", "-1"]}],
        "outputs": [{"name": "OUTPUT0", "datatype": "FP32", "shape": ["-1", "16"]}],
    }  # fmt: skip
    config = {"max_batch_size": 8, "input": [{"name": "INPUT0"}, {"name": "MASK", "optional": True}],
              "sequence_batching": {}}  # fmt: skip
    described = describe(metadata, config)
    assert described.batches and described.sequence and not described.decoupled
    assert [(i.name, i.dims, i.optional) for i in described.inputs] == [
        ("INPUT0", (16,), False), ("MASK", (-1,), True),
    ]  # fmt: skip
    assert described.outputs[0].dims == (16,)
