import json


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        config.add_input({"name": "TEXT", "data_type": "TYPE_STRING", "dims": [1]})
        config.add_output({"name": "EMBEDDING", "data_type": "TYPE_FP32", "dims": [768]})
        return config

    def initialize(self, args):
        self.config = json.loads(args["model_config"])

    def execute(self, requests):
        raise NotImplementedError
