"""The keystore child: every call in a process of its own, killed with what it started at the bound."""

from __future__ import annotations

import sys
import time

import pytest

from chock.credentials import _child
from chock.credentials.refusals import CredentialError, NobodyAnswered, StoreLocked, StoreTimeout, StoreUnavailable


def fake_child(monkeypatch, code: str) -> None:
    monkeypatch.setattr(_child, "child_command", lambda: [sys.executable, "-c", code])


def test_the_bound_defaults_to_thirty_seconds_and_the_environment_shortens_it():
    assert _child.keystore_timeout({}) == 30.0
    assert _child.keystore_timeout({"CHOCK_KEYSTORE_TIMEOUT": "2.5"}) == 2.5
    for bad in ("soon", "0", "-1"):
        with pytest.raises(CredentialError, match="CHOCK_KEYSTORE_TIMEOUT"):
            _child.keystore_timeout({"CHOCK_KEYSTORE_TIMEOUT": bad})


def test_run_bounded_kills_the_whole_group_so_no_helper_keeps_the_pipes_open():
    started = time.monotonic()
    done = _child.run_bounded(["sh", "-c", "sleep 30 & sleep 30"], input=None, timeout=0.3)
    assert done.timed_out
    assert time.monotonic() - started < 3


def test_a_child_that_hangs_is_a_timeout_naming_the_store_and_the_bound(monkeypatch):
    fake_child(monkeypatch, "import time; time.sleep(30)")
    started = time.monotonic()
    with pytest.raises(StoreTimeout) as caught:
        _child.call("secret_service", "get", name="work", timeout=0.4)
    assert time.monotonic() - started < 3
    assert "secret_service store did not answer within 0.4 s" in str(caught.value)
    assert "CHOCK_KEYSTORE_TIMEOUT" in str(caught.value)


def test_a_child_killed_while_it_waits_on_an_unlock_prompt_means_nobody_answered(monkeypatch):
    fake_child(monkeypatch, 'import time; print(\'{"progress": "unlock"}\', flush=True); time.sleep(30)')
    with pytest.raises(NobodyAnswered, match=r"nobody answered its unlock dialog within 0\.4 s"):
        _child.call("secret_service", "get", name="work", timeout=0.4)


def test_errors_come_back_as_their_own_class(monkeypatch):
    fake_child(monkeypatch, 'print(\'{"error": {"kind": "locked", "message": "it is locked"}}\')')
    with pytest.raises(StoreLocked, match="it is locked"):
        _child.call("secret_service", "get", name="work", timeout=10)


def test_a_crashed_child_says_what_it_said_without_the_value(monkeypatch):
    fake_child(monkeypatch, "import sys; sys.stderr.write('boom: ' + sys.stdin.read()[-40:]); sys.exit(2)")
    with pytest.raises(StoreUnavailable) as caught:
        _child.call("secret_service", "set", name="work", value="sk-do-not-show", timeout=10)
    assert "status 2" in str(caught.value) and "boom" in str(caught.value)
    assert "sk-do-not-show" not in str(caught.value)


def test_the_request_travels_on_stdin_and_the_answer_on_stdout(monkeypatch):
    fake_child(
        monkeypatch,
        "import json, sys; r = json.load(sys.stdin); print(json.dumps({'ok': True, 'value': r['value'][::-1]}))",
    )
    assert _child.call("secret_service", "set", name="work", value="abc", timeout=10)["value"] == "cba"


def test_the_real_child_answers_an_unknown_store_as_an_error():
    done = _child.run_bounded(
        _child.child_command(), input=b'{"store": "nothing", "op": "get"}', timeout=30, env=_child._child_env()
    )
    assert done.returncode == 0
    assert b'"error"' in done.stdout and b"KeyError" in done.stdout


def test_the_parent_drops_a_source_snippet_from_whatever_a_child_says(monkeypatch):
    """A store's parser may quote the line it failed on, and that line is a secret's: the parent keeps the words
    and drops the snippet, from an answer and from the stderr of a child that gave none."""
    said = 'dotenv syntax error at line 1, column 12: unterminated quoted value\n  |\n1 | K="sk-quoted-canary\n  |   ^'
    fake_child(
        monkeypatch, f"import json; print(json.dumps({{'error': {{'kind': 'secretspec', 'message': {said!r}}}}}))"
    )
    with pytest.raises(CredentialError) as caught:
        _child.call("secretspec", "get", name="CHOCK_K", timeout=10)
    assert str(caught.value) == "dotenv syntax error at line 1, column 12: unterminated quoted value"
    fake_child(monkeypatch, f"import sys; sys.stderr.write({said!r} + '\\n'); sys.exit(3)")
    with pytest.raises(StoreUnavailable) as caught:
        _child.call("secretspec", "get", name="CHOCK_K", timeout=10)
    assert "unterminated quoted value" in str(caught.value) and "sk-quoted-canary" not in str(caught.value)
