"""BatchEngine under schedules of rows joining, leaving and finishing, with the embedded tiny model.

Rows are sibling samples and follow-up turns of prompts that share long heads (cached chunks, and
decode steps of six or more rows that read a shared head once), joining at given decode steps, at
the moment the batch store's columns are used up, or after another row finished; ``max_batch``
holds some of them back. Whatever the schedule, every row samples its whole budget and the
logprob it recorded for each id (raw: the model's log-softmax) is what one plain forward pass over
its prompt and ids gives: the keys/values each row attended to were its own. (Comparing ids with
a second sampling run would flag draws that land within float rounding of a boundary of the
cumulative distribution.) The store is made with small margins so that it fills, shifts its rows
and grows every few steps.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent_gym.inference import BatchEngine, Row, SlotStore
from agent_gym.models import default_model_path
from agent_gym.policy import SamplingParams

SAMPLING = SamplingParams(temperature=1.0, top_k=-1)
HEADS = (list(range(10, 160)), list(range(300, 430)))  # three and two 64-id chunks


@pytest.fixture(scope="module")
def model():
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(default_model_path())).eval()


@dataclass
class Spec:
    """One row of a schedule: what it decodes and when it joins."""

    head: int | None  # index into HEADS (None: no shared head)
    tail: int  # ids after the head
    budget: int
    # ("now", 0) | ("step", k): at the k-th admission | ("full", 0): when the store's columns are used up |
    # ("after", j): a sibling (same prompt) or next turn of row j, once row j finished |
    # ("full after", j): a sibling of row j joining the first time the store is full after row j finished
    when: tuple[str, int]
    next_turn: bool = False  # with ("after", j): continue row j's session instead of sampling its prompt again


def _engine(model, max_batch: int) -> BatchEngine:
    return BatchEngine(model, pad_id=0, vocab=model.config.vocab_size, max_batch=max_batch)


class Schedule:
    """Makes the rows of ``specs`` when their moment comes (through the engine's ``admit``)."""

    def __init__(self, engine: BatchEngine, specs: list[Spec]) -> None:
        self.engine, self.specs = engine, specs
        self.rows: list[Row | None] = [None] * len(specs)
        self.done: set[int] = set()
        self.ready: list[Row] = []
        self.calls = 0

    def _prompt(self, index: int) -> list[int]:
        spec = self.specs[index]
        kind, other = spec.when
        tail = [600 + 7 * index + k for k in range(spec.tail)]
        if kind in ("after", "full after"):
            first = self.rows[other]
            assert first is not None
            return first.prompt + first.out + tail if spec.next_turn else list(first.prompt)
        return (HEADS[spec.head] if spec.head is not None else []) + tail

    def _make(self, index: int) -> Row:
        spec = self.specs[index]
        kind, other = spec.when
        first = self.rows[other] if kind == "after" and spec.next_turn else None
        session = first.session if first is not None else f"s{index}"
        row = self.engine.new_row(self._prompt(index), spec.budget, 1000 + index, SAMPLING, (), session=session)
        row.tag = index
        self.rows[index] = row
        return row

    def _due(self, index: int, idle: bool) -> bool:
        kind, arg = self.specs[index].when
        store = self.engine.store
        full = store is not None and bool(store.rows) and store.end == store.cap
        if kind == "after":
            return arg in self.done
        if kind == "full after":
            return arg in self.done and (idle or full)
        if idle or kind == "now":
            return True
        if kind == "step":
            return self.calls >= arg
        return full

    def _fire(self, idle: bool) -> None:
        for index in range(len(self.specs)):
            if self.rows[index] is None and self._due(index, idle):
                self.ready.append(self._make(index))

    def admit(self, room: int) -> list[Row]:
        self.calls += 1
        self._fire(False)
        if not self.ready and not self.engine.store.rows:  # nothing would decode: the rest join now
            self._fire(True)
        out, self.ready = self.ready[:room], self.ready[room:]
        return out

    def finished(self, row: Row) -> None:
        self.done.add(row.tag)


@st.composite
def schedules(draw) -> tuple[list[Spec], int, tuple[int, int]]:
    """Three waves: long prompts sampling few ids, then shorter rows sampling more, then late rows
    (siblings of the long rows joining as those leave, next turns, rows joining a full store)."""
    specs: list[Spec] = []
    longs = draw(st.integers(1, 2))
    for _ in range(longs):
        specs.append(Spec(head=0, tail=draw(st.integers(1, 20)), budget=draw(st.integers(1, 4)), when=("now", 0)))
    for _ in range(draw(st.integers(3, 5))):
        specs.append(Spec(head=draw(st.sampled_from([1, None, None])), tail=draw(st.integers(1, 20)),
                          budget=draw(st.integers(5, 12)), when=("step", draw(st.integers(1, 3)))))
    for _ in range(draw(st.integers(2, 3))):
        kind = draw(st.sampled_from(["sibling", "sibling", "next turn", "full"]))
        if kind == "sibling":
            when, turn = ("full after", draw(st.integers(0, longs - 1))), False
        elif kind == "next turn":
            when, turn = ("after", draw(st.integers(0, len(specs) - 1))), True
        else:
            when, turn = ("full", 0), False
        specs.append(Spec(head=draw(st.sampled_from([0, 1, None])), tail=draw(st.integers(1, 20)),
                          budget=draw(st.integers(1, 8)), when=when, next_turn=turn))
    max_batch = draw(st.integers(3, 8))
    # small margins: the store fills every few steps, shifts its rows left and grows
    margins = draw(st.sampled_from([(0, 2), (0, 2), (2, 3), (8, 1)]))
    return specs, max_batch, margins


def _rescore(model, rows: list[Row]) -> None:
    """Each row's recorded logprobs are a plain forward pass's over its prompt and sampled ids."""
    for row in rows:
        assert len(row.out) == row.budget, f"row {row.tag}"
        ids = row.prompt + row.out
        with torch.inference_mode():
            logits = model(torch.tensor([ids[:-1]])).logits[0, len(row.prompt) - 1 :].float()
        expected = torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(row.out)[:, None])[:, 0]
        error = (expected - torch.tensor(row.logps)).abs().max().item()
        assert error < 1e-3, f"row {row.tag}: logprobs off by {error}"


def _run(model, specs: list[Spec], max_batch: int, store: SlotStore) -> Schedule:
    engine = _engine(model, max_batch)
    engine.store = store
    schedule = Schedule(engine, specs)
    engine.run([], schedule.admit, schedule.finished)
    assert schedule.done == set(range(len(specs)))
    assert engine.stats["max_rows"] <= max_batch
    _rescore(model, [row for row in schedule.rows if row is not None])
    return schedule


@settings(max_examples=6, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.function_scoped_fixture])
@given(schedule=schedules())
def test_rows_sample_what_one_plain_batch_samples_under_any_schedule(model, schedule):
    specs, max_batch, (left_room, grow) = schedule
    store = SlotStore(torch.device("cpu"), model.config.num_hidden_layers, left_room=left_room, grow=grow,
                      grow_fraction=0.0)
    _run(model, specs, max_batch, store)


class RecordingStore(SlotStore):
    """A store that records, for every join, whether its columns were used up and how far its rows could shift."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.full_joins: list[tuple[int, int, int]] = []  # (columns the join needs, end, end after the longest shift)

    def reserve(self, left: int, rows: int) -> None:
        if rows and self.rows and self.end == self.cap:
            lo = min(row.col0 for row in self.rows)
            self.full_joins.append((left, self.end, self.end - (lo - self.left_room)))
        super().reserve(left, rows)


def test_a_long_row_joining_a_full_store_whose_rows_start_late(model):
    """The failed rollout's moment: the store's columns are used up and its rows start far right
    when a row with many cached ids joins: shifting the rows left as far as they go would leave
    too few columns before ``end`` for it. Six rows share a prompt head (shared-head decode steps)
    and a session's next turn joins later."""
    specs = [
        Spec(head=0, tail=60, budget=3, when=("now", 0)),  # a long prompt that leaves early
        *[Spec(head=1, tail=5, budget=14, when=("step", 2)) for _ in range(6)],
        Spec(head=0, tail=20, budget=6, when=("full", 0)),  # 150 + 20 ids, 128 of them cached
        Spec(head=None, tail=9, budget=5, when=("after", 1), next_turn=True),
    ]
    store = RecordingStore(torch.device("cpu"), model.config.num_hidden_layers, left_room=2, grow=3,
                           grow_fraction=0.0)
    schedule = _run(model, specs, 8, store)
    assert any(shifted < left <= end for left, end, shifted in store.full_joins), store.full_joins
    last, first = schedule.rows[8], schedule.rows[1]
    assert last.start == len(first.prompt) + len(first.out) - 1  # the next turn continued the session's cache
    stats = schedule.engine.stats
    assert stats["max_rows"] == 7 and stats["shared_head_steps"] > 0  # six rows read their shared head once
