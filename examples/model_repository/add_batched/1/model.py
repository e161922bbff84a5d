"""OUTPUT0 = INPUT0 + 1. The dynamic batcher hands several requests to one execute()."""

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        # One numpy call for the whole batch, then split back per request.
        arrays = [pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() for r in requests]
        sizes = [a.shape[0] for a in arrays]
        result = np.concatenate(arrays) + np.float32(1)
        responses, start = [], 0
        for size in sizes:
            out = pb_utils.Tensor("OUTPUT0", result[start : start + size])
            responses.append(pb_utils.InferenceResponse([out]))
            start += size
        return responses
