"""One JSON request cannot exhaust the web process (security review, item 1): the role is
checked before a body is parsed, and a body is counted on its text before json.loads builds
anything, so a 10 MB body of millions of `{}` is a cheap 400."""

from __future__ import annotations

import io
import json
import tracemalloc

import pytest
from rest_framework.exceptions import ParseError

from common import api_parsers
from team.roles import ADMIN, OPERATOR, VIEWER

from .test_polish_pages import _client

JUNK = ('{"junk": [' + ",".join(["{}"] * 3_000_000) + "]}").encode()  # 9 MB, under the 10 MiB cap


def _parse(body: bytes):  # type: ignore[no-untyped-def]
    return api_parsers.SafeJSONParser().parse(io.BytesIO(body), "application/json", {})


def test_millions_of_objects_are_refused_on_the_text_at_a_small_cost() -> None:
    tracemalloc.start()
    try:
        with pytest.raises(ParseError, match="more than 100,000 objects and arrays"):
            _parse(JUNK)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # json.loads would have built ~25 times the body; counting keeps to a few copies of it.
    assert peak < 4 * len(JUNK), peak


def test_a_million_values_are_refused() -> None:
    with pytest.raises(ParseError, match="more than 1,000,000 values"):
        _parse(json.dumps({"values": [1] * 1_000_001}).encode())


def test_brackets_and_commas_inside_strings_do_not_count() -> None:
    note = '[{,\\"' * 200_000
    body = ('{"note": "' + note + '", "data": [1, 2, 3]}').encode()
    assert _parse(body)["data"] == [1, 2, 3]


def test_deep_nesting_and_lone_surrogates_are_still_refused_with_their_path() -> None:
    with pytest.raises(ParseError, match=r"nested deeper than 64 levels at a\[0\]"):
        _parse(json.dumps({"a": [[[0]]]}).replace("[[[0]]]", "[" * 70 + "0" + "]" * 70).encode())
    with pytest.raises(ParseError, match=r"b\[1\]: the text holds a lone UTF-16 surrogate"):
        _parse(b'{"b": ["ok", "\\ud800"]}')


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/api/v1/rollouts/", "/api/v1/sweeps/", "/api/v1/servers/"])
def test_a_role_that_may_not_is_refused_before_the_body_is_read(path: str) -> None:
    viewer = _client("vic", VIEWER)
    # Not JSON at all: a 403, not a 400, shows the body was never parsed.
    response = viewer.post(path, b"{not json", content_type="application/json")
    assert response.status_code == 403, response.content[:300]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("path", "role"),
    [("/api/v1/rollouts/", OPERATOR), ("/api/v1/sweeps/", OPERATOR), ("/api/v1/servers/", ADMIN)],
)
def test_a_role_that_may_gets_a_400_for_a_huge_document(path: str, role: str) -> None:
    client = _client("ann", role)
    response = client.post(path, JUNK, content_type="application/json")
    assert response.status_code == 400, response.content[:300]
    assert "more than 100,000 objects and arrays" in response.json()["message"]
