"""The official MCP client conformance suite, run against Chock's client (docs/mcp.md).

`@modelcontextprotocol/conformance` (pinned in tests/mcp-conformance/package.json, with the node >= 22 it needs;
scripts/mcp-conformance-install installs both, and scripts/test runs it) starts each client scenario's server
and runs scripts/mcp-conformance-client against it: ServerLink over HttpPump, the code a session uses. Every
scenario it selects for revision 2025-11-25 must pass with no warning, except `auth/*` (OAuth: Chock sends a
stored bearer token and does no authorization flow).
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
INSTALL = "run scripts/mcp-conformance-install (npm ci of tests/mcp-conformance/package.json)"


def installed_suite() -> tuple[Path, Path]:
    """The node to run and the suite's entry point, at the pinned version, or a failure saying how to get them."""
    node = TOOLS / "node_modules" / ".bin" / "node"
    package = TOOLS / "node_modules" / SUITE / "package.json"
    assert node.exists() and package.exists(), f"the MCP conformance suite is not installed: {INSTALL}"
    pinned = json.loads((TOOLS / "package.json").read_text())["dependencies"][SUITE]
    found = json.loads(package.read_text())["version"]
    assert found == pinned, f"{SUITE} {found} is installed, {pinned} is pinned: {INSTALL}"
    return node, package.parent / "dist" / "index.js"


def test_every_client_scenario_but_auth_passes(tmp_path: Path) -> None:
    node, suite = installed_suite()
    client = f"{shlex.quote(sys.executable)} {shlex.quote(str(REPO / 'scripts' / 'mcp-conformance-client'))}"
    run = subprocess.run(
        [node, suite, "client", "--command", client, "--suite", "all", "--spec-version", REVISION,
         "-o", tmp_path / "results"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    # The summary's lines: "✓ initialize: 1 passed, 0 failed" (", 2 warnings" when there are).
    summary = dict(re.findall(r"^[✓✗] (\S+): (.*)$", run.stdout, re.MULTILINE))
    selected = {name for name in summary if not name.startswith("auth/")}
    assert selected >= KNOWN, f"the suite did not run {sorted(KNOWN - selected)}:\n{run.stdout}\n{run.stderr}"
    failed = {name: summary[name] for name in selected if not re.fullmatch(r"[1-9]\d* passed, 0 failed", summary[name])}
    details = ""
    for name in failed:
        for checks in (tmp_path / "results").glob(f"{name}-*/checks.json"):
            bad = [c for c in json.loads(checks.read_text()) if c["status"] in ("FAILURE", "WARNING")]
            details += f"\n{name}: {json.dumps(bad, indent=1)[:3000]}"
            stderr = checks.parent / "stderr.txt"
            details += f"\nthe client's stderr: {stderr.read_text()[-2000:] if stderr.exists() else ''}"
    assert not failed, f"conformance scenarios failed: {failed}{details}"
