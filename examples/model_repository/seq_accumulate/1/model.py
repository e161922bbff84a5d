"""A running sum per sequence. The sequence batcher adds the control inputs START, END,
READY and CORRID to every request; START resets the sum, END forgets the sequence."""

import collections

import numpy as np
import triton_python_backend_utils as pb_utils

MAX_SEQUENCES = 10_000  # sequences abandoned without END are forgotten, oldest first


def _flag(request, name):
    return int(pb_utils.get_input_tensor_by_name(request, name).as_numpy().flat[0])


class TritonPythonModel:
    def initialize(self, args):
        self.sums = collections.OrderedDict()  # correlation id -> running sum

    def execute(self, requests):
        return [self._one(request) for request in requests]

    def _one(self, request):
        values = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
        if not _flag(request, "READY"):  # a slot without a request in this batch
            return pb_utils.InferenceResponse([_output(0, values.shape)])
        corrid = _flag(request, "CORRID")
        if _flag(request, "START"):
            self.sums[corrid] = 0
            while len(self.sums) > MAX_SEQUENCES:
                self.sums.popitem(last=False)
        elif corrid not in self.sums:
            error = f"sequence {corrid} was never started: send START on its first request"
            return pb_utils.InferenceResponse(error=pb_utils.TritonError(error))
        self.sums[corrid] += int(values.sum())
        total = self.sums[corrid]
        if _flag(request, "END"):
            del self.sums[corrid]
        return pb_utils.InferenceResponse([_output(total, values.shape)])


def _output(total, shape):
    return pb_utils.Tensor("OUTPUT", np.full(shape, total, dtype=np.int32))
