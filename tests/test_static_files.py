"""Static files: content-hashed names in pages, far-future immutable caching for those, and
Brotli / gzip encodings, as whitenoise serves them (the same middleware Daphne runs)."""

from __future__ import annotations

import gzip
import re

import brotli
import pytest
from django.templatetags.static import static
from django.test import Client

from common.staticfinders import plotly_js

pytestmark = pytest.mark.django_db
HASHED = re.compile(r"/static/vendor/plotly\.min\.[0-9a-f]{12}\.js")
TEN_YEARS = "max-age=315360000"


def _body(response) -> bytes:  # type: ignore[no-untyped-def]
    return b"".join(response.streaming_content) if response.streaming else response.content


def test_pages_name_static_files_by_their_content_hash():
    html = Client().get("/accounts/login/").content.decode()
    assert re.search(r'href="/static/css/dashboard\.[0-9a-f]{12}\.css"', html)
    assert HASHED.fullmatch(static("vendor/plotly.min.js"))


def test_hashed_files_are_cached_for_ten_years_as_immutable():
    response = Client().get(static("vendor/plotly.min.js"))
    assert response.status_code == 200
    assert TEN_YEARS in response["Cache-Control"] and "immutable" in response["Cache-Control"]
    # A name without a hash may change under the same URL: never immutable.
    plain = Client().get("/static/vendor/plotly.min.js")
    assert plain.status_code == 200 and "immutable" not in plain.get("Cache-Control", "")


@pytest.mark.parametrize(
    ("accept", "encoding", "decode"),
    [("br", "br", brotli.decompress), ("gzip", "gzip", gzip.decompress)],
)
def test_plotly_is_sent_compressed_to_browsers_that_accept_it(accept, encoding, decode):
    response = Client().get(static("vendor/plotly.min.js"), HTTP_ACCEPT_ENCODING=accept)
    assert response["Content-Encoding"] == encoding
    assert "Accept-Encoding" in response["Vary"]
    body = _body(response)
    original = plotly_js().read_bytes()
    assert len(body) < len(original) / 2  # basic, 1.1 MB: 0.31 MB as Brotli, 0.37 MB as gzip
    assert decode(body) == original
    # And a client that accepts neither gets the file itself.
    plain = Client().get(static("vendor/plotly.min.js"), HTTP_ACCEPT_ENCODING="identity")
    assert "Content-Encoding" not in plain and _body(plain) == original
