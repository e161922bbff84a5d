import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for request in requests:
            logits = pb_utils.get_input_tensor_by_name(request, "LOGITS").as_numpy()
            label = np.array([[str(int(logits.argmax()))]], dtype=object)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("LABEL", label)]))
        return out
