import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        # Outlasts the tests' client timeout, so the client must wait, not load again.
        time.sleep(4)

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [
                    pb_utils.Tensor(
                        "OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy()
                    )
                ]
            )
            for r in requests
        ]
