"""Parsing config.pbtxt: syntax errors with positions, robustness, round trips, locations."""

from __future__ import annotations

import pytest

from repository_app.modelconfig.parsing import FieldLocator, parse_config, to_text
from repository_app.modelconfig.validate import validate_text

CONFIG = """name: "m"
max_batch_size: 8
input [
  { name: "a" data_type: TYPE_FP32 dims: [ 1, 2, 3 ] },
  { name: "b" data_type: TYPE_INT32 dims: -1 }
]
input { name: "c" data_type: TYPE_FP32 dims: 1 }
dynamic_batching { preferred_batch_size: [ 4, 8 ] }
ensemble_scheduling { step [ { model_name: "x" input_map { key: "k" value: "v" } } ] }
"""


def test_it_parses_a_valid_config() -> None:
    result = parse_config(
        CONFIG.replace("dynamic_batching { preferred_batch_size: [ 4, 8 ] }\n", "")
    )
    assert result.ok and result.findings == []
    assert [i.name for i in result.config.input] == ["a", "b", "c"]  # type: ignore[union-attr]


def test_it_round_trips_through_canonical_text() -> None:
    result = parse_config('name: "m" max_batch_size: 4 input [ { name: "a" dims: [1] } ]')
    assert result.config is not None
    again = parse_config(to_text(result.config))
    assert again.config == result.config


@pytest.mark.parametrize(
    "text,line,col,rule,phrase",
    [
        ('name: "m"\nmax_batch_size: abc\n', 2, 17, "parse.syntax", "near 'abc'"),
        ('name: "m"\ninput [ { name: "a" ]\n', 2, 21, "parse.syntax", "near ']'"),
        (
            'name: "m"\nmax_batch_sise: 8\n',
            2,
            1,
            "parse.unknown-field",
            "did you mean 'max_batch_size'",
        ),
        (
            "input [ { data_type: TYPE_FP23 } ]",
            1,
            22,
            "parse.unknown-enum",
            "did you mean TYPE_FP32",
        ),
        ("dynamic_batching {}\nsequence_batching {}", 2, 1, "scheduling.conflict", "keep one"),
        ('name: "m" {', 1, 11, "parse.syntax", "near '{'"),
    ],
)
def test_it_reports_syntax_errors_at_line_and_column_with_the_token(
    text: str, line: int, col: int, rule: str, phrase: str
) -> None:
    [finding] = validate_text(text)
    assert (finding.rule, finding.line, finding.col) == (rule, line, col)
    assert finding.is_error and phrase in finding.message


NASTY_INPUTS: list[str | bytes] = [
    "",
    b"",
    "   \n# only a comment\n",
    b"\x00\x01\x02binary\xff\xfe",
    b"\x89PNG\r\n\x1a\n" + bytes(range(256)),
    b'name: "caf\xe9"',  # latin-1, not UTF-8
    "{" * 100_000,
    "input { " * 5_000,
    "a" * (10 * 1024 * 1024),
    b"b" * (10 * 1024 * 1024),
    'name: "m" data_type: TYPE_NOPE',
    "dims: [1, 2",
    '"unterminated',
    '\ufeffname: "bom"',
    "name: 'single quotes are fine'",
    "max_batch_size: 99999999999999999999",
]


@pytest.mark.parametrize("data", NASTY_INPUTS, ids=range(len(NASTY_INPUTS)))
def test_it_never_raises_on_hostile_input(data: str | bytes) -> None:
    findings = validate_text(data)
    assert isinstance(findings, list)


@pytest.mark.parametrize(
    "data", [b"\x00\x01binary", "{" * 100_000, "a" * (10 * 1024 * 1024), b'name: "caf\xe9"']
)
def test_unusable_input_becomes_an_error_with_a_position(data: str | bytes) -> None:
    errors = [f for f in validate_text(data) if f.is_error]
    assert errors and errors[0].line is not None


def test_an_empty_file_parses_to_an_empty_config() -> None:
    result = parse_config(b"")
    assert result.ok and result.config.ByteSize() == 0  # type: ignore[union-attr]


def test_non_utf8_bytes_are_reported_with_the_offending_byte() -> None:
    findings = validate_text(b'name: "ok"\nplatform: "caf\xe9"\n')
    [first] = [f for f in findings if f.rule == "parse.encoding"]
    assert first.is_error and (first.line, first.col) == (2, 15)
    assert "0xe9" in first.message and "UTF-8" in first.message


def test_a_bom_is_accepted() -> None:
    assert parse_config(b'\xef\xbb\xbfname: "m"').ok


@pytest.mark.parametrize(
    "path,position",
    [
        ("name", (1, 1)),
        ("input[0].dims[2]", (4, 50)),
        ("input[1].dims", (5, 37)),
        ("input[2]", (7, 7)),  # the second `input` block continues the count
        ("input[2].name", (7, 9)),
        ("dynamic_batching.preferred_batch_size[1]", (8, 47)),
        ('ensemble_scheduling.step[0].input_map["k"]', (9, 58)),
        ("input[0].reshape", (4, 3)),  # not written: falls back to the nearest ancestor
        ("output[0]", (None, None)),
    ],
)
def test_it_maps_field_paths_to_positions(
    path: str, position: tuple[int | None, int | None]
) -> None:
    locator = FieldLocator.scan(CONFIG)
    assert locator.locate(path) == position


def test_the_locator_tolerates_broken_text() -> None:
    locator = FieldLocator.scan('name: "m" input [ { name: ')
    assert locator.locate("name") == (1, 1)


@pytest.mark.parametrize(
    ("body", "what", "line"),
    [
        # 20,000 parameters under 1 MB (the editor's check took seconds for any reader).
        ('\n'.join(f'parameters {{key:"k{i}" value{{string_value:"v"}}}}' for i in range(20_000)),
         "more than 5,000 messages", 2 + 2500),
        # A dims list of 300,000 values, on one line.
        ('input [{ name: "x" data_type: TYPE_FP32 dims: [' + ",".join(["1"] * 300_000) + "] }]",
         "more than 50,000 values and symbols", 2),
    ],
    ids=["20k-parameters", "300k-dims"],
)  # fmt: skip
def test_a_config_with_too_many_messages_or_values_is_refused_where_the_limit_is_reached(
    body: str, what: str, line: int
) -> None:
    result = parse_config(f'name: "m"\n{body}')
    (finding,) = result.findings
    assert result.config is None and finding.rule == "parse.too-many"
    assert what in finding.message and finding.line == line
    # The limits are far above real configs (tens of messages): 1,000 parameters parse.
    many = "\n".join(f'parameters {{key:"k{i}" value{{string_value:"v"}}}}' for i in range(1000))
    assert parse_config(f'name: "m"\n{many}').ok
