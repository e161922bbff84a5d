"""The commands scripts call often start without Django's system checks: the URL check
imports every view, half a second of each start (BENCHMARKS.md). `manage.py check` and
`migrate` still run them."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import load_command_class
from django.core.management.base import BaseCommand

QUICK = [
    ("fleet", ["triton", "status"]),
    ("fleet", ["triton", "--server", "default", "reload", "add_sub"]),
    ("fleet", ["servers", "list"]),
    ("repository_app", ["validate_config", "--no-server", "config.pbtxt"]),
]


@pytest.fixture()
def checks_run(monkeypatch) -> list[str]:
    """The commands whose start ran the system checks."""
    ran: list[str] = []

    def check(self: BaseCommand, *args: Any, **kwargs: Any) -> None:
        ran.append(type(self).__module__)

    monkeypatch.setattr(BaseCommand, "check", check)
    return ran


def _start(command: BaseCommand, argv: list[str], monkeypatch) -> None:
    """Start `command` as manage.py does, its work left out."""
    monkeypatch.setattr(type(command), "handle", lambda self, *a, **k: None)
    command.run_from_argv(["manage.py", *argv])


@pytest.mark.parametrize(("app", "argv"), QUICK, ids=[" ".join(argv) for _, argv in QUICK])
def test_a_quick_command_starts_without_the_system_checks(app, argv, checks_run, monkeypatch):
    _start(load_command_class(app, argv[0]), argv, monkeypatch)
    assert checks_run == []


def test_a_command_that_keeps_the_checks_is_seen_running_them(checks_run, monkeypatch):
    class Checked(BaseCommand):
        pass

    _start(Checked(), ["checked"], monkeypatch)
    assert checks_run == [__name__]
