"""A model whose compute cost is set in config.pbtxt parameters (busy-waits the CPU)."""

import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


def _param(config, key, default):
    value = config.get("parameters", {}).get(key, {}).get("string_value", "")
    return float(value) if value else default


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.per_batch_s = _param(config, "compute_ms_per_batch", 1.0) / 1e3
        self.per_item_s = _param(config, "compute_us_per_item", 50.0) / 1e6

    def execute(self, requests):
        arrays = [pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() for r in requests]
        batch = sum(a.shape[0] for a in arrays)
        # Busy-wait rather than sleep: the cost must occupy a core, as real compute does.
        deadline = time.perf_counter() + self.per_batch_s + self.per_item_s * batch
        while time.perf_counter() < deadline:
            pass
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", np.tanh(a))]) for a in arrays
        ]
