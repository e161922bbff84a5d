"""A decoupled model that streams token ids: request PROMPT_ID p gets the tokens
p + 1, p + 2, ..., p + N (N = RESPONSE_COUNT; int32, wrapping), one per response,
then an empty response flagged final. It sleeps FIRST_RESPONSE_DELAY_MS before the first
token and RESPONSE_DELAY_MS before each next one (waiting, as a model waits on a device).

WITHHOLD_FINAL_EVERY n (tests only; 0, the default, off) holds back the final flag of every
n-th request until the client cancels it (at most 60 s): a stream that never finishes."""

import json
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


def _param(config, key, default):
    value = config.get("parameters", {}).get(key, {}).get("string_value", "")
    return float(value) if value else default


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(config):
            raise pb_utils.TritonModelException("stream_tok needs decoupled: true")
        self.count = int(_param(config, "RESPONSE_COUNT", 8))
        self.first_s = _param(config, "FIRST_RESPONSE_DELAY_MS", 20) / 1e3
        self.next_s = _param(config, "RESPONSE_DELAY_MS", 5) / 1e3
        self.withhold_every = int(_param(config, "WITHHOLD_FINAL_EVERY", 0))
        self.received = 0
        self.threads = []

    def execute(self, requests):
        # Each request streams on a thread of its own, so requests in flight overlap as
        # they do on a real streaming server; execute returns at once.
        self.threads = [t for t in self.threads if t.is_alive()]
        for request in requests:
            self.received += 1
            withhold = self.withhold_every > 0 and self.received % self.withhold_every == 0
            thread = threading.Thread(target=self._stream, args=(request, withhold), daemon=True)
            thread.start()
            self.threads.append(thread)
        return None

    def _stream(self, request, withhold=False):
        sender = request.get_response_sender()
        final = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        prompt = int(pb_utils.get_input_tensor_by_name(request, "PROMPT_ID").as_numpy().flat[0])
        for i in range(self.count):
            time.sleep(self.first_s if i == 0 else self.next_s)
            if sender.is_cancelled():
                break
            token = np.array([(prompt + i + 1) & 0x7FFFFFFF], dtype=np.int32)
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("TOKEN", token)]))
        deadline = time.monotonic() + 60
        while withhold and not sender.is_cancelled() and time.monotonic() < deadline:
            time.sleep(0.01)
        sender.send(flags=final)

    def finalize(self):
        for thread in self.threads:
            thread.join(timeout=5)
