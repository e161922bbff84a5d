"""An MLP (8 x Linear 2048->2048 + ReLU) for the GPU check.

On a KIND_GPU instance it runs torch in fp16 on `cuda:<model_instance_device_id>` (the
model of ../shared/gpu/README.md's measurements); without torch or on KIND_CPU it runs the
same layers in numpy float32, so the whole check can be rehearsed on a CPU-only machine.
Requests executed together are concatenated into one batch, as a GPU model should.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils

try:
    import torch
except ImportError:  # CPU-only rehearsal
    torch = None

WIDTH = 2048
LAYERS = 8


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        kind = args["model_instance_kind"]
        rng = np.random.default_rng(0)
        scale = 1.0 / np.sqrt(WIDTH)
        weights = [
            rng.standard_normal((WIDTH, WIDTH), dtype=np.float32) * scale for _ in range(LAYERS)
        ]
        self.output_dtype = pb_utils.triton_string_to_numpy(
            pb_utils.get_output_config_by_name(config, "OUTPUT0")["data_type"]
        )
        self.use_torch = torch is not None and kind == "GPU" and torch.cuda.is_available()
        if self.use_torch:
            self.device = torch.device(f"cuda:{args['model_instance_device_id']}")
            self.weights = [torch.from_numpy(w).half().to(self.device) for w in weights]
        else:
            self.weights = weights

    def _forward(self, batch):
        if self.use_torch:
            with torch.inference_mode():
                x = torch.from_numpy(batch).to(self.device, non_blocking=True).half()
                for w in self.weights:
                    x = torch.relu(x @ w)
                return x.float().cpu().numpy()
        x = batch
        for w in self.weights:
            x = np.maximum(x @ w, 0)
        return x

    def execute(self, requests):
        inputs = [pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() for r in requests]
        out = self._forward(np.concatenate(inputs).astype(np.float32, copy=False))
        responses = []
        start = 0
        for x in inputs:
            part = out[start : start + len(x)].astype(self.output_dtype, copy=False)
            start += len(x)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", part)]))
        return responses
