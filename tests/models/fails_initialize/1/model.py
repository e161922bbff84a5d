class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("deliberate failure in initialize for the tests")

    def execute(self, requests):
        return []
