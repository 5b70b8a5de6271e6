"""RAGExplain-v0: shipped free-text tasks, rubric grading with the in-process embedded judge, judge failures."""

from __future__ import annotations

import shutil

import gymnasium as gym
import pytest

import agent_gym  # noqa: F401 - registers the env ids
from agent_gym.envs.rag.explain import explain_tasks, fact_recall
from agent_gym.integrations.contract import training_segments
from agent_gym.judges.check import MASTER_KEYS
from agent_gym.judges.probability import ProbabilityJudge
from agent_gym.models.tiny import default_model_path
from agent_gym.rollout import collect
from agent_gym.types import EpisodeStatus

ENV_ID = "agent_gym/RAGExplain-v0"


class _Answering:
    """Answers each question at once with the text ``answer_of(task)`` gives."""

    def __init__(self, tasks, answer_of):
        self.answers = {t["question"]: answer_of(t) for t in tasks}

    def act(self, messages, *, session_id, tools=None):
        question = next(m["content"] for m in messages if m["role"] == "user")
        return f"<answer>{self.answers[question]}</answer>"

    def close_session(self, session_id):
        """Nothing kept."""


def _partial(task):
    """The reference cut after its first sentence or clause: some facts, not all."""
    return task["ground_truth"].split(",")[0].split(". ")[0]


def test_shipped_tasks_have_free_text_references_facts_and_disjoint_splits():
    everything, train, test = explain_tasks(), explain_tasks("train"), explain_tasks("test")
    assert (len(everything), len(train), len(test)) == (240, 192, 48)
    assert not {t["id"] for t in train} & {t["id"] for t in test}
    assert {t["type"] for t in test} == {"city", "organisation", "person", "event"}
    for task in everything:
        assert len(task["ground_truth"].split()) >= 8 and len(task["facts"]) >= 2
        assert fact_recall(task["ground_truth"], task["facts"]) == 1.0
        assert fact_recall(task["question"], task["facts"]) == 0.0  # echoing the question states nothing
    env = gym.make(ENV_ID, split="test")
    assert [t["id"] for t in env.unwrapped.tasks] == [t["id"] for t in test]
    env.close()
    with pytest.raises(ValueError, match="split"):
        gym.make(ENV_ID, split="dev")
    with pytest.raises(ValueError, match="facts"):
        gym.make(ENV_ID, tasks=[{"id": "x", "question": "q?", "ground_truth": "an answer"}])


def test_fact_recall_matches_whole_normalised_words():
    facts = [["Dryrk River", "Dryrk"], ["1834"]]
    assert fact_recall("It lies on the dryrk river.", facts) == 0.5
    assert fact_recall("Founded in 18345 on the Dryrkx.", facts) == 0.0
    assert fact_recall("Dryrk, 1834", facts) == 1.0


def test_collected_episodes_carry_the_rubric_in_info_and_trajectory():
    tasks = [dict(t) for t in explain_tasks("test")[:3]]
    answers = {tasks[0]["id"]: tasks[0]["ground_truth"], tasks[1]["id"]: _partial(tasks[1]), tasks[2]["id"]: "42"}
    policy = _Answering(tasks, lambda t: answers[t["id"]])
    episodes = collect(lambda: gym.make(ENV_ID), policy, tasks=tasks, progress=False)
    assert [e.status for e in episodes] == ["ENV_DONE"] * 3
    rubrics = [e.steps[-1].info["rubric"] for e in episodes]
    assert all(set(r["scores"]) == {"facts", "judge", "sources"} and r["failure"] is None for r in rubrics)
    assert rubrics[0]["scores"]["facts"] == 1.0 and rubrics[0]["scores"]["judge"] == 1.0  # the reference itself
    assert episodes[0].metrics["res_reward"] == pytest.approx(1.0)
    partial = rubrics[1]["scores"]["facts"]
    assert 0.0 < partial < 1.0 and 0.0 < episodes[1].metrics["res_reward"] < 1.0
    assert episodes[1].metrics["res_reward"] == pytest.approx(rubrics[1]["outcome"])
    assert rubrics[2]["scores"]["facts"] == 0.0 and episodes[2].metrics["res_reward"] == 0.0  # required: no facts
    assert rubrics[0]["judge"]["calls"] + rubrics[0]["judge"]["cache_hits"] >= 1
    assert all(0.0 <= r["scores"]["judge"] <= 1.0 for r in rubrics)
    assert all(not s.masked for s in training_segments(episodes[2]))  # a wrong answer is trained on (reward 0)


def test_oracle_solves_and_the_sources_shaping_stays_within_the_budget():
    env = gym.make(ENV_ID)
    env.reset(seed=3)
    total_shaping, done, info = 0.0, False, {}
    while not done:
        _, reward, terminated, truncated, info = env.step(env.unwrapped.oracle_action())
        total_shaping += info["toolcall_reward"]
        done = terminated or truncated
    assert info["status"] == EpisodeStatus.ENV_DONE and info["res_reward"] == pytest.approx(1.0)
    assert info["rubric"]["scores"]["sources"] == 1.0 and info["rubric"]["shaping"] == pytest.approx(0.1)
    assert total_shaping <= env.unwrapped.rewards.bonus_cap + 1e-9
    env.close()


def test_master_key_answers_earn_nothing():
    env = gym.make(ENV_ID, split="test")
    for seed, key in enumerate(MASTER_KEYS):
        _, info = env.reset(seed=seed)
        answer = key.format(question=info["task"]["question"])
        _, _, terminated, _, info = env.step(f"<answer>{answer}</answer>")
        assert terminated and info["status"] == EpisodeStatus.ENV_DONE, key
        assert info["rubric"]["scores"]["facts"] == 0.0 and "judge" in info["rubric"]["scores"], key
        assert info["res_reward"] == 0.0 and info["rubric"]["outcome"] == 0.0, key
    env.close()


def test_a_judge_model_that_does_not_load_ends_the_episode_judge_error(tmp_path):
    broken = tmp_path / "broken-judge"
    shutil.copytree(default_model_path(), broken)
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    tasks = [dict(t) for t in explain_tasks("test")[:2]]
    policy = _Answering(tasks, lambda t: t["ground_truth"])
    episodes = collect(lambda: gym.make(ENV_ID, judge=ProbabilityJudge(broken)), policy, tasks=tasks,
                       progress=False)
    assert [e.status for e in episodes] == ["JUDGE_ERROR", "JUDGE_ERROR"]
    last = episodes[0].steps[-1].info
    assert last["end_reason"] == "judge_error" and "down" in last["error"] and last["res_reward"] == 0.0
    assert last["rubric"]["failure"]["kind"] == "down" and last["rubric"]["outcome"] is None
    assert all(s.masked for e in episodes for s in training_segments(e))


def test_a_judge_that_cannot_fit_the_task_ends_judge_error_and_a_long_answer_does_not():
    fact = "Zorvik"
    task = {"id": "long", "question": "Describe Zorvik at length.", "ground_truth": f"{fact} " + "word " * 4000,
            "facts": [[fact], ["Quellan"]]}
    env = gym.make(ENV_ID, tasks=[task])
    env.reset(seed=0)
    _, _, terminated, truncated, info = env.step(f"<answer>{fact} and Quellan</answer>")
    assert truncated and not terminated and info["status"] == EpisodeStatus.JUDGE_ERROR
    assert info["rubric"]["failure"]["kind"] == "prompt_too_long" and info["res_reward"] == 0.0
    env.close()
    env = gym.make(ENV_ID, split="test")
    _, info = env.reset(seed=0)
    flood = info["task"]["ground_truth"] + " " + "\u4e2d\u6587" * 3000  # many tokens per character
    _, _, terminated, _, info = env.step(f"<answer>{flood}</answer>")
    assert terminated and info["status"] == EpisodeStatus.ENV_DONE and info["rubric"]["failure"] is None
    env.close()


def test_a_server_judge_is_selectable_and_its_failure_is_judge_error():
    env = gym.make(ENV_ID, judge="127.0.0.1:9", split="test")  # nothing listens on the discard port
    _, info = env.reset(seed=0)
    _, _, _, truncated, info = env.step(f"<answer>{info['task']['ground_truth']}</answer>")
    assert truncated and info["status"] == EpisodeStatus.JUDGE_ERROR and info["rubric"]["failure"]["kind"] == "down"
    env.close()
    with pytest.raises(TypeError, match="judge"):
        gym.make(ENV_ID, judge=3)
