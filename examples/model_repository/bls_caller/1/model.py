"""BLS: each request runs the model named in the calls_models parameter (add_sub, which
answers OUTPUT0 = a + b and OUTPUT1 = a - b) and returns their product, a^2 - b^2."""

import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        value = config.get("parameters", {}).get("calls_models", {}).get("string_value", "")
        self.callee = value.split(",")[0].strip() or "add_sub"

    def execute(self, requests):
        return [self._one(request) for request in requests]

    def _one(self, request):
        inputs = [pb_utils.get_input_tensor_by_name(request, n) for n in ("INPUT0", "INPUT1")]
        call = pb_utils.InferenceRequest(
            model_name=self.callee,
            requested_output_names=["OUTPUT0", "OUTPUT1"],
            inputs=inputs,
        )
        answer = call.exec()
        if answer.has_error():
            error = f"{self.callee} failed: {answer.error().message()}"
            return pb_utils.InferenceResponse(error=pb_utils.TritonError(error))
        total = pb_utils.get_output_tensor_by_name(answer, "OUTPUT0").as_numpy()
        difference = pb_utils.get_output_tensor_by_name(answer, "OUTPUT1").as_numpy()
        return pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", total * difference)])
