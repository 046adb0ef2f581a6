"""A socket's mailbox (telemetry.hub.Mailbox): frames its socket has not taken yet are merged, so a slow
socket gets fewer frames but every GPU's newest row."""

import asyncio
import json

from telemetry.hub import Frame, Mailbox, encode


def frame(rows: list[list]) -> Frame:
    return Frame("pool-1", rows, encode("pool-1", rows))


def take(mailbox: Mailbox) -> str:
    return asyncio.run(asyncio.wait_for(mailbox.take(), 5))


def test_a_frame_taken_at_once_goes_out_as_the_view_encoded_it():
    mailbox = Mailbox()
    first = frame([[1, 10.0, 50]])
    assert mailbox.put(first) is False
    assert take(mailbox) is first.text  # shared by the view's sockets, not encoded again
    assert not mailbox.ready.is_set()


def test_frames_not_taken_yet_merge_with_the_newest_row_of_each_gpu():
    mailbox = Mailbox()
    assert mailbox.put(frame([[1, 10.0, 50], [2, 10.0, 60]])) is False
    assert mailbox.put(frame([[2, 11.0, 61], [3, 11.0, 70]])) is True
    assert mailbox.put(frame([[1, 9.0, 49], [3, 12.0, 71]])) is True  # GPU 1's row is older: kept as was
    message = json.loads(take(mailbox))
    assert message["type"] == "telemetry.frame" and message["view"] == "pool-1"
    assert message["gpus"] == [[1, 10.0, 50], [2, 11.0, 61], [3, 12.0, 71]]
    # Empty again: the next frame starts afresh.
    latest = frame([[2, 13.0, 62]])
    assert mailbox.put(latest) is False
    assert take(mailbox) is latest.text
