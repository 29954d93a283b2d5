"""The manual pages debian/make-manpages writes (fast: no package build), the units' Documentation= lines, and
the exit codes `chock --help` names: EXIT STATUS where a command has its own codes, and every CHOCK_*
variable of the code in ENVIRONMENT."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from chock.errors import EXIT_STATUS
from chock.platform import journal

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Every page as `man` renders it (plain text, 200 columns), by name."""
    out = tmp_path_factory.mktemp("man")
    env = {**os.environ, "PYTHONPATH": str(REPO), "SOURCE_DATE_EPOCH": "0"}
    subprocess.run([sys.executable, REPO / "debian" / "make-manpages", out], env=env, check=True, timeout=60)
    rendered = {}
    for page in [*out.glob("*.1"), *out.glob("*.5")]:
        done = subprocess.run(["man", "-l", str(page)], capture_output=True, text=True, check=True, timeout=60,
                              env={**os.environ, "MANWIDTH": "200", "MAN_KEEP_FORMATTING": ""})  # fmt: skip
        rendered[page.stem if page.suffix == ".1" else page.name] = done.stdout
    return rendered


def section(text: str, name: str) -> str:
    """The body of one section of a rendered page (empty when the page has none)."""
    found = re.search(rf"^{name}\n(.*?)(?=^\S|\Z)", text, re.M | re.S)
    return found.group(1) if found else ""


def test_run_detach_and_attach_have_an_exit_status_section_from_the_one_table(pages) -> None:
    assert set(EXIT_STATUS) == {"run", "detach", "attach"}
    for command, codes in EXIT_STATUS.items():
        body = " ".join(section(pages[f"chock-{command}"], "EXIT STATUS").split())
        for code, meaning in codes:
            assert f"{code} {meaning[:1].upper()}{meaning[1:]}." in body, (command, code)
    with_codes = {name for name, text in pages.items() if section(text, "EXIT STATUS")}
    assert with_codes == {"chock", "chock-run", "chock-detach", "chock-attach"}
    assert "chock-run(1)" in section(pages["chock"], "EXIT STATUS")


def test_the_environment_section_names_every_chock_variable_of_the_code(pages) -> None:
    used = set()
    for path in (REPO / "chock").rglob("*.py"):
        used |= set(re.findall(r"\bCHOCK_[A-Z][A-Z_]*\b", path.read_text()))
    used -= {journal.EVENT_FIELD, *journal.FIELDS.values()}  # the records' fields: the JOURNAL section's
    assert {"CHOCK_CONFIG", "CHOCK_STATE_DIR", "CHOCK_DATA_DIR", "CHOCK_DAEMON", "CHOCK_LOG_TARGET"} <= used
    environment = section(pages["chock"], "ENVIRONMENT")
    listed = set(re.findall(r"^ {7}(\S+)", environment, re.M))
    assert used <= listed, used - listed
    assert {"_CHOCK_COMPLETE", "CI", "JOURNAL_STREAM"} <= listed


def test_the_journal_section_says_how_to_read_chocks_records(pages) -> None:
    text = " ".join(section(pages["chock"], "JOURNAL").split())
    assert "journalctl --user -u chock.service" in text
    assert "journalctl --user -t chock-session CHOCK_SESSION=<id>" in text
    for name in [journal.EVENT_FIELD, *journal.FIELDS.values()]:
        assert name in text, name


def test_every_unit_documents_itself_with_a_page_that_exists(pages) -> None:
    for unit in sorted((REPO / "packaging" / "systemd").glob("chock*.s*")):
        lines = [line for line in unit.read_text().splitlines() if line.startswith("Documentation=")]
        assert lines, unit.name
        for name in re.findall(r"man:([a-z-]+)\(1\)", " ".join(lines)):
            assert name in pages, (unit.name, name)


def test_chock_help_names_the_exit_codes_of_run(home) -> None:
    for args in (["--help"], ["run", "--help"]):
        text = " ".join(home.chock(*args).stdout.split())
        assert "Exit status of chock run: 0 completed, 1 failed, 2 usage error, 3 refused before starting" in text
        assert "8 handed over to the daemon, 130 interrupted." in text
    assert "Exit status of chock detach: 0 handed over" in " ".join(home.chock("detach", "--help").stdout.split())


def test_the_config_page_lists_every_key_of_the_table_with_its_default(pages) -> None:
    from chock.config import KEYS

    text = pages["chock-config.5"]
    assert text.startswith("CHOCK-CONFIG(5)")
    keys = section(text, "KEYS")
    listed = re.findall(r"^ {7}(\.\S+)$", keys, re.M)
    assert listed == [key.path for key in KEYS]
    flat = " ".join(keys.split())
    for key in KEYS:
        assert f"Default: {key.default}." in flat, key.path
    assert "Overridden by $CHOCK_DAEMON." in flat
    assert "chock-config(1)" in section(text, "SEE ALSO")
