"""Every field of ``StepTrajectory`` survives each path a trajectory takes.

The checks walk ``dataclasses.fields(StepTrajectory)``: the segment split, the JSONL
and Parquet round trips, the slime export and a gateway session are checked field by
field, so a field added to the record later is checked without editing this file (the
sample record gives fields of plain types a non-default value by their annotation).
The one ``StepTrajectory(...)`` call of the package is the builder's.
"""

from __future__ import annotations

import ast
import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from agent_gym import export
from agent_gym.export import TrajectoryWriter, read_jsonl, read_parquet, to_slime_samples, write_jsonl, write_parquet
from agent_gym.gateway.app import create_gateway_app
from agent_gym.gateway.store import SessionStore
from agent_gym.rollout.planning import EpisodeSpec
from agent_gym.rollout.reporting import failed_trajectory
from agent_gym.segments import split_segments
from agent_gym.types import EpisodeStatus, PolicyOutput, Segment, Step, StepTrajectory
from agent_gym.wrappers.trajectory_builder import TrajectoryBuilder

FIELDS = [f.name for f in dataclasses.fields(StepTrajectory)]


@dataclasses.dataclass(eq=False)
class LaterRecord(StepTrajectory):
    """``StepTrajectory`` with fields added later: the export, split and slime paths carry them unchanged."""

    review_scores: list[int] = dataclasses.field(default_factory=list)
    reviewer: str = ""

# Fields the segment split narrows to the segment; every other field is the episode's.
NARROWED = {"prompt_tokens", "response_tokens", "response_masks", "response_logprobs", "steps", "segments"}

SEGMENTS = [
    Segment([1, 2, 3], [4, 5, 6], [1, 0, 1], [-0.5, 0.0, -0.25], first_step=0, last_step=0,
            weight_versions=[3, -1, 4]),
    Segment([9, 8], [7, 6, 5, 4], [1, 1, 0, 1], [-1.0, -0.125, 0.0, -2.0], first_step=1, last_step=2,
            weight_versions=[4, 5, -1, 5], role="investigator", parent_segment=0, spawn_step=1, role_reward=0.5,
            agent_index=1),
]


def _step(i: int) -> Step:
    return Step(
        chat_completions=[{"role": "user", "content": f"turn {i}"}],
        thought=f"thought {i}",
        action=f'{{"name": "f{i}"}}',
        observation=f"observation {i}",
        model_response=f"response {i}",
        info={"tool_calls": [{"name": f"f{i}"}], "res_reward": 0.5},
        reward=0.5,
        done=i == 2,
        mc_return=1.5 - 0.5 * i,
    )


# Fields whose values need structure; the others get a value from their annotation.
STRUCTURED: dict[str, Any] = {
    "prompt_tokens": SEGMENTS[0].prompt_tokens,
    "response_tokens": SEGMENTS[0].response_tokens,
    "response_masks": SEGMENTS[0].response_masks,
    "response_logprobs": SEGMENTS[0].response_logprobs,
    "chat_completions": [{"role": "system", "content": "sys"}, {"role": "user", "content": "héllo \"q\""}],
    "metrics": {"steps": 3, "toolcall_reward": 0.25, "res_reward": 1.5, "reward_time": 0.125, "env_time": 0.5,
                "llm_time": 0.75, "total_time": 2.0},
    "status": EpisodeStatus.TRUNCATION.value,
    "task": {"id": "t-7", "question": "q?", "ground_truth": ["a", 1]},
    "steps": [_step(i) for i in range(3)],
    "segments": SEGMENTS,
}


def _value_for(field: dataclasses.Field) -> Any:
    """A non-default value for a field of a plain type (its annotation is a string here)."""
    kind = str(field.type).split("[")[0].split("|")[0].strip()
    values = {"str": f"{field.name}-value", "int": 7, "float": 1.75, "bool": True, "dict": {"key": field.name},
              "list": [3, 4]}
    if kind not in values:
        pytest.fail(f"StepTrajectory.{field.name} ({field.type}): give it a value in STRUCTURED")
    return values[kind]


def full_trajectory(record_type: type[StepTrajectory] = StepTrajectory) -> StepTrajectory:
    """A two-segment episode in which every field has a non-default value."""
    values = {}
    for field in dataclasses.fields(record_type):
        values[field.name] = copy.deepcopy(STRUCTURED[field.name]) if field.name in STRUCTURED else _value_for(field)
    return record_type(**values)


def _names(record: StepTrajectory) -> list[str]:
    return [f.name for f in dataclasses.fields(record)]


def assert_every_field_set(trajectory: StepTrajectory) -> None:
    """Every field differs from the value a minimal record has."""
    minimal = type(trajectory)(prompt_tokens=[], response_tokens=[], response_masks=[], steps=[Step()])
    data, default = trajectory.to_dict(), minimal.to_dict()
    unset = [name for name in _names(trajectory) if data[name] == default[name]]
    assert not unset, f"fields left at their default: {unset}"


def assert_same_fields(got: StepTrajectory, expected: StepTrajectory, names: Any = None) -> None:
    """The named fields (default: all) are equal in JSON form (one assertion per field, naming it)."""
    got_data, expected_data = got.to_dict(), expected.to_dict()
    for name in _names(expected) if names is None else names:
        assert got_data[name] == expected_data[name], f"field {name!r} changed"


@pytest.fixture(params=[StepTrajectory, LaterRecord], ids=["StepTrajectory", "later-fields"])
def record_type(request, monkeypatch) -> type[StepTrajectory]:
    """The record class; ``LaterRecord`` stands in for ``StepTrajectory`` as if it had gained fields."""
    if request.param is LaterRecord:
        monkeypatch.setattr(export, "StepTrajectory", LaterRecord)
    return request.param


@pytest.mark.parametrize("kind", [StepTrajectory, LaterRecord], ids=["StepTrajectory", "later-fields"])
def test_the_sample_record_sets_every_field(kind):
    assert_every_field_set(full_trajectory(kind))
    assert FIELDS == _names(full_trajectory())


def test_every_field_survives_the_segment_split(record_type):
    episode = full_trajectory(record_type)
    records = split_segments([episode])
    assert len(records) == len(SEGMENTS)
    for record, segment in zip(records, SEGMENTS, strict=True):
        assert type(record) is record_type
        assert_same_fields(record, episode, [name for name in _names(episode) if name not in NARROWED])
        assert record.segments == [segment]
        assert record.prompt_tokens.tolist() == segment.prompt_tokens.tolist()
        assert record.response_tokens.tolist() == segment.response_tokens.tolist()
        assert record.response_masks.tolist() == segment.response_masks.tolist()
        assert record.response_logprobs.tolist() == segment.response_logprobs.tolist()
        assert record.steps == episode.steps[segment.first_step : segment.last_step + 1]
    records[0].metrics["steps"] = 99  # siblings do not share mutable values
    records[0].chat_completions.append({"role": "user", "content": "later"})
    assert records[1].metrics == episode.metrics and records[1].chat_completions == episode.chat_completions


def test_a_one_segment_episode_is_its_own_record():
    episode = full_trajectory()
    single = dataclasses.replace(episode, segments=SEGMENTS[:1])
    assert split_segments([single])[0] is single


@pytest.mark.parametrize("write, read", [(write_jsonl, read_jsonl), (write_parquet, read_parquet)],
                         ids=["jsonl", "parquet"])
def test_every_field_survives_the_file_round_trip(tmp_path, write, read, record_type):
    records = [full_trajectory(record_type), *split_segments([full_trajectory(record_type)])]
    suffix = ".jsonl" if write is write_jsonl else ".parquet"
    back = read(write(records, tmp_path / f"t{suffix}"))
    assert len(back) == len(records)
    for got, expected in zip(back, records, strict=True):
        assert type(got) is record_type
        assert_same_fields(got, expected)
        assert type(got.trajectory_reward) is type(expected.trajectory_reward)


def _sample_fields(sample: dict[str, Any]) -> dict[str, Any]:
    """The record fields a slime sample carries in its own keys, in JSON form; the rest are in its metadata."""
    n = sample["response_length"]
    meta = sample["metadata"]
    segment = Segment(sample["tokens"][:-n], sample["tokens"][-n:], sample["loss_mask"], sample["rollout_log_probs"],
                      first_step=meta["first_step"], last_step=meta["last_step"],
                      weight_versions=meta["token_weight_versions"], role=meta["role"],
                      parent_segment=meta["parent_segment"], spawn_step=meta["spawn_step"],
                      role_reward=meta["role_reward"], agent_index=meta["agent_index"])
    return {
        "prompt_tokens": sample["tokens"][:-n],
        "response_tokens": sample["tokens"][-n:],
        "response_masks": sample["loss_mask"],
        "response_logprobs": sample["rollout_log_probs"],
        "segments": [segment.to_dict()],
        "trajectory_reward": sample["reward"],
        "rollout_id": sample["rollout_id"],
        "status": meta["episode_status"],
    }


def test_every_field_survives_the_slime_export(record_type):
    episode = full_trajectory(record_type)
    samples = to_slime_samples([episode])
    records = split_segments([episode])
    assert len(samples) == len(records)
    for sample, record in zip(samples, records, strict=True):
        json.dumps(sample)  # JSON-ready, metadata included
        carried = _sample_fields(sample)
        expected = record.to_dict()
        for name in _names(record):
            got = carried[name] if name in carried else sample["metadata"].get(name, "<missing>")
            assert got == expected[name], f"field {name!r} lost by the slime export"
    assert [s["metadata"]["segment_index"] for s in samples] == [0, 1]
    # the subagent's lineage, and its own advantage group (task, role)
    assert [(s["metadata"]["role"], s["metadata"]["parent_segment"], s["metadata"]["spawn_step"]) for s in samples] \
        == [("", -1, -1), ("investigator", 0, 1)]
    assert len({s["rollout_id"] for s in samples}) == 1 and samples[0]["group_index"] != samples[1]["group_index"]
    assert samples[0]["label"] == ["a", 1] and samples[0]["status"] == "truncated"
    # slime's own field: one entry per run of ids sampled under one version (a new turn starts a run)
    assert [s["weight_versions"] for s in samples] == [["3", "4"], ["4", "5", "5"]]


class ScriptedPolicy:
    """A token-mode policy answering from a script: two turns of one segment, then a rewritten prompt."""

    mode = "tokens"
    sampling = {"logprobs_mode": "processed_logprobs", "temperature": 0.7, "top_p": 0.9}

    def __init__(self) -> None:
        self.turns = [
            ([1, 2, 3], [4, 5], [-0.5, -0.25], [2, 2]),
            ([1, 2, 3, 4, 5, 6], [7], [-1.0], [3]),
            ([11, 12], [13, 14], [-0.125, -2.0], [3, 4]),  # a turn resumed on new weights
        ]
        self.closed: list[str] = []

    async def aact(self, messages: Any, *, session_id: str, tools: Any = None) -> PolicyOutput:
        prompt, sampled, logprobs, versions = self.turns.pop(0)
        return PolicyOutput(text=f"answer {len(self.turns)}", prompt_token_ids=prompt, token_ids=sampled,
                            logprobs=logprobs, llm_time=0.25, retokenized=len(self.turns) == 0,
                            sampling=dict(self.sampling), weight_versions=versions)

    def close_session(self, session_id: str) -> None:
        self.closed.append(session_id)

    async def aclose(self) -> None:
        """Nothing to release."""


def test_every_field_survives_a_gateway_session(tmp_path):
    policy = ScriptedPolicy()
    writer = TrajectoryWriter(tmp_path / "sessions.jsonl")
    store = SessionStore(writer=writer, gamma=0.5)
    trainer = {"Authorization": "Bearer trainer-token"}
    with TestClient(create_gateway_app(policy, store, model="scripted", trainer_token="trainer-token")) as client:
        created = client.post("/sessions", json={"session_id": "s-1", "task": {"id": "t-1", "ground_truth": "42"},
                                                 "group_id": "g-1", "env_id": "my-agent", "idx": 3}, headers=trainer)
        assert created.status_code == 201, created.text
        key = {"Authorization": f"Bearer {created.json()['api_key']}"}
        messages: list[dict[str, Any]] = [{"role": "system", "content": "sys"}, {"role": "user", "content": "go"}]
        for _ in range(3):
            reply = client.post("/sessions/s-1/v1/chat/completions", json={"model": "m", "messages": messages},
                                headers=key)
            assert reply.status_code == 200, reply.text
            messages += [reply.json()["choices"][0]["message"], {"role": "user", "content": "more"}]
        assert client.post("/sessions/s-1/reward", json={"reward": 1.0}, headers=trainer).status_code == 200
        record = client.get("/sessions/s-1/trajectory", headers=trainer).json()
        served = StepTrajectory.from_dict({k: v for k, v in record.items() if k != "_kind"})
    writer.close()
    finished = store.get("s-1").finished
    assert finished is not None and policy.closed == ["s-1"]
    assert_every_field_set(finished)
    assert finished.sampling == ScriptedPolicy.sampling  # the logprobs mode a trainer needs
    assert (finished.group_id, finished.env_id, finished.idx) == ("g-1", "my-agent", 3)
    assert len(finished.segments) == 2 and finished.retokenized
    assert finished.metrics["res_reward"] == finished.trajectory_reward == 1.0
    assert finished.metrics["llm_time"] == pytest.approx(0.75)
    assert [s.weight_versions.tolist() for s in finished.segments] == [[2, 2, -1, 3], [3, 4]]
    assert (finished.weight_version_start, finished.weight_version_end) == (2, 4)
    for record in (served, *read_jsonl(tmp_path / "sessions.jsonl")):
        assert_same_fields(record, finished)


def test_gateway_labels_are_checked():
    store = SessionStore()
    with pytest.raises(Exception, match="idx: expected an int >= 0"):
        store.create("s", idx=-1)
    with pytest.raises(Exception, match="group_id: expected a string"):
        store.create("s", group_id=3)


def test_a_failed_episode_is_built_by_the_builder():
    spec = EpisodeSpec(index=4, group=1, sample=2, seed=0, task={"id": "t"}, group_id="g")
    trajectory = failed_trajectory(spec, 1.0, "building the env raised OSError")
    assert trajectory.status == EpisodeStatus.ENV_ERROR.value
    assert (trajectory.rollout_id, trajectory.idx, trajectory.group_id) == ("g-2", 4, "g")
    assert trajectory.task == {"id": "t"} and trajectory.metrics["steps"] == len(trajectory.steps) == 1
    assert trajectory.steps[-1].done and trajectory.steps[-1].info["error"] == "building the env raised OSError"


def test_the_builder_records_sampling_ids_and_an_open_episode():
    builder = TrajectoryBuilder("ep", gamma=0.5, env_id="e", task={"id": 1}, group_id="g", idx=2)
    open_record = builder.build("", conversation=[])
    assert open_record.status == "" and len(open_record.steps) == 1 and not builder.steps
    builder.add_output(0, PolicyOutput(text="a", sampling={"logprobs_mode": "raw_logprobs"}, llm_time=0.5))
    info = builder.add_output(0, PolicyOutput(text="a", prompt_token_ids=[1], token_ids=[2], logprobs=[-0.5],
                                              sampling={"logprobs_mode": "other"}))
    assert info["new_segment"] is False and info["num_sampled_tokens"] == 1
    builder.steps.append(Step(reward=1.0))
    builder.end("boom")
    trajectory = builder.build(EpisodeStatus.TIMEOUT, conversation=[{"role": "user", "content": "q"}], detach=True)
    assert trajectory.sampling == {"logprobs_mode": "raw_logprobs"}  # the first turn's record
    assert trajectory.steps[0].info["error"] == "boom" and trajectory.steps[0].done
    builder.steps[0].reward = 5.0
    assert trajectory.steps[0].reward == 1.0  # detached from the builder
    assert trajectory.metrics["llm_time"] == 0.5 and trajectory.status == "TIMEOUT"


def test_only_the_builder_constructs_step_trajectories():
    package = Path(__file__).resolve().parents[2] / "agent_gym"
    callers = []
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == (
                "StepTrajectory"
            ):
                callers.append(path.relative_to(package).as_posix())
    assert callers == ["wrappers/trajectory_builder.py"]
