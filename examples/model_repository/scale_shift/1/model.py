"""OUTPUT = INPUT * SCALE + SHIFT (FP32, elementwise); SCALE and SHIFT from the config's
parameters, read once when the model loads."""

import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        parameters = json.loads(args["model_config"]).get("parameters", {})
        self.scale = np.float32(parameters.get("SCALE", {}).get("string_value", "1"))
        self.shift = np.float32(parameters.get("SHIFT", {}).get("string_value", "0"))

    def execute(self, requests):
        responses = []
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            answer = (values * self.scale + self.shift).astype(np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT", answer)]))
        return responses
