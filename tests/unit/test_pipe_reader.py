"""Reading a Connection's messages in bulk (server/backends/python/pipe_reader.py): whatever the peer
wrote comes out whole and in order, however the bytes are cut, and the end of the stream is told."""

from __future__ import annotations

import multiprocessing
import os
import threading

import pytest

from server.backends.python.pipe_reader import BrokenStream, MessageReader, write_message


def test_several_messages_written_with_send_bytes_come_out_of_one_read_in_order() -> None:
    ours, theirs = multiprocessing.Pipe()
    sent = [b"first", b"", bytes(range(256)) * 40, b"last"]
    for message in sent:
        theirs.send_bytes(message)
    reader = MessageReader(ours.fileno())
    got: list[bytes] = []
    while len(got) < len(sent):
        got += reader.next_messages()
    assert got == sent
    theirs.close()
    with pytest.raises(EOFError):
        reader.next_messages()
    ours.close()


def test_a_message_cut_short_waits_for_its_rest() -> None:
    read_end, write_end = os.pipe()
    reader = MessageReader(read_end)
    whole = (5).to_bytes(4, "big") + b"hello" + (2).to_bytes(4, "big") + b"hi"
    for cut in range(1, len(whole)):
        os.write(write_end, whole[:cut])
        before = reader.read()
        os.write(write_end, whole[cut:])
        after = reader.next_messages() if len(before) < 2 else []
        while len(before) + len(after) < 2:
            after += reader.next_messages()
        assert before + after == [b"hello", b"hi"]
    os.close(write_end)
    with pytest.raises(EOFError):
        reader.next_messages()
    os.close(read_end)


def test_a_negative_length_is_refused() -> None:
    read_end, write_end = os.pipe()
    os.write(write_end, (-7).to_bytes(4, "big", signed=True))
    with pytest.raises(OSError, match="bad message length"):
        MessageReader(read_end).next_messages()
    os.close(read_end)
    os.close(write_end)


def test_a_message_whose_rest_never_comes_is_a_broken_stream() -> None:
    read_end, write_end = os.pipe()
    reader = MessageReader(read_end)
    os.write(write_end, (2).to_bytes(4, "big") + b"ok" + (10).to_bytes(4, "big") + b"half")
    assert reader.next_messages(stall_seconds=0.05) == [b"ok"]
    assert reader.partial
    with pytest.raises(BrokenStream, match=r"stopped in the middle of a message: no more bytes for 0\.05 s"):
        reader.next_messages(stall_seconds=0.05)
    os.write(write_end, b"-rest!")  # a writer that only paused is read on as before
    assert reader.next_messages(stall_seconds=0.05) == [b"half-rest!"]
    assert not reader.partial
    os.close(write_end)
    with pytest.raises(EOFError):  # between messages there is no bound: only the end ends the wait
        reader.next_messages(stall_seconds=0.05)
    os.close(read_end)


def test_messages_written_with_write_message_are_read_by_recv_bytes_and_by_the_reader() -> None:
    ours, theirs = multiprocessing.Pipe()
    sent = [b"frame", b"", bytearray(range(256)) * 1024]  # the last one larger than a pipe holds
    writer = threading.Thread(target=lambda: [write_message(theirs.fileno(), m) for m in sent * 2])
    writer.start()
    got = [ours.recv_bytes() for _ in sent]  # multiprocessing's own reader
    reader = MessageReader(ours.fileno())
    while len(got) < 2 * len(sent):
        got += reader.next_messages()
    writer.join(10)
    assert got == [bytes(m) for m in sent * 2]
    ours.close()
    with pytest.raises(OSError):  # the reader is gone
        write_message(theirs.fileno(), b"late")
    theirs.close()
