""" "Fill from model": inputs, outputs and max_batch_size read from the ONNX graph, written
into the config's text in place (the rest of the file, comments included, stays)."""

from __future__ import annotations

from registry.servers import Server

from ..disk import version_numbers
from ..modelconfig import io_from_onnx, parse_config
from ..modelconfig.text_edit import CannotEditInPlace, edit_in_place
from . import saving


class FillError(Exception):
    """Nothing to fill from; the message says why."""


def fill_from_model(name: str, text: str, server: Server) -> tuple[str, str]:
    """The config text with inputs/outputs replaced by the latest version's ONNX graph,
    and a sentence saying what was done. Nothing is saved."""
    parsed = parse_config(text)
    if parsed.config is None:
        raise FillError("fix the syntax errors first: the config must parse to be filled")
    config = parsed.config
    folder = saving.model_dir(name, server)
    versions = version_numbers(folder)
    if not versions:
        raise FillError("no version folder yet: upload a model file first")
    filename = config.default_model_filename or "model.onnx"
    path = folder / str(versions[-1]) / filename
    if not path.is_file():
        raise FillError(
            f"no {filename} in version {versions[-1]}: fill from model reads ONNX files only"
        )
    try:
        graph = io_from_onnx(path)
    except ValueError as exc:
        raise FillError(str(exc)) from exc
    filled = graph.to_config(name)
    del config.input[:]
    del config.output[:]
    config.input.extend(filled.input)
    config.output.extend(filled.output)
    if config.max_batch_size == 0 and filled.max_batch_size > 0:
        config.max_batch_size = filled.max_batch_size
    try:
        filled_text = edit_in_place(text, config)
    except CannotEditInPlace as exc:
        # Refused rather than rewritten: a rewrite would drop comments without asking.
        raise FillError(
            f"the model's inputs and outputs cannot be written into this text in place "
            f"({exc.reason}); nothing was changed: edit them in text mode"
        ) from None
    return filled_text, (
        f"Inputs and outputs filled from {versions[-1]}/{filename} "
        f"(max_batch_size {config.max_batch_size}): review, then save."
    )
