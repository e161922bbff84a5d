"""config.pbtxt parsing and validation mirroring Triton's own model-config rules.

See ``validate`` for the public API; ``Finding`` is the result type.
"""

from .findings import Finding
from .onnx_io import OnnxIO, io_from_onnx
from .parsing import FieldLocator, ParseResult, parse_config, to_text
from .validate import (
    ServerFacts,
    validate_config,
    validate_model_dir,
    validate_path,
    validate_repository,
    validate_text,
)

__all__ = [
    "FieldLocator",
    "Finding",
    "OnnxIO",
    "ParseResult",
    "ServerFacts",
    "io_from_onnx",
    "parse_config",
    "to_text",
    "validate_config",
    "validate_model_dir",
    "validate_path",
    "validate_repository",
    "validate_text",
]
