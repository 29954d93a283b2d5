"""The ZON reader and writer: what a person editing config.zon by hand sees."""

from __future__ import annotations

import contextlib
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chock import zon
from chock.errors import ChockError
from chock.zon import EnumLiteral, ZonError, dumps, load, loads

# ---- reading every literal kind ------------------------------------------------------------------


def test_struct_reads_as_a_dict_in_file_order():
    value = loads('.{ .zeta = 1, .alpha = "a", .mid = true }')
    assert value == {"zeta": 1, "alpha": "a", "mid": True}
    assert list(value) == ["zeta", "alpha", "mid"]


def test_nested_structs_lists_and_empty_braces():
    text = """
    .{
        .instances = .{
            .demo = .{ .kind = "replay=demo.jsonl" },
        },
        .tags = .{ "a", "b" },
        .nothing = .{},
        .grid = .{ .{ 1, 2 }, .{ 3 } },
    }
    """
    assert loads(text) == {
        "instances": {"demo": {"kind": "replay=demo.jsonl"}},
        "tags": ["a", "b"],
        "nothing": {},
        "grid": [[1, 2], [3]],
    }


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", 0),
        ("42", 42),
        ("-17", -17),
        ("1_000_000", 1_000_000),
        ("0xff", 255),
        ("0xFF_FF", 0xFFFF),
        ("-0x10", -16),
        ("0o17", 15),
        ("0b1010", 10),
        ("123456789012345678901234567890", 123456789012345678901234567890),
    ],
)
def test_integers(text, expected):
    value = loads(text)
    assert value == expected
    assert type(value) is int


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1.5", 1.5),
        ("-0.25", -0.25),
        ("2e3", 2000.0),
        ("1.5e-3", 0.0015),
        ("1_0.5", 10.5),
        ("6.02E+23", 6.02e23),
    ],
)
def test_floats(text, expected):
    value = loads(text)
    assert value == expected
    assert type(value) is float


def test_inf_and_nan():
    assert loads("inf") == math.inf
    assert loads("-inf") == -math.inf
    assert math.isnan(loads("nan"))


def test_true_false_null():
    assert loads(".{ true, false, null }") == [True, False, None]


def test_enum_literal_is_a_str_that_compares_to_its_name():
    value = loads(".{ .shell = .ask }")["shell"]
    assert isinstance(value, EnumLiteral)
    assert value == "ask"
    assert value in ("ask", "allow", "deny")
    assert repr(value) == "EnumLiteral('ask')"


def test_list_of_enum_literals():
    assert loads(".{ .a, .b, }") == ["a", "b"]
    assert all(isinstance(item, EnumLiteral) for item in loads(".{ .a, .b }"))


def test_quoted_field_names_and_quoted_enum_literals():
    value = loads('.{ .@"my-box" = 1, .@"if" = 2, .@"a \\"b\\"" = .@"two words" }')
    assert value == {"my-box": 1, "if": 2, 'a "b"': "two words"}
    assert isinstance(value['a "b"'], EnumLiteral)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (r'"a\nb"', "a\nb"),
        (r'"\r\t"', "\r\t"),
        (r'"back\\slash"', "back\\slash"),
        (r'"\'single\'"', "'single'"),
        (r'"say \"hi\""', 'say "hi"'),
        (r'"\x41\x7e"', "A~"),
        (r'"\xc3\xa9"', "é"),  # \x adds bytes; two of them make one UTF-8 character
        (r'"\u{263a}"', "☺"),
        (r'"\u{1F600}"', "😀"),
        (r'"\u{41}"', "A"),
        ('"plain ünïcode"', "plain ünïcode"),
        ('""', ""),
    ],
)
def test_string_escapes(text, expected):
    assert loads(text) == expected


def test_comments_and_trailing_commas():
    text = """// leading comment
    .{
        // a comment line
        .a = 1, // after a value
        .b = .{ 1, 2, }, //
        .c = "// not a comment",
    } // after everything"""
    assert loads(text) == {"a": 1, "b": [1, 2], "c": "// not a comment"}


def test_keywords_are_accepted_as_bare_field_names_when_reading():
    assert loads(".{ .test = 1 }") == {"test": 1}


def test_load_reads_a_file(tmp_path):
    path = tmp_path / "x.zon"
    path.write_text('.{ .name = "é" }\n', encoding="utf-8")
    assert load(path) == {"name": "é"}


# ---- errors: where and what ----------------------------------------------------------------------


def error_of(text, source=None):
    with pytest.raises(ZonError) as info:
        loads(text, source=source)
    return info.value


def test_error_is_a_chock_error_with_source_line_and_column():
    text = '.{\n    .instances = .{\n        .kind "replay"\n    },\n}\n'
    exc = error_of(text, source="config.zon")
    assert isinstance(exc, ChockError)
    assert str(exc) == "config.zon: line 3, column 15: expected '=' after field name .kind, found '\"'"
    assert (exc.line, exc.column) == (3, 15)


def test_missing_equals_on_the_first_field():
    exc = error_of('.{ .kind "x" }')
    assert str(exc) == "line 1, column 10: expected '=' after field name .kind, found '\"'"


def test_unterminated_string_points_at_its_opening_quote():
    exc = error_of('.{\n  .a = "never closed\n}')
    assert (exc.line, exc.column) == (2, 8)
    assert "unterminated string" in str(exc)


def test_unterminated_string_at_end_of_input():
    exc = error_of('"abc')
    assert (exc.line, exc.column) == (1, 1)
    assert "unterminated string" in str(exc)


@pytest.mark.parametrize(
    ("text", "column", "words"),
    [
        (r'.{ .a = "ok\qno" }', 12, r"invalid escape '\q'"),
        (r'"\x4"', 2, "exactly two hex digits"),
        (r'"\xZZ"', 2, "exactly two hex digits"),
        (r'"\u263a"', 2, "hex digits in braces"),
        (r'"\u{110000}"', 2, "not a Unicode scalar value"),
        (r'"\u{d800}"', 2, "not a Unicode scalar value"),
    ],
)
def test_bad_escapes(text, column, words):
    exc = error_of(text)
    assert (exc.line, exc.column) == (1, column)
    assert words in str(exc)


def test_x_escapes_that_are_not_utf8():
    exc = error_of('.{ .a = "\\xff" }')
    assert (exc.line, exc.column) == (1, 9)
    assert "not valid UTF-8" in str(exc)


def test_trailing_garbage():
    exc = error_of(".{ .a = 1 }\n\n  .b = 2\n")
    assert str(exc) == "line 3, column 3: expected end of input after the value, found '.b'"


def test_duplicate_field_names_both_positions():
    exc = error_of(".{\n    .a = 1,\n    .b = 2,\n    .a = 3,\n}")
    assert str(exc) == "line 4, column 5: duplicate field .a (first set at line 2, column 5)"


def test_duplicate_quoted_and_bare_names_are_the_same_field():
    exc = error_of('.{ .a = 1, .@"a" = 2 }')
    assert (exc.line, exc.column) == (1, 12)
    assert "duplicate field .a" in str(exc)


def test_unclosed_struct_names_where_it_opened():
    exc = error_of(".{\n  .a = .{ .b = 1,\n")
    assert str(exc) == (
        "line 3, column 1: expected a field name like .name, found end of input "
        "(the '.{' at line 2, column 8 is never closed)"
    )


def test_missing_comma_between_list_items():
    exc = error_of(".{ 1 2 }")
    assert str(exc) == "line 1, column 6: expected ',' or '}' after a list item, found '2'"


def test_missing_comma_between_fields():
    exc = error_of(".{ .a = 1\n   .b = 2 }")
    assert str(exc) == "line 2, column 4: expected ',' or '}' after the value of .a, found '.b'"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "line 1, column 1: expected a value, found end of input"),
        (".{ .a = }", "line 1, column 9: expected a value, found '}'"),
        (".{ .a = maybe }", "line 1, column 9: expected a value, found 'maybe'"),
        ("12ab", "line 1, column 1: malformed number '12ab'"),
        ("1__0", "line 1, column 1: malformed number '1__0'"),
        ("0x", "line 1, column 1: malformed number '0x'"),
        (".{ .a = 1 } }", "line 1, column 13: expected end of input after the value, found '}'"),
        (".{ . a = 1 }", "line 1, column 5: expected '{', a name or @\"name\" after '.', found ' '"),
        ('.{ .@"" = 1 }', 'line 1, column 4: a name cannot be empty: .@""'),
        ("{ }", "line 1, column 1: unexpected character '{'"),
        (".{ 1, .a = 2 }", "line 1, column 10: expected ',' or '}' after a list item, found '='"),
        (".{ .a = 1, 2 }", "line 1, column 12: expected a field name like .name, found '2'"),
    ],
)
def test_malformed_inputs(text, message):
    assert str(error_of(text)) == message


def test_deep_nesting_is_an_error_not_a_crash():
    depth = zon.MAX_DEPTH + 1
    exc = error_of(".{ " * depth + "1" + " }" * depth)
    assert f"nested deeper than {zon.MAX_DEPTH} levels" in str(exc)


def test_nesting_up_to_the_bound_reads():
    depth = zon.MAX_DEPTH
    value = loads(".{ " * depth + "1" + " }" * depth)
    for _ in range(depth):
        value = value[0]
    assert value == 1


def test_load_names_the_file_in_errors(tmp_path):
    path = tmp_path / "config.zon"
    path.write_text(".{\n  .a = 1\n  .b = 2,\n}\n")
    with pytest.raises(ZonError) as info:
        load(path)
    assert str(info.value).startswith(f"{path}: line 3, column 3: ")


def test_load_refuses_a_file_that_is_not_utf8(tmp_path):
    path = tmp_path / "x.zon"
    path.write_bytes(b'.{\n  .a = "caf\xe9"\n}\n')
    with pytest.raises(ZonError) as info:
        load(path)
    assert str(info.value) == f"{path}: line 2, column 12: the file is not UTF-8 text"


def test_load_leaves_a_missing_file_to_the_caller(tmp_path):
    with pytest.raises(FileNotFoundError):
        load(tmp_path / "absent.zon")


# ---- writing -------------------------------------------------------------------------------------


def test_dumps_layout():
    value = {
        "instance": "demo",
        "instances": {"demo": {"kind": "replay=demo.jsonl"}, "my-box": {}},
        "approvals": {"shell": EnumLiteral("ask")},
        "tags": ["a", 1, None, True, 1.5],
        "rows": [{"x": 1}],
    }
    assert dumps(value) == (
        ".{\n"
        '    .instance = "demo",\n'
        "    .instances = .{\n"
        "        .demo = .{\n"
        '            .kind = "replay=demo.jsonl",\n'
        "        },\n"
        '        .@"my-box" = .{},\n'
        "    },\n"
        "    .approvals = .{\n"
        "        .shell = .ask,\n"
        "    },\n"
        '    .tags = .{ "a", 1, null, true, 1.5 },\n'
        "    .rows = .{\n"
        "        .{\n"
        "            .x = 1,\n"
        "        },\n"
        "    },\n"
        "}\n"
    )


def test_dumps_indent():
    assert dumps({"a": {"b": 1}}, indent=2) == ".{\n  .a = .{\n    .b = 1,\n  },\n}\n"


@pytest.mark.parametrize(
    ("name", "written"),
    [
        ("kind", ".kind"),
        ("_private", "._private"),
        ("my-box", '.@"my-box"'),
        ("9lives", '.@"9lives"'),
        ("if", '.@"if"'),
        ("true", '.@"true"'),
        ("two words", '.@"two words"'),
    ],
)
def test_dumps_quotes_names_that_are_not_plain_identifiers(name, written):
    assert dumps({name: 1}) == f".{{\n    {written} = 1,\n}}\n"
    assert loads(dumps({name: 1})) == {name: 1}


def test_dumps_escapes_strings():
    text = 'quote " back \\ nl \n cr \r tab \t bell \x07 del \x7f é ☺'
    written = dumps(text)
    assert written == '"quote \\" back \\\\ nl \\n cr \\r tab \\t bell \\x07 del \\x7f é ☺"\n'
    assert loads(written) == text


def test_dumps_scalars():
    assert dumps(None) == "null\n"
    assert dumps(True) == "true\n"
    assert dumps(False) == "false\n"
    assert dumps(-12) == "-12\n"
    assert dumps(1e16) == "1e+16\n"
    assert dumps(-math.inf) == "-inf\n"
    assert dumps(math.nan) == "nan\n"
    assert dumps(EnumLiteral("two words")) == '.@"two words"\n'
    assert dumps((1, 2)) == ".{ 1, 2 }\n"


def test_an_empty_list_reads_back_as_an_empty_struct():
    # ZON spells both `.{}`; the reader cannot know which was meant.
    assert dumps([]) == ".{}\n"
    assert loads(dumps([])) == {}


def test_enum_literals_round_trip_as_enum_literals():
    value = loads(dumps({"shell": EnumLiteral("deny")}))["shell"]
    assert isinstance(value, EnumLiteral)
    assert value == "deny"


@pytest.mark.parametrize("value", [{1: "x"}, object(), b"bytes", {"a": {3.5}}])
def test_dumps_refuses_what_zon_cannot_hold(value):
    with pytest.raises(TypeError):
        dumps(value)


def test_dumps_refuses_empty_names_and_lone_surrogates():
    with pytest.raises(ValueError, match="empty"):
        dumps({"": 1})
    with pytest.raises(ValueError, match="surrogate"):
        dumps("\ud800")


# Field names are never empty (Zig has no empty identifier); lists are never empty (an empty list reads back
# as `{}`, tested above). Everything else a config or index file can hold is generated.
_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text()
    | st.text(min_size=1).map(EnumLiteral)
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, min_size=1, max_size=5) | st.dictionaries(st.text(min_size=1), inner, max_size=5),
    max_leaves=30,
)


@given(_values)
def test_loads_of_dumps_is_the_same_value(value):
    assert loads(dumps(value)) == value


@given(_values, st.integers(min_value=0, max_value=8))
def test_round_trip_holds_at_any_indent(value, indent):
    assert loads(dumps(value, indent=indent)) == value


@given(st.text())
def test_loads_never_fails_with_anything_but_a_zon_error(text):
    with contextlib.suppress(ZonError):
        loads(text)


@pytest.mark.parametrize("text", ["²", "-", "-²", ".{ .a = ٣ }"])
def test_only_ascii_digits_start_a_number(text):
    assert "line 1, column" in str(error_of(text))


@pytest.mark.parametrize("text", ["", "\n", "a", "\n\n", '.{\n  .a = 1,\r\n\n  .b = "x"\n}', "x\ny\n\nzz\n"])
def test_line_and_column_are_counted_from_the_files_start_at_every_offset(text):
    tokenizer = zon._Tokenizer(text, None)
    for pos in range(len(text) + 1):
        before = text[:pos]
        assert tokenizer.line_column(pos) == (before.count("\n") + 1, pos - (before.rfind("\n") + 1) + 1), pos
