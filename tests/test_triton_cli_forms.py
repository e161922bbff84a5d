"""`manage.py triton` takes `--server` before or after the action, and every form the README
writes parses (#28: `triton --server a --server b reload m` used to exit 2)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from fleet.management.commands.triton import Command

README = Path(__file__).resolve().parent.parent / "README.md"


def _parse(args: list[str]) -> dict:
    return vars(Command().create_parser("manage.py", "triton").parse_args(args))


ACTIONS = {"status", "load", "unload", "reload"}


def _readme_forms() -> list[list[str]]:
    """Each whole `manage.py triton ...` command the README shows (with an action; prose that
    names an option alone is not one), its placeholders filled in."""
    forms = []
    for line in README.read_text().splitlines():
        for found in re.findall(r"manage\.py triton ([^`#]*)", line):
            text = found.strip()
            text = text.replace("[--server NAME ...]", "--server a --server b")
            text = text.replace("[--config-file F.pbtxt|F.json]", "--config-file F.pbtxt")
            text = text.replace("--server NAME", "--server a").replace("MODEL", "m")
            text = text.replace("load|unload|reload", "reload")
            args = shlex.split(text)
            if ACTIONS & set(args) and not args[-1].startswith("-"):
                forms.append(args)
    return forms


def test_the_readme_shows_several_forms() -> None:
    forms = _readme_forms()
    assert ["--server", "a", "--server", "b", "reload", "m"] in forms
    assert ["reload", "--server", "a", "m"] in forms and ["status"] in forms


@pytest.mark.parametrize("args", _readme_forms(), ids=" ".join)
def test_every_form_in_the_readme_parses(args: list[str]) -> None:
    options = _parse(args)
    assert options["action"] in ACTIONS


def test_servers_before_and_after_the_action_are_all_taken() -> None:
    options = _parse(["--server", "a", "reload", "--server", "b", "m"])
    assert (options["servers_first"], options["servers"]) == (["a"], ["b"])
    options = _parse(["--server", "a", "--server", "b", "status"])
    assert options["servers_first"] == ["a", "b"] and options["servers"] is None
