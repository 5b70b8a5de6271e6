"""The batch KV store under any schedule of rows joining, decoding and leaving (no model needed).

Every written key/value carries its row and position, so after each operation each row's valid
columns must read its own ids in order, whatever the store moved, grew or reused. The operations
are the ones :class:`~agent_gym.inference.BatchEngine` makes: a group of rows joins (cached ids
copied in, new ids written right-aligned with padding), a decode step writes one column for every
row, a row leaves (the last slot moves into its place), and a "full" operation decodes until the
columns are used up (the moment a join must make room: the store used to shift its rows left so
far that a long joining row got a negative first column and the copy failed with ``The expanded
size of the tensor (0) must match the existing size ...``).
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_gym.inference import Penalties, Row, SlotStore
from agent_gym.policy import SamplingParams

PAD = -7.0  # what padding columns hold; never read through ``valid``


def _value(tag: int, position: int) -> float:
    return float(tag * 10_000 + position + 1)


class Driver:
    """Applies the engine's operations to a store and checks every row's columns after each."""

    def __init__(self, store: SlotStore) -> None:
        self.store = store
        self.length: dict[int, int] = {}  # tag -> ids in the store
        self.tags = 0
        self.penalties = Penalties(SamplingParams(), 4, (), ())

    def _row(self, start: int, new: int) -> Row:
        row = Row([0] * (start + new), 1, None, self.penalties)
        row.tag = self.tags
        self.tags += 1
        if start:
            past = torch.tensor([_value(row.tag, p) for p in range(start)]).view(1, 1, start, 1)
            row.start, row.past = start, [(past, past.clone())]
        return row

    def join(self, group: list[tuple[int, int]]) -> None:
        store = self.store
        rows = [self._row(start, new) for start, new in group]
        width = max(new for _, new in group)
        store.reserve(width + max(start for start, _ in group), len(rows))
        first = len(store.rows)
        written = torch.full((len(rows), 1, width, 1), PAD)
        for i, (row, (start, new)) in enumerate(zip(rows, group, strict=True)):
            store.place(row, new, width)
            written[i, 0, width - new :, 0] = torch.tensor([_value(row.tag, start + p) for p in range(new)])
            self.length[row.tag] = start + new
        store.window(first, first + len(rows), min(row.col0 for row in rows), store.end - width)
        store.write(0, written, written.clone())

    def step(self) -> None:
        store = self.store
        rows = store.rows
        if not rows:
            return
        store.reserve(0, 0)
        end = store.end
        store.valid[: len(rows), end] = True
        store.window(0, len(rows), min(row.col0 for row in rows), end)
        column = torch.tensor([_value(row.tag, self.length[row.tag]) for row in rows]).view(len(rows), 1, 1, 1)
        store.write(0, column, column.clone())
        store.end = end + 1
        for row in rows:
            self.length[row.tag] += 1

    def fill(self) -> None:
        """Decode until the next decode step or join must make room (``end == cap``)."""
        while self.store.rows and self.store.end < self.store.cap:
            self.step()

    def leave(self, index: int) -> None:
        if self.store.rows:
            slot = index % len(self.store.rows)
            tag = self.store.rows[slot].tag
            count, kv = self.store.extract(slot)
            assert count == self.length[tag]
            assert kv[0][0][0, 0, :, 0].tolist() == [_value(tag, p) for p in range(count)]
            self.store.remove(slot)
            del self.length[tag]

    def check(self) -> None:
        store = self.store
        for slot, row in enumerate(store.rows):
            assert 0 <= row.col0 and store.end <= store.cap
            columns = torch.nonzero(store.valid[slot], as_tuple=True)[0]
            assert columns.numel() == self.length[row.tag]
            assert int(columns[0]) >= row.col0 and int(columns[-1]) < store.end
            for buffers in (store.keys, store.values):
                got = buffers[0][slot, 0, columns, 0].tolist()
                assert got == [_value(row.tag, p) for p in range(self.length[row.tag])]


joins = st.lists(st.tuples(st.integers(0, 600), st.integers(1, 90)), min_size=1, max_size=4).map(lambda g: ("join", g))
operations = st.lists(
    st.one_of(joins, st.tuples(st.just("steps"), st.integers(1, 40)), st.tuples(st.just("leave"), st.integers(0, 9)),
              st.just(("full", 0))),
    min_size=1,
    max_size=25,
)
margins = st.sampled_from([(64, 256, 0.5), (0, 1, 0.0), (3, 5, 0.0), (8, 2, 0.25)])


def _run(store: SlotStore, ops: list) -> None:
    driver = Driver(store)
    for op, arg in ops:
        if op == "join":
            driver.join(arg)
        elif op == "steps":
            for _ in range(arg):
                driver.step()
        elif op == "leave":
            driver.leave(arg)
        else:
            driver.fill()
        driver.check()


@settings(max_examples=150, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(ops=operations, margin=margins)
def test_rows_keep_their_keys_and_values_under_any_schedule(ops, margin):
    left_room, grow, fraction = margin
    _run(SlotStore(torch.device("cpu"), 1, left_room=left_room, grow=grow, grow_fraction=fraction), ops)


def test_a_long_row_joining_a_full_store_whose_rows_start_late_fits():
    """The schedule of the failed rollout: the store is full and its rows start far right when a
    turn with a long cached prompt (398 ids) joins."""
    ops = [("join", [(150, 20)]), ("steps", 3), ("join", [(0, 5)]), ("leave", 0), ("full", 0),
           ("join", [(398, 12)])]
    _run(SlotStore(torch.device("cpu"), 1), ops)


def test_margins_are_checked():
    with pytest.raises(ValueError, match="grow"):
        SlotStore(torch.device("cpu"), 1, grow=0)
