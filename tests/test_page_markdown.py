"""The page's ES modules (chock/serve/static/): each under 600 lines, every import of index.html's entry resolves
to a file serve serves, and their `node --test` tests pass (tests/node/) — among them the Markdown renderer's,
that text a model wrote to be expensive (120 KB of unclosed delimiters, 60 K nested quotes or items) renders in
linear time."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).parent.parent
STATIC = ROOT / "chock/serve/static"
NODE_TESTS = Path(__file__).parent / "node"
MAX_LINES = 600

# `import … from "./x.js"`, `import "./x.js"` and `export … from "./x.js"`; the page has no dynamic import.
IMPORT = re.compile(r"""^(?:import|export)\b[^;()"']*?\bfrom\s*["']([^"']+)["']|^import\s*["']([^"']+)["']""", re.M)


def entries() -> list[str]:
    """The module scripts index.html loads, as names under static/."""
    page = (STATIC / "index.html").read_text()
    found = re.findall(r'<script type="module" src="/static/([^"]+)"></script>', page)
    assert found, "index.html loads no <script type=module> from /static/"
    assert "<script>" not in page and "<script src" not in page, "every script of the page is a module"
    return found


def test_no_script_of_the_page_is_over_600_lines() -> None:
    long = {p.name: n for p in STATIC.glob("*.js") if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}, f"split these by concern (at most {MAX_LINES} lines each)"


def test_every_module_the_entry_imports_resolves() -> None:
    seen: set[str] = set()
    todo = entries()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = STATIC / name
        assert path.is_file(), f"{name} is imported but is not in chock/serve/static/"
        for specifier in (a or b for a, b in IMPORT.findall(path.read_text())):
            # serve's /static/{name} serves one directory, no subdirectories
            assert re.fullmatch(r"\./[\w-]+\.js", specifier), f"{name} imports {specifier!r}, not ./<name>.js"
            todo.append(specifier[2:])
    unused = {p.name for p in STATIC.glob("*.js")} - seen
    assert unused == set(), "modules index.html never loads"


def test_node_tests_of_the_modules_pass() -> None:
    node = shutil.which("node")
    # Required, as every real component of the suite is: scripts/test installs it (debian-packages.txt: nodejs).
    assert node is not None, "node is not installed: run scripts/system-packages (debian-packages.txt lists nodejs)"
    files = sorted(str(path) for path in NODE_TESTS.glob("*.test.mjs"))
    assert files, f"no *.test.mjs under {NODE_TESTS}"
    # The files are named, not the directory: node 18 and 20 look for tests in a directory, newer ones take globs.
    done = subprocess.run([node, "--test", *files], capture_output=True, text=True, timeout=600, check=False)
    failed = "\n".join(line[:400] for line in done.stdout.splitlines() if not line.startswith("  "))
    assert done.returncode == 0, f"node --test failed:\n{failed}\n{done.stderr[-2000:]}"
