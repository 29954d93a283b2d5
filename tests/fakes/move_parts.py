"""A bundle's pieces as a move's source says them (chock/session/move_bundle.py), for the tests and benches that
stage a move's parts by hand: every piece but the last `parts.PIECE` bytes, the last fewer (maybe none)."""

from __future__ import annotations

import hashlib

from chock.control import parts


def bundle_pieces(bundle: bytes) -> list[bytes]:
    """The bundle's pieces, in order."""
    return [bundle[at : at + parts.PIECE] for at in range(0, len(bundle) + 1, parts.PIECE)]


def pieces_said(bundle: bytes) -> list[dict[str, object]]:
    """Each piece as `move-out`'s child says it staged it: its name, length and sha256."""
    return [
        {"part": parts.piece(index), "length": len(piece), "sha256": hashlib.sha256(piece).hexdigest()}
        for index, piece in enumerate(bundle_pieces(bundle))
    ]
