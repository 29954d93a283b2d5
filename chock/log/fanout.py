"""One upstream of log lines fanned out to many subscribers, with no I/O: the rules both pumps share.

The daemon follows a session's log once however many watch it (`chock.daemon.watch`, threads), and serve
holds one upstream `watch` per session however many browsers watch it (`chock.serve.feeds`, asyncio). Both
hand every new batch of lines to every subscriber, bound what one subscriber may owe, and let a subscriber
join after the id it already has with no gap and no repeat. This module is those rules, driven with plain
values: a pump reads its upstream, calls `publish`, and writes what each subscriber's `take` returns.

- **Memory with a floor.** A fan-out may keep its most recent batches (a count and a byte bound); it holds
  every line after `floor`. The daemon keeps none (the log is on its own disk), serve keeps a few thousand.
- **Joining after an id** ("last event id N" means the client has N): the subscriber is registered for
  every batch published from then on, and everything in memory after N is queued to it at once. When memory
  does not reach back to N (`Join.backfill`), the pump first sends the log after N itself and says how far
  it got (`Subscriber.backfilled`); the queue then goes on from there.
- **No gap, no repeat.** A subscriber's `sent` is the last id handed to its pump; `take` hands out only
  lines above it. Every batch records the id the fan-out had before it (`previous`): a batch whose previous
  is above `sent` would leave a hole, so the subscriber is cut instead of shown a hole as if nothing were
  missing.
- **Bounded.** Past its pending bounds (lines or bytes published since it joined and not yet taken) a
  subscriber is cut: its queue is dropped and its pump closes the stream without an end, so the client
  comes back with its last id and reads what it missed from the log rather than from this process's
  memory. What it was handed from memory on joining does not count: memory has its own bound.

Lines are the log's own (`\\n`-terminated), or whatever bytes a pump makes of one event (serve publishes
each event already encoded as a Server-Sent Event); each carries the id of its event. Within a batch ids
never decrease. Nothing here is thread-safe: the daemon's pump calls it under its follower's lock.

(Plain classes, no dataclasses or typing: the daemon imports this on its socket-activated start.)
"""

from __future__ import annotations

from collections import deque


class Batch:
    """Lines published together: their bytes, where each line starts with its id, and the fan-out's last id
    before them."""

    __slots__ = ("data", "last_id", "marks", "previous")

    def __init__(self, previous: int, data: bytes, marks: tuple[tuple[int, int], ...]) -> None:
        self.previous = previous
        self.data = data
        self.marks = marks  # (id, offset of the line's first byte), ids never decreasing
        self.last_id = marks[-1][0]

    @property
    def lines(self) -> int:
        return len(self.marks)

    def after(self, sent: int) -> bytes:
        """The bytes of the lines whose id is above `sent` (the whole batch, or a tail of it)."""
        if self.marks[0][0] > sent:
            return self.data
        for event_id, start in self.marks:
            if event_id > sent:
                return self.data[start:]
        return b""


class Subscriber:
    """One reader of a fan-out: what is owed to it, the last id handed to its pump, and how it ends.

    `final` is None while the fan-out is open, then True when its upstream is over for good (serve says
    `end`) or False when it only stopped (the client should come back). `cut` means the subscriber was
    closed so that it resumes: it fell too far behind, its stream would have had a hole, or its pump failed
    to write.
    """

    __slots__ = (
        "_bytes", "_held", "_lines", "_max_bytes", "_max_lines", "_queue", "_rest", "cut", "final", "sent",
    )  # fmt: skip

    def __init__(self, sent: int, max_lines: int, max_bytes: int) -> None:
        self.sent = sent
        self._max_lines = max_lines
        self._max_bytes = max_bytes
        self._queue: deque[Batch] = deque()
        self._lines = 0
        self._bytes = 0
        self._rest: bytes | memoryview = b""  # what a pump took and could not write yet; it goes first
        self._held = 0  # how many batches at the head of the queue are the fan-out's memory, not counted
        self.final: bool | None = None
        self.cut = False

    @property
    def pending(self) -> bool:
        return bool(self._queue or self._rest)

    @property
    def ready(self) -> bool:
        """Whether its pump has something to do: bytes to write, or an end to act on."""
        return self.cut or self.final is not None or self.pending

    @property
    def done(self) -> bool:
        """Nothing more will be written: cut, or the fan-out closed and everything owed was taken."""
        return self.cut or (self.final is not None and not self.pending)

    def hold(self, batch: Batch) -> None:
        """Queue a batch of the fan-out's memory on joining: memory already bounds it, so it does not count
        against this subscriber's own bounds."""
        if batch.last_id > self.sent:
            self._queue.append(batch)
            self._held += 1

    def push(self, batch: Batch) -> None:
        if self.cut or batch.last_id <= self.sent:
            return
        self._queue.append(batch)
        self._lines += batch.lines
        self._bytes += len(batch.data)
        if self._lines > self._max_lines or self._bytes > self._max_bytes:
            self.cut_off()

    def backfilled(self, last_id: int) -> None:
        """The pump sent the log up to `last_id` itself: the queue goes on after it."""
        self.sent = max(self.sent, last_id)

    def take(self, limit: int | None = None) -> bytes:
        """What is owed after `sent`, in order, as one piece of bytes (b"" when nothing is): everything, or
        whole batches up to about `limit` bytes (at least one), so a pump that writes in pieces never joins
        its whole backlog into one more copy.

        A batch that would follow `sent` with a hole is not taken: what comes before it is returned and the
        subscriber is cut, so the client resumes from the last id it has.
        """
        parts: list[bytes | memoryview] = []
        size = 0
        if self._rest:
            parts.append(self._rest)
            size = len(self._rest)
            self._bytes -= size
            self._rest = b""
        while self._queue and not self.cut and (limit is None or size < limit or not parts):
            batch = self._queue.popleft()
            if self._held:
                self._held -= 1
            else:
                self._lines -= batch.lines
                self._bytes -= len(batch.data)
            if batch.last_id <= self.sent:
                continue
            if batch.previous > self.sent:
                self.cut_off()
                break
            part = batch.after(self.sent)
            parts.append(part)
            size += len(part)
            self.sent = batch.last_id
        if len(parts) == 1:
            return bytes(parts[0]) if isinstance(parts[0], memoryview) else parts[0]
        return b"".join(parts)

    def give_back(self, rest: bytes | memoryview) -> None:
        """The tail of the last `take` that the pump could not write now: it goes first next time (and counts
        against the bounds, which it never exceeds by more than it did when taken)."""
        self._rest = rest
        self._bytes += len(rest)

    def cut_off(self) -> None:
        self.cut = True
        self._queue.clear()
        self._rest = b""
        self._lines = self._bytes = self._held = 0


class Join:
    """The answer to joining after an id: the new subscriber (memory after the id already queued to it), and
    whether the pump must first send the log after that id itself (memory does not reach back to it)."""

    __slots__ = ("backfill", "subscriber")

    def __init__(self, subscriber: Subscriber, backfill: bool) -> None:
        self.subscriber = subscriber
        self.backfill = backfill


class Fanout:
    """One upstream's lines for every subscriber: the recent ones in memory, the rest left to the log."""

    def __init__(
        self,
        last_id: int,
        *,
        pending_lines: int,
        pending_bytes: int,
        memory_lines: int = 0,
        memory_bytes: int = 0,
    ) -> None:
        self.last_id = last_id  # the last id published, or the one the upstream began after
        self.floor = last_id  # memory holds every line with an id above this
        self._memory: deque[Batch] = deque()
        self._memory_lines = 0
        self._memory_bytes = 0
        self._memory_bounds = (memory_lines, memory_bytes)
        self._pending_bounds = (pending_lines, pending_bytes)
        self._subscribers: set[Subscriber] = set()
        self.final: bool | None = None

    @property
    def closed(self) -> bool:
        return self.final is not None

    @property
    def idle(self) -> bool:
        """No subscriber is left."""
        return not self._subscribers

    def publish(self, data: bytes, marks: tuple[tuple[int, int], ...]) -> Batch | None:
        """New lines from the upstream, for every subscriber; lines at or below `last_id` are never sent
        twice. Returns the batch (None when it held nothing new)."""
        if self.closed or not marks or marks[-1][0] <= self.last_id:
            return None
        batch = Batch(self.last_id, data, marks)
        self.last_id = batch.last_id
        for subscriber in self._subscribers:
            subscriber.push(batch)
        self._remember(batch)
        return batch

    def _remember(self, batch: Batch) -> None:
        self._memory.append(batch)
        self._memory_lines += batch.lines
        self._memory_bytes += len(batch.data)
        most_lines, most_bytes = self._memory_bounds
        while self._memory and (self._memory_lines > most_lines or self._memory_bytes > most_bytes):
            old = self._memory.popleft()
            self._memory_lines -= old.lines
            self._memory_bytes -= len(old.data)
            self.floor = old.last_id

    def join(self, after: int) -> Join:
        """A subscriber that has every line up to `after` (see the module docstring)."""
        subscriber = Subscriber(after, *self._pending_bounds)
        for batch in self._memory:
            subscriber.hold(batch)
        if self.closed:
            subscriber.final = self.final
        else:
            self._subscribers.add(subscriber)
        return Join(subscriber, after < self.floor)

    def leave(self, subscriber: Subscriber) -> None:
        self._subscribers.discard(subscriber)

    def close(self, final: bool) -> None:
        """No more lines: each subscriber takes what it is owed, then ends (`final`: the upstream is over)."""
        if self.closed:
            return
        self.final = final
        for subscriber in self._subscribers:
            subscriber.final = final
        self._subscribers.clear()


class Fanouts:
    """The open fan-outs by key, at most one per upstream, and the caps on joining them.

    A value is whatever the pump keeps for one upstream. `admit` counts a subscriber against the caps
    before its fan-out exists (opening an upstream takes time, and everyone who waits for it holds a
    place); it names the cap that refused, and `release` gives the place back.
    """

    PER_KEY = "per-key"
    TOTAL = "total"
    KEYS = "keys"

    def __init__(self, *, per_key: int | None = None, total: int | None = None, keys: int | None = None) -> None:
        self._values: dict[object, object] = {}
        self._seats: dict[object, int] = {}
        self._seated = 0
        self._caps = (per_key, total, keys)

    def get(self, key: object) -> object | None:
        return self._values.get(key)

    def put(self, key: object, value: object) -> None:
        self._values[key] = value

    def discard(self, key: object, value: object) -> None:
        """Forget `value` when it is still the one held for `key` (a newer one may have replaced it)."""
        if self._values.get(key) is value:
            del self._values[key]

    def values(self) -> list[object]:
        return list(self._values.values())

    def admit(self, key: object) -> str | None:
        """None when one more subscriber of `key` fits (it is counted), else the cap that refuses it."""
        per_key, total, keys = self._caps
        seated = self._seats.get(key, 0)
        if per_key is not None and seated >= per_key:
            return self.PER_KEY
        if total is not None and self._seated >= total:
            return self.TOTAL
        new_key = not seated and key not in self._values
        if keys is not None and new_key and len(self._values.keys() | self._seats.keys()) >= keys:
            return self.KEYS
        self._seats[key] = seated + 1
        self._seated += 1
        return None

    def release(self, key: object) -> None:
        seated = self._seats.get(key, 0)
        if seated <= 0:
            return
        self._seated -= 1
        if seated == 1:
            del self._seats[key]
        else:
            self._seats[key] = seated - 1

    def seats(self, key: object) -> int:
        return self._seats.get(key, 0)
