"""What the model reads of an MCP tool's result: text, bounded at 64 KiB.

Text content is joined, one item a line; a text resource is given with its URI. Images, audio and binary
resources are described ("[image/png, 12,345 bytes]"), never inlined: base64 in a prompt costs tokens and says
nothing the model can use. A resource link is named. `structuredContent` is given as JSON when the result has
no text of its own.
"""

from __future__ import annotations

import json
from typing import Any

from chock.log.events import TOOL_OUTPUT_LIMIT, cut

MAX_RESULT_BYTES = TOOL_OUTPUT_LIMIT


def result_text(content: list[dict[str, Any]], structured: dict[str, Any] | None) -> str:
    """The model's text for one result (content items of any shape: a server's words are not trusted)."""
    parts = [_item(item) for item in content]
    if structured is not None and not any(isinstance(item, dict) and item.get("type") == "text" for item in content):
        parts.append(json.dumps(structured, ensure_ascii=False, separators=(",", ":")))
    return bounded("\n".join(part for part in parts if part))


def bounded(text: str, limit: int = MAX_RESULT_BYTES) -> str:
    """`text` cut to `limit` bytes of UTF-8, saying so at its end."""
    kept, fields = cut(text, limit)
    return kept if not fields else f"{kept}\n[result cut: {fields['bytes']:,} bytes in all]"


def _item(item: object) -> str:
    if not isinstance(item, dict):
        return "[content of no known shape]"
    kind = item.get("type")
    if kind == "text":
        return _text(item.get("text"))
    if kind in ("image", "audio"):
        return f"[{_text(item.get('mimeType')) or kind}, {_size(item.get('data')):,} bytes]"
    if kind == "resource":
        resource = item.get("resource")
        if not isinstance(resource, dict):
            return "[a resource of no known shape]"
        uri = _text(resource.get("uri"))
        if isinstance(resource.get("text"), str):
            return f"[resource {uri}]\n{resource['text']}"
        mime = _text(resource.get("mimeType")) or "binary"
        return f"[resource {uri}: {mime}, {_size(resource.get('blob')):,} bytes]"
    if kind == "resource_link":
        name = _text(item.get("name")) or _text(item.get("title"))
        return f"[resource link: {name} {_text(item.get('uri'))}]".replace("  ", " ")
    return f"[{_text(kind) or 'unknown'} content]"


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _size(data: object) -> int:
    """The decoded size of base64 `data`, without decoding it."""
    if not isinstance(data, str):
        return 0
    stripped = data.rstrip("=")
    return len(stripped) * 3 // 4
