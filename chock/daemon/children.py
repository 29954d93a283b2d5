"""Session children: `chock run` processes the daemon spawns, waits for, and reaps (docs/protocol.md#start).

A child is the same `chock run` a person types, with the daemon's own environment and config (so the
instance is the config's default), the message on its standard input (never argv: argv is visible to
every user), and its output appended to `sessions/<id>/run.log` (never a pipe: a session must outlive the
daemon). It runs in its own session and process group, and under a systemd user manager in its own
transient scope, so neither the daemon's exit nor its restart touches it.

`start` and `adopt` reply once the child holds the log's lock and has logged its `session.start` (or, for
adopt, its `session.adopt`), both recognised by the child's pid in the event. A child that exits first is
`error refused <its last line>`, so `ok` never names a log that does not exist.

`chock run` creates the session directory itself and refuses one that exists, so a new session's output
starts in `sessions/.<id>.run.log` and is renamed into the directory the moment the child makes it: the
same open file, so nothing the child writes is lost or lands elsewhere. A child that fails before making
its log leaves nothing behind.

Children are reaped with waitpid(WNOHANG) from the main loop (woken by SIGCHLD), never waited for from a
previous daemon's life: after a restart, sessions are found from the state dir (the catalog and the lock
probe), not from process ids.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable

from chock import module_argv
from chock.control.framing import ErrorCode, ProtocolError
from chock.log.events import decode
from chock.log.reader import lines_backwards, owner_alive
from chock.paths import Layout, ensure_dir, new_session_id, project_key
from chock.platform import journal
from chock.platform.journal import CHILD_VARIABLE

TYPE_CHECKING = False  # typing is not imported at run time (docs/architecture.md#start-up)
if TYPE_CHECKING:
    import subprocess
    from pathlib import Path
    from typing import Any

    from chock.daemon.status import Status

# How long a child may take from spawn to its first event. Before it logs, a child checks its project,
# its instance, its credential (a keystore call has its own 30 s bound) and bwrap; the control
# client waits 120 s for this reply, so the daemon gives up first and says so.
READY_TIMEOUT = 100.0

# Readiness is polled: quickly at first (a replay child logs within a few hundred milliseconds), then
# less often, so a slow start costs little.
POLL_FIRST = 0.01
POLL_MAX = 0.1
# A move-in's answer is the step a `chock move` waits on, at most a few seconds: looked for at the first pace
# throughout, not up to POLL_MAX late.
POLL_MOVE_IN = POLL_FIRST

# What is read of run.log to find the child's last line: its refusal is one line near the end.
TAIL_BYTES = 16 * 1024
# How far back from a log's end a move-in child's own adopt is looked for when it died before saying it: after
# the adopt it logs its workspace.open, and at most a turn's few events before it could die.
OWN_ADOPT_LINES = 64

# Variables that belong to the daemon's own service and must not reach a child: no child inherits LISTEN_*,
# a child's sd_notify would speak for the daemon's unit, and CHOCK_LOG_TARGET is the daemon's to set.
_SERVICE_VARIABLES = (
    "LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES", "NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", CHILD_VARIABLE,
)  # fmt: skip


class Refusal(ProtocolError):
    def __init__(self, text: str) -> None:
        super().__init__(ErrorCode.REFUSED, text)


class Child:
    __slots__ = ("process", "project_key", "session_id", "started", "verb")

    def __init__(self, session_id: str, verb: str, project: str, process: subprocess.Popen[bytes]) -> None:
        self.session_id = session_id
        self.verb = verb
        self.project_key = project_key(project)  # a digest: activity and records never name the path
        self.process = process
        self.started = time.monotonic()

    @property
    def pid(self) -> int:
        return self.process.pid

    def activity(self) -> dict[str, Any]:
        """What every activity line about this child says of it."""
        return {"session": self.session_id, "verb": self.verb, "project_key": self.project_key}


class Children:
    """Our own live children, by pid; `reap()` collects the ones that have exited."""

    def __init__(
        self,
        layout: Layout,
        status: Status,
        *,
        under_manager: Callable[[], bool],
        move_to_scope: Callable[[int, str], None],
    ) -> None:
        self.layout = layout
        self.status = status
        self._under_manager = under_manager
        self._move_to_scope = move_to_scope
        self._lock = threading.Lock()
        self._live: dict[int, Child] = {}

    # Spawning ----------------------------------------------------------------------------------------

    def start(self, project: str, message: str, instance: str | None = None) -> str:
        """A new session (with the `instance` named, else the config's default): returns its id once the child
        has logged `session.start`; raises Refusal. The name is checked by the codec and resolved by the child."""
        sessions = ensure_dir(self.layout.sessions_dir)
        session_id, output, fd = self._new_output(sessions)
        args = ["--session-id", session_id] + ([f"--instance={instance}"] if instance is not None else [])
        try:
            child = self._spawn(session_id, "start", project, args, fd, stdin=message)
        except BaseException:
            os.close(fd)
            self._clean_failed_start(session_id, output)
            raise
        os.close(fd)
        moved = False
        log = self.layout.log_path(session_id)

        def ready(exited: bool) -> bool:
            nonlocal moved
            if not moved and self.layout.session_dir(session_id).is_dir():
                os.replace(output, self.layout.run_log_path(session_id))
                moved = True
            # Its own session.start, by its pid, while it holds the lock (or after it already finished).
            return _by(_first_event(log), "session.start", child.pid) and (exited or owner_alive(log))

        try:
            self._wait(child, ready)
        except Refusal:
            self._clean_failed_start(session_id, output)
            raise
        if not moved:  # it made its log between two looks
            with contextlib.suppress(FileNotFoundError):
                os.replace(output, self.layout.run_log_path(session_id))
        return session_id

    def adopt(self, session_id: str, project: str, last_id: int) -> None:
        """Carry a handed-over session on; returns once the child has logged its `session.adopt`."""
        self._carry_on(session_id, "adopt", project, ["--adopt", session_id], last_id, None)

    def continue_(self, session_id: str, project: str, last_id: int, message: str) -> None:
        """Carry an ended session on with `message` (a `say`); returns once the child has logged its
        `session.adopt`, its `workspace.open` and the message. The child follows the daemon's own approval
        policy: a session once started with --yes at a terminal does not become a way to run commands unasked."""
        self._carry_on(session_id, "say", project, ["--continue", session_id, "--for-daemon"], last_id, message)

    def resume(self, session_id: str, project: str, last_id: int) -> None:
        """Carry on a session a reboot interrupted (chock.daemon.resume); returns once the child has logged its
        `session.adopt`. The child follows the daemon's own approval policy, as for a `say`."""
        self._carry_on(session_id, "resume", project, ["--continue", session_id, "--after-reboot"], last_id, None)

    def _carry_on(
        self, session_id: str, verb: str, project: str, argv: list[str], last_id: int, message: str | None
    ) -> None:
        run_log = self.layout.run_log_path(session_id)
        handover = self.layout.session_socket(session_id, "handover")
        stale = _identity(handover)  # a socket file an earlier owner left: not the child's
        fd = os.open(run_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
        offset = os.fstat(fd).st_size
        try:
            child = self._spawn(session_id, verb, project, argv, fd, stdin=message)
        finally:
            os.close(fd)
        log = self.layout.log_path(session_id)
        wanted = ("session.adopt",) if message is None else ("session.adopt", "workspace.open", "user.message")

        def ready(exited: bool) -> bool:
            events = _events_after(log, last_id)
            adopted = next((i for i, event in enumerate(events) if _by(event, "session.adopt", child.pid)), None)
            if adopted is None:
                return False
            logged = {event.get("type") for event in events[adopted:]}
            if not all(kind in logged for kind in wanted):
                return False
            # A session carried on for a `say` is ready once the next `say` can reach it on its socket.
            bound = message is None or _identity(handover) not in (None, stale)
            return exited or (owner_alive(log) and bound)

        self._wait(child, ready, run_log=run_log, offset=offset)

    def move_in(self, session_id: str, project: str, argv: list[str], timeout: float) -> int:
        """`chock run --move-in …` (argv), in `project`: returns the id of the `session.adopt` it logged, once it
        has said so (`{"adopted": N}` on its output, N its own adopt in the log); the child then carries on as the
        session's owner, or exits when the session had ended. Its output is the session's run.log, as every
        session child's: a session coming back appends to its own."""
        coming_back = self.layout.session_dir(session_id).is_dir()
        run_log = self.layout.run_log_path(session_id)
        output = run_log if coming_back else ensure_dir(self.layout.sessions_dir) / f".{session_id}.run.log"
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | (0 if coming_back else os.O_TRUNC)
        fd = os.open(output, flags, 0o600)
        offset = os.fstat(fd).st_size
        try:
            child = self._spawn(session_id, "move-in", project, argv, fd)
        finally:
            os.close(fd)
        log = self.layout.log_path(session_id)
        adopted = 0
        moved = coming_back

        def ready(exited: bool) -> bool:
            nonlocal adopted, moved
            if not moved and self.layout.session_dir(session_id).is_dir():
                os.replace(output, run_log)
                moved = True
            said = _adopted(run_log if moved else output, offset)
            if said is None and exited:  # it may have died between its adopt and saying so: the log tells
                said = _own_adopt(log, child.pid)
            if said is None:
                return False
            events = _events_after(log, said - 1)[:1]
            if not events or not _by(events[0], "session.adopt", child.pid) or events[0].get("id") != said:
                return False
            adopted = said
            return True

        try:
            self._wait(
                child, ready, run_log=run_log if coming_back else None, offset=offset, timeout=timeout,
                pause_most=POLL_MOVE_IN,
            )  # fmt: skip
        except Refusal:
            if not coming_back:
                self._clean_failed_start(session_id, output)
            raise
        return adopted

    def remove_rule(self, project: str, rule_id: str) -> None:
        """Remove a project rule by running `chock rules remove <id> --here` in the project: the child writes the
        rules file under its lock, the daemon never does. Its refusal (a config rule, an id nobody has) is
        `error refused <its last line>`."""
        code, said = self._run_chock(["rules", "remove", rule_id, "--here"], project, f"removing rule {rule_id}")
        if code != 0:
            raise Refusal(said)

    def _new_output(self, sessions: Path) -> tuple[str, Path, int]:
        for _ in range(100):
            session_id = new_session_id()
            output = sessions / f".{session_id}.run.log"
            if self.layout.session_dir(session_id).exists():
                continue
            try:
                fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC, 0o600)
            except FileExistsError:
                continue
            return session_id, output, fd
        raise RuntimeError("could not find a free session id")

    def _spawn(
        self, session_id: str, verb: str, project: str, args: list[str], output: int, *, stdin: str | None = None
    ) -> Child:
        import subprocess

        try:
            # The project is the child's working directory, not an argument: argv is visible to every user
            # (and the journal keeps a sender's command line), and a project's path is the person's business.
            process = subprocess.Popen(
                [*module_argv("chock"), "run", *args],
                cwd=project,
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=output,
                stderr=output,
                env=self._environment(),
                start_new_session=True,  # its own session and process group: our signals are not its signals
                close_fds=True,
            )
        except (FileNotFoundError, NotADirectoryError, PermissionError) as error:
            why = error.strerror or type(error).__name__
            raise Refusal(f"{project} cannot be a project here ({why}): chock run works in a git project") from None
        child = Child(session_id, verb, project, process)
        with self._lock:
            self._live[process.pid] = child
        self.status.activity("session.spawned", **child.activity(), pid=process.pid)
        if self._under_manager():
            try:
                self._move_to_scope(process.pid, session_id)
            except Exception as error:
                # Outside its scope the session would die with the daemon's unit: it must not run at all.
                self.status.error(f"{verb}: scope", error)
                _kill(process)
                if process.stdin is not None:
                    with contextlib.suppress(OSError):
                        process.stdin.close()
                raise Refusal(f"could not put the session in its own scope unit: {error}") from None
        if stdin is not None:
            # Written only now, so a `start` child reads its task (its first act) only inside its scope.
            threading.Thread(target=_feed, args=(process, stdin), daemon=True).start()
        return child

    def remove_workspace(self, session_id: str, project: str) -> None:
        """`chock workspace remove ID` in a child: it commits the kept workspace's work to the session's branch
        and logs that. Refusal quotes its last line when it fails."""
        doing = f"removing the workspace of session {session_id}"
        code, said = self._run_chock(["workspace", "remove", session_id], project, doing)
        self.status.activity("session.workspace_removed", session=session_id, exit_code=code)
        if code != 0:
            raise Refusal(f"the workspace of session {session_id} was not removed: {said}")

    def _run_chock(self, args: list[str], project: str, doing: str) -> tuple[int, str]:
        code, said, _ = self.run_chock(args, project, doing)
        return code, said

    def run_chock(
        self,
        args: list[str],
        project: str,
        doing: str,
        timeout: float = READY_TIMEOUT,
        on_line: Callable[[bytes], None] | None = None,
    ) -> tuple[int, str, bytes]:
        """`chock ARGS` run in `project` with the daemon's environment and config, as a session child has, and
        waited for (`timeout` at most): its exit code, the last line of its stderr and its standard output, each
        line of which `on_line` is given as it comes. Whatever such a child writes (a log, a rules file, a move's
        parts) it writes itself: the daemon never does."""
        import subprocess

        try:
            process = subprocess.Popen(
                [*module_argv("chock"), *args],
                cwd=project,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=self._environment(),
                start_new_session=True,
            )
        except (FileNotFoundError, NotADirectoryError, PermissionError) as error:
            raise Refusal(f"{project} cannot be a project here ({error.strerror or type(error).__name__})") from None
        except OSError as error:
            raise Refusal(f"{doing}: could not run chock ({error.strerror or error})") from None
        expired, ended = threading.Event(), threading.Event()

        def expire() -> None:
            if ended.is_set() or process.poll() is not None:
                return
            expired.set()
            with contextlib.suppress(OSError):  # its session is its own (start_new_session): git's children too
                os.killpg(process.pid, signal.SIGKILL)

        late = threading.Timer(timeout, expire)
        late.start()
        stderr: list[bytes] = []
        errors = threading.Thread(target=lambda: stderr.append(process.stderr.read()), daemon=True)  # type: ignore[union-attr]
        errors.start()
        out, failed = [], None
        try:
            for line in process.stdout:  # type: ignore[union-attr]  # a pipe
                out.append(line)
                if on_line is not None and failed is None:
                    try:
                        on_line(line)
                    except BaseException as error:  # raised once the child is done: it is never cut short
                        failed = error
            ended.set()
            late.cancel()
            errors.join()
            code = process.wait()
        finally:
            late.cancel()
            process.stdout.close()  # type: ignore[union-attr]
            process.stderr.close()  # type: ignore[union-attr]
        if failed is not None:
            raise failed
        if expired.is_set():
            raise Refusal(f"{doing} took more than {timeout:g} s: `chock {' '.join(args[:2])}` was stopped")
        said = b"".join(stderr).decode("utf-8", "replace").strip().splitlines()
        if not said:
            said = [f"`chock {' '.join(args[:2])}` was killed by signal {-code}" if code < 0 else f"exit status {code}"]
        return code, self.unnamed(said[-1]), b"".join(out)

    def unnamed(self, said: str) -> str:
        """A child's last line as a reply quotes it: the daemon's config file and directories named by what they
        are, not where (docs/protocol.md: a refusal names no path of the daemon's)."""
        import re

        layout = self.layout
        for path, name in (
            (layout.config_file, "the daemon's config file"),
            (layout.state_dir, "the daemon's state directory"),
            (layout.data_dir, "the daemon's data directory"),
        ):
            if path:  # the whole path, not the start of a longer name (`/x/chock` in `/x/chock-project`)
                said = re.sub(re.escape(path.rstrip("/")) + r"(?=$|[/\s'\"`,;:)\]]|\.(?:\s|$))", name, said)
        return said

    def _environment(self) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items() if key not in _SERVICE_VARIABLES}
        # The child reads the very config and dirs the daemon was started with (`chock --config …`).
        env["CHOCK_CONFIG"] = str(self.layout.config)
        env["CHOCK_STATE_DIR"] = str(self.layout.state)
        env["CHOCK_DATA_DIR"] = str(self.layout.data)
        env.update(journal.child_environment())  # the child records its own lifecycle where the daemon does
        return env

    def _wait(
        self,
        child: Child,
        ready: Callable[[bool], bool],
        *,
        run_log: Path | None = None,
        offset: int = 0,
        timeout: float = READY_TIMEOUT,
        pause_most: float = POLL_MAX,
    ) -> None:
        deadline = time.monotonic() + timeout
        pause = POLL_FIRST
        while True:
            if ready(False):
                return
            code = child.process.poll()
            if code is not None:
                if ready(True):  # logged, then finished (a short session) before this look
                    return
                path = run_log or self.layout.run_log_path(child.session_id)
                if not path.exists():
                    path = self.layout.sessions_dir / f".{child.session_id}.run.log"
                line = self.unnamed(last_line(path, offset))
                self.status.activity("session.refused", **child.activity(), exit_code=code)
                raise Refusal(line or f"the session exited with code {code} before it started")
            if time.monotonic() >= deadline:
                _kill(child.process)
                self.status.activity("session.refused", **child.activity(), exit_code=None)
                raise Refusal(f"the session did not start within {timeout:g} s; it was stopped")
            time.sleep(pause)
            pause = min(pause_most, pause * 1.5)

    def _clean_failed_start(self, session_id: str, output: Path) -> None:
        """Remove what a child that never made its log left: its output file, a directory with no log."""
        with contextlib.suppress(FileNotFoundError):
            output.unlink()
        directory = self.layout.session_dir(session_id)
        if directory.is_dir() and not self.layout.log_path(session_id).exists():
            import shutil  # only after a failed start (docs/architecture.md#start-up)

            shutil.rmtree(directory, ignore_errors=True)

    # Supervising ------------------------------------------------------------------------------------

    def reap(self) -> list[Child]:
        """Collect every child of ours that has exited (waitpid WNOHANG), so no zombie stays."""
        with self._lock:
            children = list(self._live.values())
        ended = []
        for child in children:
            code = child.process.poll()
            if code is None:
                continue
            with self._lock:
                self._live.pop(child.pid, None)
            ended.append(child)
            self.status.activity("session.ended", **child.activity(), exit_code=code)
        return ended

    def owned(self) -> list[str]:
        """Ids of the sessions our live children run."""
        with self._lock:
            return sorted(child.session_id for child in self._live.values() if child.process.returncode is None)


def _feed(process: subprocess.Popen[bytes], message: str) -> None:
    stdin = process.stdin
    if stdin is None:
        return
    try:
        stdin.write(message.encode("utf-8", "surrogateescape"))
    except (BrokenPipeError, ValueError, OSError):
        pass  # the child exited first: its run.log says why, and the waiter relays it
    finally:
        with contextlib.suppress(OSError):
            stdin.close()


def _kill(process: subprocess.Popen[bytes]) -> None:
    import signal

    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        process.wait(5)


def _by(event: dict[str, Any] | None, kind: str, pid: int) -> bool:
    return event is not None and event.get("type") == kind and event.get("pid") == pid


def _first_event(path: Path) -> dict[str, Any] | None:
    try:
        with open(path, "rb") as handle:
            line = handle.readline()
    except FileNotFoundError:
        return None
    return decode(line) if line.endswith(b"\n") else None


def _events_after(path: Path, after: int) -> list[dict[str, Any]]:
    from chock.log.reader import read_events

    try:
        return list(read_events(path, after))
    except FileNotFoundError:
        return []


def _own_adopt(path: Path, pid: int) -> int | None:
    """The id of the `session.adopt {via: move}` the move-in child `pid` logged, looked for among the log's last
    OWN_ADOPT_LINES lines: the commit point of a move whose child died before it said `{"adopted": N}`."""
    from itertools import islice

    try:
        with open(path, "rb") as handle:
            for _, line in islice(lines_backwards(handle), OWN_ADOPT_LINES):
                event = decode(line)
                if event is not None and _by(event, "session.adopt", pid) and event.get("via") == "move":
                    found = event.get("id")
                    return found if type(found) is int else None
    except FileNotFoundError:
        return None
    return None


def _adopted(path: Path, offset: int) -> int | None:
    """N of the first `{"adopted": N}` line written to `path` after `offset` (a move-in child's word)."""
    import json

    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            text = handle.read(TAIL_BYTES)
    except FileNotFoundError:
        return None
    for line in text.splitlines():
        if line.startswith(b'{"adopted"'):
            with contextlib.suppress(ValueError):
                value = json.loads(line)
                said = value.get("adopted") if isinstance(value, dict) else None
                if type(said) is int and said > 0:
                    return said
    return None


def last_line(path: Path, offset: int = 0) -> str:
    """The last non-empty line written to `path` after `offset`, without chock's `chock: ` prefix."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            start = max(offset, size - TAIL_BYTES)
            handle.seek(start)
            text = handle.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    line = lines[-1]
    return line[len("chock: ") :] if line.startswith("chock: ") else line


def _identity(path: Path) -> tuple[int, int] | None:
    """The (device, inode) of what is at `path`, or None when nothing is."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino
