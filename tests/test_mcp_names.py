"""What the model is given of MCP tools: names providers accept, stable whatever the order, and results it can read."""

from __future__ import annotations

import base64
import json
import random

from chock.mcp.result_text import result_text
from chock.mcp.tool_names import VALID, model_names


def test_a_name_that_fits_is_given_as_it_is():
    assert model_names([("docs", "search"), ("docs", "get-page")]) == {
        ("docs", "search"): "mcp__docs__search",
        ("docs", "get-page"): "mcp__docs__get-page",
    }


def test_a_name_that_does_not_fit_is_mapped_and_collisions_get_a_suffix():
    pairs = [("docs", "a.b"), ("docs", "a_b"), ("docs", "a b"), ("docs", "x" * 100), ("docs", "x" * 101)]
    names = model_names(pairs)
    assert all(VALID.fullmatch(name) for name in names.values())
    assert len(set(names.values())) == len(pairs)
    assert names["docs", "a_b"] == "mcp__docs__a_b"  # the one that fits keeps its name
    assert names["docs", "a.b"].startswith("mcp__docs__a_b_") and len(names["docs", "a.b"]) == len("mcp__docs__a_b") + 5
    assert all(len(names["docs", "x" * size]) == 64 for size in (100, 101))
    assert names["docs", "x" * 100] != names["docs", "x" * 101]


def test_names_do_not_depend_on_the_order_tools_are_listed_in():
    pairs = [("s", f"tool.{index % 7}{'é' * (index % 3)}") for index in range(40)] + [("s", "tool_1")]
    shuffled = pairs[:]
    random.Random(7).shuffle(shuffled)
    assert model_names(pairs) == model_names(shuffled)


def test_text_is_joined_and_binary_content_described_never_inlined():
    png = base64.b64encode(b"\x89PNG" + b"\0" * 12341).decode()
    content = [
        {"type": "text", "text": "found 2 pages"},
        {"type": "image", "data": png, "mimeType": "image/png"},
        {"type": "resource", "resource": {"uri": "file:///a.bin", "mimeType": "application/zip", "blob": png}},
        {"type": "resource", "resource": {"uri": "file:///notes.md", "text": "# Notes"}},
        {"type": "resource_link", "uri": "https://docs.example/p", "name": "page"},
    ]
    text = result_text(content, None)
    assert png[:40] not in text
    assert text.split("\n") == [
        "found 2 pages",
        "[image/png, 12,345 bytes]",
        "[resource file:///a.bin: application/zip, 12,345 bytes]",
        "[resource file:///notes.md]",
        "# Notes",
        "[resource link: page https://docs.example/p]",
    ]


def test_structured_content_is_given_when_there_is_no_text_and_a_result_is_cut_at_64_kib():
    assert json.loads(result_text([], {"rows": [1, 2]})) == {"rows": [1, 2]}
    assert result_text([{"type": "text", "text": "said"}], {"rows": [1]}) == "said"
    cut = result_text([{"type": "text", "text": "y" * (200 * 1024)}], None)
    assert len(cut.encode()) < 65 * 1024 and cut.endswith("[result cut: 204,800 bytes in all]")
    assert result_text(["not an object", {"type": "video"}], None) == "[content of no known shape]\n[video content]"  # type: ignore[list-item]
