"""The sequence batcher's slot bookkeeping: the heap of free slots, the backlog of sequences waiting
for one, and each instance's slots (their queues, occupants and states).

Free slots sit in a binary heap ordered by slot number only, exactly as libstdc++'s
std::priority_queue keeps them, so ties between instances break the way they do in Triton (2
instances x 4 slots hand out (0,0), (1,0), (1,1), (0,1), (0,2) ... -- checked against Triton 2.51).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from server.scheduling.work import WorkItem

if TYPE_CHECKING:
    from server.scheduling.dynamic_batcher import DynamicBatcher
    from server.scheduling.sequence_controls import CorrelationId
    from server.scheduling.sequence_state import StateStore

SlotRef = tuple[int, int]  # (instance index, slot)


def _heap_sift_up(heap: list[SlotRef], hole: int, top: int, value: SlotRef) -> None:
    """libstdc++ __push_heap with Triton's comparator (a lower slot number is the higher priority)."""
    parent = (hole - 1) // 2
    while hole > top and heap[parent][1] > value[1]:
        heap[hole] = heap[parent]
        hole = parent
        parent = (hole - 1) // 2
    heap[hole] = value


def heap_push(heap: list[SlotRef], value: SlotRef) -> None:
    heap.append(value)
    _heap_sift_up(heap, len(heap) - 1, 0, value)


def heap_pop(heap: list[SlotRef]) -> SlotRef:
    """std::priority_queue::pop as libstdc++ does it (pop_heap + __adjust_heap), so that slots with
    equal numbers come out in the order Triton hands them out."""
    top = heap[0]
    value = heap[-1]
    length = len(heap) - 1
    hole = child = 0
    while child < (length - 1) // 2:
        child = 2 * (child + 1)
        if heap[child][1] > heap[child - 1][1]:  # comp(right, left): right has the higher slot number
            child -= 1
        heap[hole] = heap[child]
        hole = child
    if length % 2 == 0 and length >= 2 and child == (length - 2) // 2:
        child = 2 * (child + 1)
        heap[hole] = heap[child - 1]
        hole = child - 1
    heap.pop()
    if length:
        _heap_sift_up(heap, hole, 0, value)
    return top


# A queued entry: the request and its batch key; (None, None) is the reaper's release marker.
Entry = tuple[WorkItem | None, Hashable]
RELEASE: Entry = (None, None)


@dataclass(eq=False)
class Backlog:
    correlation_id: CorrelationId
    entries: deque[Entry] = field(default_factory=deque)


class Instance:
    """One instance's slots: their queues, the sequence in each, and the per-slot state."""

    def __init__(self, slots: int, lock: threading.Lock) -> None:
        self.queues: list[deque[Entry]] = [deque() for _ in range(slots)]
        self.occupant: list[CorrelationId | None] = [None] * slots
        self.states: list[StateStore | None] = [None] * slots
        self.in_flight = [False] * slots  # oldest: a request of the slot is in the dynamic batcher
        self.max_active = -1  # direct: the highest slot that may hold requests
        self.ready = threading.Condition(lock)  # direct: this instance's worker waits here
        self.batcher: DynamicBatcher | None = None  # oldest
        self.done = False  # its worker was told there is nothing more
