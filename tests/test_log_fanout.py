"""The fan-out core (chock/log/fanout.py) driven with plain values: what each subscriber is handed, and when
it must read the log itself, with no gap and no repeat; the bounds; the caps on joining."""

from __future__ import annotations

from chock.log.fanout import Fanout, Fanouts


def line(n: int) -> bytes:
    return b'{"id": %d}\n' % n


def publish(fanout: Fanout, *ids: int) -> None:
    """One batch of the lines with these ids."""
    data, marks = b"", []
    for n in ids:
        marks.append((n, len(data)))
        data += line(n)
    fanout.publish(data, tuple(marks))


def lines(*ids: int) -> bytes:
    return b"".join(line(n) for n in ids)


def fanout(last: int = 0, **bounds: int) -> Fanout:
    bounds = {"pending_lines": 100, "pending_bytes": 1 << 20, **bounds}
    return Fanout(last, **bounds)


def test_every_subscriber_gets_every_batch_published_after_it_joined_once_and_in_order():
    fan = fanout()
    first = fan.join(0).subscriber
    publish(fan, 1, 2)
    second = fan.join(2).subscriber
    publish(fan, 3)
    publish(fan, 4, 5)
    assert first.take() == lines(1, 2, 3, 4, 5)
    assert second.take() == lines(3, 4, 5)
    assert first.take() == b"" and first.sent == 5
    publish(fan, 5)  # at or below the last id: never twice
    publish(fan, 6)
    assert first.take() == lines(6) and second.take() == lines(6)


def test_joining_inside_memory_is_served_from_memory_and_below_the_floor_reads_the_log_first():
    fan = fanout(memory_lines=3, memory_bytes=1 << 20)
    for n in range(1, 7):
        publish(fan, n)
    assert fan.floor == 3  # memory holds 4, 5, 6

    warm = fan.join(3)
    assert not warm.backfill
    assert warm.subscriber.take() == lines(4, 5, 6)

    cold = fan.join(1)
    assert cold.backfill  # 2 and 3 are only in the log
    publish(fan, 7)  # arrives while the pump reads the log
    cold.subscriber.backfilled(5)  # the log, read after 1, reached 5
    assert cold.subscriber.take() == lines(6, 7)  # nothing twice, nothing missing
    assert not cold.subscriber.cut


def test_a_backfill_that_falls_short_of_memory_cuts_the_subscriber_rather_than_leave_a_hole():
    fan = fanout(memory_lines=2, memory_bytes=1 << 20)
    for n in range(1, 6):
        publish(fan, n)
    join = fan.join(1)
    assert join.backfill
    join.subscriber.backfilled(2)  # memory starts after 3: 3 would be missing
    assert join.subscriber.take() == b""
    assert join.subscriber.cut and join.subscriber.done


def test_a_batch_joined_in_its_middle_is_handed_from_the_first_line_after_the_id():
    fan = fanout(memory_lines=10, memory_bytes=1 << 20)
    publish(fan, 1, 2, 3, 4)
    assert fan.join(2).subscriber.take() == lines(3, 4)
    # A line that is no event carries the id before it, so it goes with that event.
    fan.publish(line(5) + b"not json\n" + line(6), ((5, 0), (5, len(line(5))), (6, len(line(5)) + 9)))
    assert fan.join(5).subscriber.take() == lines(6)


def test_no_memory_means_every_late_joiner_reads_the_log():
    fan = fanout(7)
    assert not fan.join(7).backfill
    assert fan.join(6).backfill
    publish(fan, 8)
    assert fan.floor == 8
    joined = fan.join(8)
    assert not joined.backfill and joined.subscriber.take() == b""


def test_a_subscriber_past_its_bounds_is_cut_and_memory_handed_on_joining_does_not_count():
    fan = fanout(pending_lines=3, pending_bytes=1 << 20, memory_lines=10, memory_bytes=1 << 20)
    for n in range(1, 9):
        publish(fan, n)
    late = fan.join(0).subscriber  # 8 lines from memory, more than its bound of 3: not cut
    slow = fan.join(8).subscriber
    publish(fan, 9)
    publish(fan, 10)
    assert not late.cut and not slow.cut
    publish(fan, 11, 12)  # four lines owed to each: past the bound
    assert late.cut and slow.cut and late.done
    assert late.take() == b"" and slow.take() == b""
    publish(fan, 13)
    assert slow.take() == b""  # once cut, it is handed nothing more: its client resumes from its last id

    by_bytes = fanout(pending_lines=100, pending_bytes=2 * len(line(1)))
    reader = by_bytes.join(0).subscriber
    publish(by_bytes, 1, 2)
    assert not reader.cut
    publish(by_bytes, 3)
    assert reader.cut


def test_what_a_pump_could_not_write_goes_first_and_counts_against_the_bound():
    fan = fanout(pending_lines=100, pending_bytes=3 * len(line(1)) - 1)
    reader = fan.join(0).subscriber
    publish(fan, 1, 2)
    data = reader.take()
    reader.give_back(data[5:])
    publish(fan, 3)
    assert reader.take() == data[5:] + lines(3)
    reader.give_back(lines(3))
    publish(fan, 4, 5)  # one line given back and two new: three lines' bytes, past the bound
    assert reader.cut


def test_closing_hands_out_what_is_owed_then_ends_and_a_late_joiner_ends_at_once():
    fan = fanout(memory_lines=10, memory_bytes=1 << 20)
    reader = fan.join(0).subscriber
    publish(fan, 1)
    assert reader.pending and reader.final is None
    fan.close(True)
    assert reader.final is True and not reader.done and reader.ready
    assert reader.take() == lines(1)
    assert reader.done and not reader.cut
    publish(fan, 2)
    assert fan.last_id == 1  # nothing is published after the close
    late = fan.join(0).subscriber
    assert late.final is True and late.take() == lines(1) and late.done
    assert fan.idle


def test_a_pump_that_stops_early_says_the_upstream_is_not_over():
    fan = fanout()
    reader = fan.join(0).subscriber
    fan.close(False)
    assert reader.final is False and reader.done


def test_leaving_stops_delivery():
    fan = fanout()
    reader = fan.join(0).subscriber
    fan.leave(reader)
    assert fan.idle
    publish(fan, 1)
    assert reader.take() == b""


def test_the_caps_on_joining_per_key_in_total_and_on_keys():
    table = Fanouts(per_key=2, total=3, keys=2)
    assert table.admit("a") is None
    assert table.admit("a") is None
    assert table.admit("a") == Fanouts.PER_KEY
    assert table.admit("b") is None
    assert table.admit("b") == Fanouts.TOTAL
    table.release("a")
    assert table.admit("c") == Fanouts.KEYS  # a and b hold places: a third key would be one too many
    assert table.admit("b") is None
    table.release("b")
    table.release("b")
    assert table.admit("c") is None  # b left entirely


def test_an_open_fanout_counts_as_a_key_until_it_is_discarded_and_only_by_its_own_value():
    table = Fanouts(keys=1)
    first, second = object(), object()
    table.put("a", first)
    assert table.admit("b") == Fanouts.KEYS
    assert table.admit("a") is None  # joining the one already open is no new key
    table.discard("a", second)  # not the one held: nothing happens
    assert table.get("a") is first
    table.release("a")
    table.discard("a", first)
    assert table.get("a") is None and table.values() == []
    assert table.admit("b") is None
