"""The official MCP client conformance suite, run against Chock's client (docs/mcp.md).

`@modelcontextprotocol/conformance` (pinned in tests/mcp-conformance/package.json, with the node >= 22 it needs;
scripts/test installs both with `npm ci --prefix tests/mcp-conformance`) starts each client scenario's server
and runs scripts/mcp-conformance-client against it: ServerLink over HttpPump, the code a session uses. Every
scenario it selects for revision 2025-11-25 must pass with no warning (the suite's own verdict, its exit status),
except `auth/*` (OAuth: Chock sends a stored bearer token and does no authorization flow).
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOOLS = REPO / "tests" / "mcp-conformance"
SUITE = "@modelcontextprotocol/conformance"
REVISION = "2025-11-25"
# Those the pinned suite selects today: a suite that selected none of them would pass vacuously.
KNOWN = {"initialize", "tools_call", "elicitation-sep1034-client-defaults", "sse-retry"}
INSTALL = "run `npm ci --prefix tests/mcp-conformance` (scripts/test does)"


def installed_suite() -> tuple[Path, Path]:
    """The node to run and the suite's entry point, at the pinned version, or a failure saying how to get them."""
    node = TOOLS / "node_modules" / ".bin" / "node"
    package = TOOLS / "node_modules" / SUITE / "package.json"
    assert node.exists() and package.exists(), f"the MCP conformance suite is not installed: {INSTALL}"
    pinned = json.loads((TOOLS / "package.json").read_text())["dependencies"][SUITE]
    found = json.loads(package.read_text())["version"]
    assert found == pinned, f"{SUITE} {found} is installed, {pinned} is pinned: {INSTALL}"
    return node, package.parent / "dist" / "index.js"


def selected(node: Path, suite: Path) -> list[str]:
    """The client scenarios the suite selects for REVISION, as its `list` names them: "  - sse-retry [2025-11-25]"."""
    listing = subprocess.run([node, suite, "list"], capture_output=True, text=True, timeout=120, check=True).stdout
    client = listing[listing.index("Client scenarios") :]
    return [name for name, versions in re.findall(r"^\s+- (\S+) \[([^\]]*)\]", client, re.MULTILINE)
            if REVISION in versions.split(",")]  # fmt: skip


def test_every_client_scenario_but_auth_passes(tmp_path: Path) -> None:
    node, suite = installed_suite()
    scenarios = [name for name in selected(node, suite) if not name.startswith("auth/")]
    assert set(scenarios) >= KNOWN, f"the suite no longer selects {sorted(KNOWN - set(scenarios))}"
    client = f"{shlex.quote(sys.executable)} {shlex.quote(str(REPO / 'scripts' / 'mcp-conformance-client'))}"
    failed: dict[str, str] = {}
    # One at a time: sse-retry measures how long the client waits before it reconnects, and a dozen clients
    # starting at once on a small machine would measure their start-up instead.
    for scenario in scenarios:
        results = tmp_path / "results"
        run = subprocess.run(
            [node, suite, "client", "--command", client, "--scenario", scenario, "--spec-version", REVISION,
             "-o", results],
            capture_output=True, text=True, timeout=300, cwd=tmp_path,
        )  # fmt: skip
        if run.returncode != 0:  # a failed or warning check, a timeout, or the client's own failure
            failed[scenario] = run.stderr[-4000:]
    assert not failed, "conformance scenarios failed:\n" + "\n".join(f"--- {k}\n{v}" for k, v in failed.items())
