"""The page's Markdown renderer under node (`node --test tests/node/`): what it renders, and that text a model
wrote to be expensive (120 KB of unclosed delimiters, 60 K nested quotes or items) renders in linear time."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

NODE_TESTS = Path(__file__).parent / "node"


def test_markdown_renderer_node_tests_pass() -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed (scripts/debian-packages.txt lists nodejs)")
    files = sorted(str(path) for path in NODE_TESTS.glob("*.test.mjs"))
    assert files, f"no *.test.mjs under {NODE_TESTS}"
    # The files are named, not the directory: node 18 and 20 look for tests in a directory, newer ones take globs.
    done = subprocess.run([node, "--test", *files], capture_output=True, text=True, timeout=600, check=False)
    failed = "\n".join(line[:400] for line in done.stdout.splitlines() if not line.startswith("  "))
    assert done.returncode == 0, f"node --test failed:\n{failed}\n{done.stderr[-2000:]}"
