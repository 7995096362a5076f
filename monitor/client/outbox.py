"""Encoded events waiting to be sent: one reusable buffer per batch, sent without a copy.

Why not a deque of `bytes`, one per event: a few kB object per event, freed a second later,
makes glibc give the top of the heap back to the kernel and fault it in again for the next
events, and joining a batch into one body copies megabytes while holding the GIL. Here a batch
is one `bytearray` holding `event,event,...,` that is kept and refilled once sent, and its
events go out as `memoryview` slices.

Not thread-safe: the recorder calls it under its outbox lock. No I/O.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

COMMA = 0x2C
HEAD = b'{"events":['
TAIL = b"]}"
SPARE_BUFFERS = 1  # emptied batch buffers kept for reuse (one is enough: see Outbox.release)


class Batch:
    """Events back to back in one buffer, each followed by a comma; `ends[i]` ends event i."""

    __slots__ = ("buf", "ends", "first", "nbytes", "size")

    def __init__(self) -> None:
        self.buf = bytearray()
        self.ends: list[int] = []
        self.first = 0  # events before this one were dropped (the oldest go first)
        self.size = 0  # bytes in use; the rest of buf is left over from an earlier batch
        self.nbytes = 0  # bytes of the live events, commas excluded

    def __len__(self) -> int:
        return len(self.ends) - self.first

    def add(self, data: bytes) -> None:
        end = self.size + len(data)
        if end < len(self.buf):  # reuse the buffer in place: same length, no reallocation
            self.buf[self.size : end] = data
            self.buf[end] = COMMA
        else:
            try:
                del self.buf[self.size :]
            except BufferError:  # a slice from an earlier send is still referenced somewhere
                self.buf = self.buf[: self.size]
            self.buf += data
            self.buf.append(COMMA)
        self.ends.append(end)
        self.size = end + 1
        self.nbytes += len(data)

    def span(self, i: int) -> tuple[int, int]:
        """Where event i starts and ends in `buf`."""
        return (self.ends[i - 1] + 1 if i else 0), self.ends[i]

    def drop_oldest(self) -> int:
        """Forget the oldest live event; returns its size in bytes."""
        start, end = self.span(self.first)
        self.first += 1
        self.nbytes -= end - start
        return end - start

    def live(self) -> list[int]:
        """Indexes of the events not dropped, oldest first."""
        return list(range(self.first, len(self.ends)))

    def body(self, items: Sequence[int]) -> list[bytes | memoryview]:
        """The request body `{"events":[...]}` for these events (sorted), as pieces to send.

        Runs of consecutive events are one slice each: a whole batch is a single slice.
        """
        view = memoryview(self.buf)
        pieces: list[bytes | memoryview] = [HEAD]
        i = 0
        while i < len(items):
            j = i
            while j + 1 < len(items) and items[j + 1] == items[j] + 1:
                j += 1
            if i:
                pieces.append(b",")
            pieces.append(view[self.span(items[i])[0] : self.ends[items[j]]])
            i = j + 1
        pieces.append(TAIL)
        view.release()  # the slices keep their own export; the buffer is free once they go
        return pieces

    def event(self, i: int) -> bytes:
        start, end = self.span(i)
        return bytes(self.buf[start:end])

    def reset(self) -> None:
        self.ends.clear()
        self.first = self.size = self.nbytes = 0


class Outbox:
    """Batches of encoded events, oldest first, bounded in events and bytes (oldest dropped)."""

    def __init__(
        self, max_events: int, max_bytes: int, batch_events: int, batch_bytes: int
    ) -> None:
        self.max_events = max_events
        self.max_bytes = max_bytes
        self.batch_events = batch_events
        self.batch_bytes = batch_bytes
        self.batches: deque[Batch] = deque()  # the last one is open for new events
        self.spare: list[Batch] = []
        self.events = 0
        self.nbytes = 0

    def add(self, data: bytes) -> int:
        """Append one encoded event; returns how many of the oldest were dropped to fit it."""
        last = self.batches[-1] if self.batches else None
        if last is None or len(last.ends) >= self.batch_events or last.size >= self.batch_bytes:
            last = self.spare.pop() if self.spare else Batch()
            self.batches.append(last)
        last.add(data)
        self.events += 1
        self.nbytes += len(data)
        dropped = 0
        while self.events > self.max_events or (self.nbytes > self.max_bytes and self.events > 1):
            oldest = self.batches[0]
            self.nbytes -= oldest.drop_oldest()
            self.events -= 1
            dropped += 1
            if not oldest:
                self.release(self.batches.popleft())
        return dropped

    def full(self) -> bool:
        """True when a whole batch is waiting (the sender should not wait for the interval)."""
        return len(self.batches) > 1 or (
            bool(self.batches)
            and (
                len(self.batches[0].ends) >= self.batch_events
                or self.batches[0].size >= self.batch_bytes
            )
        )

    def take(self) -> Batch | None:
        """The oldest batch with events, now owned by the caller (give it back with release)."""
        while self.batches:
            batch = self.batches.popleft()
            if batch:
                self.events -= len(batch)
                self.nbytes -= batch.nbytes
                return batch
            self.release(batch)
        return None

    def release(self, batch: Batch) -> None:
        """Keep an emptied batch's buffer for reuse (its memory stays mapped: no page faults).

        In steady state three buffers take turns: one filling, one being sent, one spare.
        """
        batch.reset()
        if len(self.spare) < SPARE_BUFFERS:
            self.spare.append(batch)

    def clear(self) -> int:
        """Drop everything waiting; returns how many events that was."""
        dropped = self.events
        while self.batches:
            self.release(self.batches.popleft())
        self.events = self.nbytes = 0
        return dropped
