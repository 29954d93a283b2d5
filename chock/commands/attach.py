"""`chock attach`: a terminal on a session the daemon serves (docs/architecture.md#steering).

The view is the one `chock run` shows — `chock.session.render`'s renderer over the same events — fed by the
daemon's `watch`. A dropped connection or a daemon restart resumes from the last event shown, so nothing is
missed and nothing is shown twice. A line typed while the session works is sent as `say`; `/stop` stops the
session; while an approval is pending a line is its answer (chock/commands/answering.py: y, n [message], s [rule],
p [rule]), sent through the daemon's `answer` or `answer-with` (a daemon or session too old for `answer-with` is
said so, and from then on yes or no is asked); the view rings the bell (and sends the desktop notification
`chock.terminal.notification` says the terminal shows) when the session starts to wait, as `chock run`'s does.
Ctrl-C leaves the session running. When the session ends, attach prints its end and exits with the session's exit
code; when it is abandoned, it says how to take it back and exits 1.
"""

from __future__ import annotations

import os
import queue
import select
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from chock.commands.answering import Choice, older_why, parse, question
from chock.commands.targets import SteerFailed, ask
from chock.control import daemon_protocol as dp
from chock.control.client import ControlClient, expect
from chock.control.framing import ErrorCode, ProtocolError, Unreachable
from chock.errors import EXIT_FAILED, ChockError
from chock.terminal import shown

if TYPE_CHECKING:
    from chock.session.render import TerminalView

# How long after a dropped watch attach asks again (a restarting daemon is back within a second or two).
RETRY_SECONDS = 0.5
# How often the terminal is looked at for typed lines while events are awaited.
TICK = 0.05


class AttachFailed(ChockError):
    pass


class _Watch(threading.Thread):
    """The daemon's `watch`, resumed after every drop from the last event received; what it hears goes on a
    queue as (kind, value): ("row", row), ("event", event), ("closed", None), ("lost", why), ("refused", error)."""

    def __init__(self, client: ControlClient, project: Path, session_id: str) -> None:
        super().__init__(name="attach-watch", daemon=True)
        self.client = client
        self.project = str(project)
        self.session_id = session_id
        self.heard: queue.Queue[tuple[str, Any]] = queue.Queue()
        self.done = threading.Event()

    def run(self) -> None:
        last = 0
        while not self.done.is_set():
            try:
                stream = self.client.stream(dp.WatchRequest(self.project, self.session_id, last), idle_timeout=None)
                self.heard.put(("row", expect(stream.header, dp.WatchHeader).row))
                for line in stream:
                    event = expect(line, dp.EventLine)
                    last = max(last, event.id)
                    self.heard.put(("event", event.event))
                self.heard.put(("closed", None))
            except Unreachable as error:
                self.heard.put(("lost", error.text))
            except ProtocolError as error:
                self.heard.put(("refused", error))
                return
            self.done.wait(RETRY_SECONDS)


class Attached:
    """The terminal's side: what is shown, what is pending, what was typed."""

    def __init__(
        self, client: ControlClient, project: Path, session_id: str, render: Callable[[dict[str, Any]], None],
        say: Callable[[str], None],
    ) -> None:  # fmt: skip
        self.client = client
        self.project = project
        self.session_id = session_id
        self.render = render
        self.say = say  # a line of attach's own (a note, a prompt)
        self.shown = 0
        self.status = ""
        self.exit_code: int | None = None
        self.moved_to = ""  # the host the session moved to, when its latest end says it moved
        self.pending: list[dict[str, Any]] = []  # approval requests waiting, oldest first
        self.older = False  # `answer-with` was refused as unknown: yes or no only from here on
        self._lost = False

    def heard(self, kind: str, value: Any) -> int | None:
        """Take in one thing the watch heard; the exit code once the session is over for this view."""
        if kind == "row":
            self.status = str(value.get("status", ""))
            if self._lost:
                self.say("(connected again)")
                self._lost = False
        elif kind == "event":
            self._event(value)
        elif kind == "lost":
            if not self._lost:
                self.say(f"(the daemon went away: {value}; trying again…)")
                self._lost = True
        elif kind == "refused":
            raise AttachFailed(f"the daemon refused the watch: {value.text}")
        elif kind == "closed":
            if self.moved_to:
                raise AttachFailed(
                    f"session {self.session_id} moved to {self.moved_to}: here it is history; attach to it there "
                    f"(`chock attach {self.moved_to}:{self.session_id}`)"
                )
            if self.exit_code is not None:
                return self.exit_code
            if self.status == "abandoned":
                self.say(
                    f"session {self.session_id} ended abnormally (nobody holds its log); "
                    f"`chock run --continue {self.session_id}` takes it back"
                )
                return EXIT_FAILED
        return None

    def _event(self, event: dict[str, Any]) -> None:
        event_id = event.get("id")
        if not isinstance(event_id, int) or event_id <= self.shown:
            return  # never twice
        self.shown = event_id
        self.render(event)
        kind = event.get("type")
        if kind == "approval.request" and not event.get("by_config"):
            self.pending.append(event)
            if len(self.pending) == 1:
                self.ask()
        elif kind == "approval.answer":
            head = self.pending[0] if self.pending else None
            self.pending = [p for p in self.pending if p.get("request_id") != event.get("request_id")]
            if self.pending and head is not self.pending[0]:
                self.ask()  # the one asked was answered elsewhere: the next is asked
        elif kind in ("session.start", "session.adopt"):
            self.pending, self.exit_code, self.moved_to = [], None, ""
        elif kind == "session.end" and event.get("reason") != "handover":
            self.moved_to = str(event.get("to") or "another host") if event.get("reason") == "moved" else ""
            code = event.get("exit_code")
            self.exit_code = code if isinstance(code, int) else EXIT_FAILED

    def ask(self) -> None:
        """The question for the oldest request waiting."""
        self.say("  " + question(self.pending[0], more=not self.older))

    def answer(self, request: dict[str, Any], choice: Choice) -> None:
        """Send `choice` for `request` through the daemon; one the daemon or session is too old for is said so,
        and the request asked again with yes or no only; one refused (a rule that is none) is asked again."""
        project, request_id = str(self.project), str(request.get("request_id"))
        try:
            if choice.plain:
                self.client.call(dp.AnswerRequest(project, self.session_id, request_id, choice.yes))
            else:
                verb = dp.AnswerWithRequest(
                    project, self.session_id, request_id, choice.yes, choice.scope, choice.rule, choice.note
                )
                self.client.call(verb)
        except ProtocolError as error:
            if error.code == ErrorCode.UNKNOWN_VERB and not choice.plain:
                self.older = True
                self.say(f"  ({older_why('this session runs on')})")
                self.pending.insert(0, request)
                self.ask()
                return
            self.say(f"  (not answered: {error.text})")
            if error.code != ErrorCode.NOT_PENDING:
                self.pending.insert(0, request)  # still waiting: asked again
            if self.pending:
                self.ask()
            return
        if self.pending:
            self.ask()

    def typed(self, line: str) -> None:
        """One line from the terminal: an answer while an approval waits, else `/stop` or a message."""
        text = line.strip()
        if self.pending:
            choice = parse(text, self.pending[0], more=not self.older)
            if not isinstance(choice, Choice):
                self.say(f"  ({choice}) ")
                return
            self.answer(self.pending.pop(0), choice)
            return
        if not text:
            return
        try:
            project = str(self.project)
            if text == "/stop":
                ask(self.client, dp.StopRequest(project, self.session_id), dp.Stopped)
            else:
                self.say(f"  ({ask(self.client, dp.SayRequest(project, self.session_id, text), dp.Said).how})")
        except SteerFailed as error:
            self.say(f"  ({error})")


def attach(
    client: ControlClient, project: Path, session_id: str, render: TerminalView, out: TextIO,
    keyboard: int | None, *, again: str | None = None,
) -> int:  # fmt: skip
    """Show the session until it is over for this view; returns the exit code (0 when left with Ctrl-C). `again`
    is how `chock attach` names the session to come back (default: its id alone, on this machine)."""

    def say(text: str) -> None:
        """A line of attach's own; what it quotes (a daemon's reply, a tool's name) is made safe with it."""
        text = shown(text, out)
        render.line(text if text.endswith(" ") else text + "\n")  # through the view's screen: after its spinner

    view = Attached(client, project, session_id, render, say)
    watch = _Watch(client, project, session_id)
    # Ctrl-C sets a flag the loop reads before it takes in anything else, rather than raising wherever the loop
    # happens to be: raised as it returned, it would escape as "Aborted!" (exit 1), and a watch whose ssh the same
    # Ctrl-C ended would read as the session's end. Only a steering call waiting on the daemon is interrupted.
    interrupted, steering = threading.Event(), threading.Event()

    def on_interrupt(number: int, frame: object) -> None:
        interrupted.set()
        if steering.is_set():
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_interrupt)
    watch.start()
    typed = b""
    try:
        while not interrupted.is_set():
            if keyboard is not None and select.select([keyboard], [], [], 0)[0]:
                data = os.read(keyboard, 4096)
                if not data:
                    keyboard = None  # the terminal closed: keep watching
                typed += data.replace(b"\r", b"\n")
                while b"\n" in typed and not interrupted.is_set():
                    line, _, typed = typed.partition(b"\n")
                    steering.set()
                    try:
                        view.typed(line.decode("utf-8", "replace"))
                    finally:
                        steering.clear()
            try:
                kind, value = watch.heard.get(timeout=TICK)
            except queue.Empty:
                continue
            if interrupted.is_set():
                break
            code = view.heard(kind, value)
            if code is not None:
                return code
    except KeyboardInterrupt:
        pass  # a steering call was waiting: it is left unanswered, and so is the session
    finally:
        signal.signal(signal.SIGINT, previous)
        watch.done.set()
        render.close()
    say(f"\nleft session {session_id}; it keeps running (`chock attach {again or session_id}` comes back)")
    return 0
