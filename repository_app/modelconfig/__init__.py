"""config.pbtxt parsing and validation mirroring Triton's own model-config rules.

See ``validate`` for the public API; ``Finding`` is the result type. ``templates`` handles
``${name}`` placeholder files (``is_template``, ``template_placeholders``,
``fill_template``); ``versions.parse_triton_version`` reads ``--triton-version``.
"""

from .context import FolderFacts
from .findings import Finding
from .onnx_io import OnnxIO, io_from_onnx
from .parsing import FieldLocator, ParseResult, parse_config, to_text
from .templates import (
    Placeholder,
    TemplateInfo,
    fill_template,
    is_template,
    parse_for_validation,
    template_placeholders,
)
from .validate import (
    ServerFacts,
    validate_config,
    validate_model_dir,
    validate_path,
    validate_repository,
    validate_text,
)
from .versions import parse_triton_version

__all__ = [
    "FieldLocator",
    "Finding",
    "FolderFacts",
    "OnnxIO",
    "ParseResult",
    "Placeholder",
    "ServerFacts",
    "TemplateInfo",
    "fill_template",
    "io_from_onnx",
    "is_template",
    "parse_config",
    "parse_for_validation",
    "parse_triton_version",
    "template_placeholders",
    "to_text",
    "validate_config",
    "validate_model_dir",
    "validate_path",
    "validate_repository",
    "validate_text",
]
