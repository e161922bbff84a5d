"""A 403 is one line in the log, a 500 keeps its traceback (common/log_filters.py,
settings.LOGGING), through Django's whole request handling."""

from __future__ import annotations

import logging

import pytest
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.test import Client
from django.urls import include, path

pytestmark = pytest.mark.django_db
REASON = "your role cannot manage users (Admins can)"


def refuse(request: HttpRequest, what: str) -> HttpResponse:
    raise PermissionDenied(REASON)


def break_down(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("the view broke")


def forbid_quietly(request: HttpRequest) -> HttpResponse:
    return HttpResponse("no", status=403)


urlpatterns = [
    path("refuse/<str:what>", refuse),
    path("break", break_down),
    path("quiet", forbid_quietly),
    path("", include("dashboard.urls")),  # the 403 page's links
]


def _records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "django.request"]


@pytest.mark.urls(__name__)
def test_a_permission_denied_is_one_line_with_method_path_user_and_reason(
    caplog, django_user_model
):
    bob = django_user_model.objects.create_user("bob", password="pw-bob-12345")
    client = Client()
    client.force_login(bob)
    with caplog.at_level(logging.WARNING, logger="django.request"):
        assert client.post("/refuse/x").status_code == 403
        assert Client().get("/refuse/y%0Aforged").status_code == 403
    signed_in, anonymous = _records(caplog)
    assert signed_in.getMessage() == f"Forbidden: POST /refuse/x (user bob): {REASON}"
    assert signed_in.exc_info is None and signed_in.levelno == logging.WARNING
    # A newline in the path cannot start a forged line.
    assert anonymous.getMessage() == f"Forbidden: GET /refuse/y\\nforged (user anonymous): {REASON}"
    assert "Traceback" not in caplog.text and "\n" not in signed_in.getMessage()


@pytest.mark.urls(__name__)
def test_a_403_response_without_an_exception_is_the_same_one_line(caplog):
    with caplog.at_level(logging.WARNING, logger="django.request"):
        assert Client().get("/quiet").status_code == 403
    (record,) = _records(caplog)
    assert record.getMessage() == "Forbidden: GET /quiet (user anonymous)"


@pytest.mark.urls(__name__)
def test_a_500_keeps_its_traceback(caplog):
    with caplog.at_level(logging.WARNING, logger="django.request"):
        response = Client(raise_request_exception=False).get("/break")
    assert response.status_code == 500
    (record,) = _records(caplog)
    assert record.levelno == logging.ERROR and record.exc_info is not None
    assert isinstance(record.exc_info[1], RuntimeError)
    assert "Traceback" in caplog.text and "the view broke" in caplog.text


def test_a_django_request_line_is_printed_once():
    """Django's own console handler (with DEBUG on) printed every django.* line a second
    time, after the root's."""
    chain = [logging.getLogger(name) for name in ("django.request", "django", "")]
    printing = [h for logger in chain for h in logger.handlers if type(h) is logging.StreamHandler]
    assert len(printing) == 1


def test_a_record_met_twice_by_the_filter_keeps_its_reason():
    """Logging configured twice in one process (a test suite, a reloaded settings) puts the
    filter twice on the logger: the second pass must not drop what the first made."""
    from django.core.exceptions import PermissionDenied

    from common.log_filters import OneLineForbidden

    try:
        raise PermissionDenied("no, because")
    except PermissionDenied:
        import sys

        record = logging.LogRecord(
            "django.request", logging.WARNING, __file__, 1, "Forbidden: %s", ("/x",),
            sys.exc_info(),
        )  # fmt: skip
    record.status_code = 403
    for _ in range(2):
        assert OneLineForbidden().filter(record)
    assert record.getMessage().endswith(": no, because") and record.exc_info is None
