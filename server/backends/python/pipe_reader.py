"""Reading a `multiprocessing.connection.Connection`'s messages in bulk: one read() takes every message
the peer has written so far, where `Connection.recv_bytes` takes one message per two reads. Under
load the server and an instance process so take several requests or responses per wake-up.

The framing is Connection's own (a 4-byte big-endian signed length, or -1 and an 8-byte length for a
message over 2 GiB), so a writer may keep `send_bytes`; the per-request frames go through
`write_message`, one writev without send_bytes' Python-level checks. A message cut short by a
non-blocking read stays in the buffer until the rest arrives. Bytes that are not a message (a
negative length), and a message whose rest does not come, are `BrokenStream`: nothing after them can
be trusted. The server and an instance process talk over a `PipePair`, an os.pipe() each way.
"""

from __future__ import annotations

import os
import select
import struct
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.context import BaseContext

_SHORT = struct.Struct("!i")
_LONG = struct.Struct("!Q")
_CHUNK = 1 << 18
_LARGEST_SHORT = 0x7FFFFFFF


def write_message(fd: int, data: bytes | bytearray) -> None:
    """`data` as one message in Connection's framing, on a blocking descriptor (OSError when the
    reader is gone): its head and body in one writev, with no copy of the body."""
    size = len(data)
    head = _SHORT.pack(size) if size <= _LARGEST_SHORT else _SHORT.pack(-1) + _LONG.pack(size)
    written = os.writev(fd, (head, data))
    if written < len(head) + size:  # cut short (a signal, or a full pipe): the rest in order
        rest = memoryview(head + data)[written:]
        while rest:
            rest = rest[os.write(fd, rest) :]


class BrokenStream(OSError):
    """The stream holds bytes that are not a message, or stopped in the middle of one."""


class MessageReader:
    """The messages arriving on one file descriptor, in order."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buffer = bytearray()
        # read into, again and again: a fresh _CHUNK of bytes per os.read() is, past malloc's mmap
        # threshold, an mmap, a page fault, an mremap and a munmap for every message that wakes us
        self._chunk = memoryview(bytearray(_CHUNK))
        self.eof = False
        self.received = 0  # bytes read so far: whether a message begun is still coming

    @property
    def partial(self) -> bool:
        """Part of a message is buffered, its rest not read yet."""
        return bool(self._buffer)

    def pending(self) -> list[bytes]:
        """The complete messages already buffered (no read)."""
        messages: list[bytes] = []
        buffer = self._buffer
        start, end = 0, len(buffer)
        while end - start >= 4:
            (size,) = _SHORT.unpack_from(buffer, start)
            head = 4
            if size == -1:
                if end - start < 12:
                    break
                (size,) = _LONG.unpack_from(buffer, start + 4)
                head = 12
            elif size < 0:
                raise BrokenStream(f"bad message length {size} on the instance pipe")
            if end - start - head < size:
                break
            messages.append(bytes(buffer[start + head : start + head + size]))
            start += head + size
        if start:
            del buffer[:start]
        return messages

    def read(self) -> list[bytes]:
        """What one read() brings, as complete messages (none when it brought only part of one, or
        nothing on a non-blocking descriptor). At the end of the stream `eof` is set, and an
        EOFError raised once nothing complete is left."""
        try:
            size = os.readv(self._fd, (self._chunk,))
        except BlockingIOError:
            return self.pending()
        except InterruptedError:
            return self.pending()
        if not size:
            self.eof = True
            messages = self.pending()
            if not messages:
                raise EOFError
            return messages
        self.received += size
        self._buffer += self._chunk[:size]
        return self.pending()

    def next_messages(self, stall_seconds: float | None = None) -> list[bytes]:
        """At least one message, reading (blocking) until there is one; EOFError at the end. With
        `stall_seconds`, BrokenStream when part of a message is buffered and no more bytes come for
        that long (waiting between messages has no bound)."""
        messages = self.pending()
        while not messages:
            if self.eof:
                raise EOFError
            if stall_seconds is not None and self._buffer and not _readable(self._fd, stall_seconds):
                raise BrokenStream(
                    f"it stopped in the middle of a message: no more bytes for {stall_seconds:g} s"
                )
            messages = self.read()
        return messages


def _readable(fd: int, timeout: float) -> bool:
    poll = select.poll()  # not select(): a busy server's descriptors pass FD_SETSIZE
    poll.register(fd, select.POLLIN)
    return bool(poll.poll(timeout * 1000))


class PipePair:
    """Both directions between the server and an instance process, each an os.pipe() Connection:
    a pipe wakes its reader for less than a socketpair (multiprocessing's duplex Pipe) does. Reads
    go to `fileno()`, so that it stands where a duplex Connection stood; writes to `write_fileno()`."""

    def __init__(self, reader: Connection, writer: Connection) -> None:
        self.reader = reader
        self.writer = writer

    def fileno(self) -> int:
        return self.reader.fileno()

    def write_fileno(self) -> int:
        return self.writer.fileno()

    def send_bytes(self, data: bytes) -> None:
        self.writer.send_bytes(data)

    def poll(self, timeout: float) -> bool:
        return self.reader.poll(timeout)

    def close(self) -> None:
        self.reader.close()
        self.writer.close()


def pipe_pairs(context: BaseContext) -> tuple[PipePair, PipePair]:
    """The server's end and the instance's end of two pipes, one each way."""
    ours_in, theirs_out = context.Pipe(duplex=False)
    theirs_in, ours_out = context.Pipe(duplex=False)
    return PipePair(ours_in, ours_out), PipePair(theirs_in, theirs_out)
