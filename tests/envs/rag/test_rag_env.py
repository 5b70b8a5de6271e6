import json
import pickle
import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import agent_gym  # noqa: F401
from agent_gym.envs.rag import RAGEnv, builtin_tasks


def call(name, **arguments):
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


@pytest.fixture(scope="module")
def env():
    return gym.make("agent_gym/RAG-v0").unwrapped


def play_oracle(env, task):
    env.reset(seed=0, options={"task": task})
    while True:
        obs, reward, terminated, truncated, info = env.step(env.oracle_action())
        if terminated or truncated:
            return obs, reward, terminated, info


def test_check_env_with_warnings_as_errors():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        made = gym.make("agent_gym/RAG-v0")
        check_env(made.unwrapped)
        made.close()


def test_oracle_answers_every_shipped_question(env):
    for task in builtin_tasks():
        _, _, terminated, info = play_oracle(env, task)
        assert terminated and info["res_reward"] == 1.0 and info["em"] == 1.0 and info["f1"] == 1.0, task["id"]
        assert info["gold_retrieved"] is True, task["id"]  # the reference searches find every gold document


def test_random_text_and_copied_question_score_zero(env):
    for task in builtin_tasks()[:80]:
        for text in (task["question"], "lorem ipsum dolor", "", "Kelmar"):
            env.reset(seed=0, options={"task": task})
            _, _, terminated, _, info = env.step(f"<answer>{text}</answer>")
            assert terminated and info["res_reward"] == 0.0 and info["em"] == 0.0, (task["id"], text)


def test_aliases_normalisation_and_f1_metric():
    task = next(t for t in builtin_tasks() if t["type"] == "date")
    env = RAGEnv(tasks=[task])
    for alias in task["aliases"]:
        env.reset(seed=0)
        assert env.step(f"<answer>  {alias.upper()}. </answer>")[4]["em"] == 1.0
    f1_env = RAGEnv(tasks=[{"id": 1, "question": "Who?", "ground_truth": "Mira Kade Voss"}], answer_metric="f1")
    f1_env.reset(seed=0)
    _, reward, _, _, info = f1_env.step("<answer>the Mira Voss</answer>")
    assert info["em"] == 0.0 and reward == pytest.approx(0.8) and info["f1"] == pytest.approx(0.8)
    with pytest.raises(ValueError, match="answer_metric"):
        RAGEnv(answer_metric="bleu")


def test_answer_is_read_from_the_final_message_only():
    task = {"id": 1, "question": "Capital?", "ground_truth": "Paris"}
    env = RAGEnv(tasks=[task])  # the default system prompt shows <answer>Paris</answer> as a format example
    obs, _ = env.reset(seed=0)
    assert "<answer>Paris</answer>" in obs[0]["content"]
    _, reward, terminated, _, info = env.step("I am not sure yet.")
    assert not terminated and info["res_reward"] == 0.0 and reward < 0
    _, _, terminated, _, info = env.step("<answer>Lyon</answer>")
    assert terminated and info["res_reward"] == 0.0


def test_episodes_are_deterministic_under_a_seed():
    a, b = gym.make("agent_gym/RAG-v0"), gym.make("agent_gym/RAG-v0")
    for seed in (0, 7):
        assert a.reset(seed=seed) == b.reset(seed=seed)
        while True:
            action = a.unwrapped.oracle_action()
            out_a, out_b = a.step(action), b.step(action)
            assert out_a == out_b
            if out_a[2] or out_a[3]:
                break
    clone = pickle.loads(pickle.dumps(a.unwrapped))
    assert clone.retriever is a.unwrapped.retriever  # one index per process


def test_bad_tool_input_becomes_error_observations(env):
    env.reset(seed=1)
    cases = [
        (call("search", query=""), "non-empty search query"),
        (call("search", query="\x00\x01\x02"), "non-empty search query"),
        (call("search", query="word " * 400), "at most 1000 characters"),
        (call("search", query="Kelmar", k=0), "k: expected an int from 1 to 10"),
        (call("search", query="Kelmar", k=50), "k: expected an int from 1 to 10"),
        (call("search", query="Kelmar", k="many"), "invalid arguments"),
        (call("search"), "invalid arguments"),
        (call("open", doc_id="no-such-doc"), "unknown doc_id"),
        (call("open", doc_id=""), "unknown doc_id"),
        (call("open", doc_id="x" * 10000), "unknown doc_id"),
    ]
    for action, expected in cases:
        env.reset(seed=1)  # a fresh episode per case: the penalties of one episode are capped (penalty_cap)
        obs, reward, terminated, truncated, info = env.step(action)
        assert expected in obs[-1]["content"] and expected in info["error"], (action[:60], obs[-1]["content"])
        assert reward < 0 and not terminated
    env.reset(seed=1)
    obs, reward, *_ = env.step(call("search", query="\x00Gixthoux\udcff\x07 engineer"))
    assert "doc_id: person-" in obs[-1]["content"] and reward > 0


def test_open_cuts_long_documents_with_a_marker():
    long_text = "word " * 2000
    env = RAGEnv(corpus=[{"id": "long", "title": "Long", "text": long_text}],
                 tasks=[{"id": 1, "question": "Q?", "ground_truth": "A", "gold_ids": ["long"]}], max_doc_chars=500)
    env.reset(seed=0)
    obs, _, _, _, info = env.step(call("open", doc_id="long"))
    assert obs[-1]["content"].endswith("[document truncated: 9500 more characters]")
    assert info["gold_retrieved"] is False  # opened, not found by a search
    _, _, _, _, info = env.step(call("search", query="word"))
    assert info["gold_retrieved"] is True and info["retrieved_ids"] == ["long"]


def test_user_corpus_and_question_formats(tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"id": "k", "title": "Kelmar", "text": "Kelmar lies on the Tesk River."}\n'
                      '{"id": "o", "title": "Osk", "text": "Osk lies on the Vel River."}\n')
    r1 = tmp_path / "q.jsonl"
    r1.write_text('{"id": "q1", "question": "Which river does Kelmar lie on?", '
                  '"golden_answers": ["Tesk River", "Tesk"]}\n')
    env = gym.make("agent_gym/RAG-v0", corpus=str(corpus), tasks=str(r1))
    env.reset(seed=0)
    obs, *_ = env.step(call("search", query="Kelmar river", k=1))
    assert "doc_id: k | title: Kelmar" in obs[-1]["content"]
    assert env.step("<answer>tesk</answer>")[1] == 1.0
    hotpot = [{"_id": "h", "question": "Which river does Osk lie on?", "answer": "Vel River",
               "supporting_facts": [["Osk", 0]]}]
    env = gym.make("agent_gym/RAG-v0", corpus=str(corpus), tasks=hotpot)
    assert env.unwrapped.tasks[0]["gold_ids"] == ["o"]
    with pytest.raises(ValueError, match="gold_ids"):
        RAGEnv(tasks=[{"id": 1, "question": "Q?", "ground_truth": "A", "gold_ids": "o"}])
