"""Triton's binary-data HTTP inference request for one payload, as tritonclient writes it:
built once per payload by the load workers (`load_workers.serialize_http`), and per
START/END variant for sequences (`sequences.http_sequence_requests`). One of the engine's
inference transports: it calls nothing, it only lays out bytes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def request_body(
    payload: Sequence[tuple[str, str, np.ndarray]], **parameters: Any
) -> tuple[bytes, int | None]:
    """(body, the JSON header's length or None) for `payload`'s (name, datatype, array)
    tensors, with request `parameters` (e.g. sequence_id, sequence_start) in the header."""
    import tritonclient.http as httpclient

    inputs = []
    for name, datatype, array in payload:
        tensor = httpclient.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array, binary_data=True)
        inputs.append(tensor)
    body, json_size = httpclient.InferenceServerClient.generate_request_body(
        inputs, None, **parameters
    )
    return bytes(body), json_size
