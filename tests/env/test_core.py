from __future__ import annotations

import copy
import pickle

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tools_fixtures import add, fail, huge, sleepy

from agent_gym.env.core import AgentEnv
from agent_gym.env.rewards import RewardConfig
from agent_gym.env.tasks import validate_task
from agent_gym.grading import normalize_text
from agent_gym.parsers.hermes import format_tool_call
from agent_gym.tools import FunctionTool
from agent_gym.types import EpisodeStatus, PolicyOutput

TASKS = [
    {"id": "t0", "question": "What is 1 + 2?", "ground_truth": "3",
     "solution": [[{"name": "add", "arguments": {"a": 1, "b": 2}}]]},
    {"id": "t1", "question": "Name the capital of France.", "ground_truth": "Paris"},
    {"id": 2, "question": "What is 5 + 5?", "ground_truth": "10"},
]


def make_env(**kwargs):
    tools = kwargs.pop("tools", [add, fail, sleepy, FunctionTool(huge, max_output_chars=50)])
    return AgentEnv(copy.deepcopy(TASKS), tools, **kwargs)


def call(name, **arguments):
    return format_tool_call(name, arguments)


@pytest.mark.parametrize(
    ("task", "fragment"),
    [
        ("not a dict", "expected a dict"),
        ({"question": "q", "ground_truth": 1}, "missing ['id']"),
        ({"id": "a", "ground_truth": 1}, "missing ['question']"),
        ({"id": "a", "question": "q"}, "missing ['ground_truth']"),
        ({"id": 1.5, "question": "q", "ground_truth": 1}, "'id' to be str or int"),
        ({"id": "a", "question": "  ", "ground_truth": 1}, "non-empty str"),
        ({"id": "a", "question": "q", "ground_truth": None}, "got None"),
        ({"id": "a", "question": "q", "ground_truth": 1, "solution": [{"name": "x"}]}, "'solution'"),
    ],
)
def test_validate_task_rejects_bad_tasks(task, fragment):
    with pytest.raises(ValueError, match="expected") as info:
        validate_task(task)
    assert fragment in str(info.value)


def test_constructor_validation():
    with pytest.raises(ValueError, match="tasks\\[1\\]"):
        AgentEnv([TASKS[0], {"id": "x"}])
    with pytest.raises(ValueError, match="non-empty"):
        AgentEnv([])
    with pytest.raises(ValueError, match="max_steps"):
        make_env(max_steps=0)
    with pytest.raises(ValueError, match="render_mode"):
        make_env(render_mode="human")
    with pytest.raises(ValueError, match="unique"):
        make_env(tools=[add, add])
    with pytest.raises(TypeError):
        make_env(parser=object())
    with pytest.raises(ValueError, match="unknown"):
        make_env(rewards={"bonus": 1})


def test_reset_info_and_task_selection():
    env = make_env()
    obs, info = env.reset(seed=0)
    assert set(info) == {"task", "tools", "tools_in_prompt", "episode_id"}
    assert [m["role"] for m in obs] == ["system", "user"]
    assert obs[1]["content"] == info["task"]["question"]
    assert [s["function"]["name"] for s in info["tools"]] == ["add", "fail", "sleepy", "huge"]
    assert info["tools_in_prompt"] is False and "## add" not in obs[0]["content"]
    assert info["tools"] == env.tool_schemas
    seen = {env.reset(seed=s)[1]["task"]["id"] for s in range(30)}
    assert seen == {"t0", "t1", 2}
    assert env.reset(seed=5)[0] == env.reset(seed=5)[0]
    assert env.reset(seed=5)[1]["episode_id"] == env.reset(seed=5)[1]["episode_id"]


def test_reset_with_task_option_and_index():
    env = make_env()
    custom = {"id": "c", "question": "Custom?", "ground_truth": "yes"}
    obs, info = env.reset(options={"task": custom})
    assert info["task"] == custom and obs[1]["content"] == "Custom?"
    assert env.reset(options={"task_index": 1})[1]["task"]["id"] == "t1"
    with pytest.raises(ValueError, match="ground_truth"):
        env.reset(options={"task": {"id": "x", "question": "q"}})
    with pytest.raises(ValueError, match=r'^options\["task"\]: expected a dict'):
        env.reset(options={"task": "not a task"})
    with pytest.raises(ValueError, match="task_index"):
        env.reset(options={"task_index": 9})


def test_tools_in_prompt_describes_tools_once_and_hides_schemas():
    env = make_env(tools_in_prompt=True)
    obs, info = env.reset(seed=0)
    assert info["tools"] == [] and info["tools_in_prompt"] is True
    assert obs[0]["content"].count("## add") == 1
    assert env.tool_schemas  # still available to code that wants them


def test_tool_call_success_and_repeat():
    env = make_env()
    env.reset(options={"task_index": 0})
    obs, reward, terminated, truncated, info = env.step(call("add", a=1, b=2))
    assert obs[-2] == {"role": "assistant", "content": call("add", a=1, b=2)}
    assert obs[-1] == {"role": "tool", "content": "3"}
    assert info["toolcall_reward"] == pytest.approx(0.1) and info["res_reward"] == 0.0 and reward == pytest.approx(0.1)
    assert info["tool_calls"] == [{"name": "add", "arguments": {"a": 1, "b": 2}, "ok": True, "error": None,
                                   "kind": None, "output": "3"}]
    assert "error" not in info and "status" not in info and not terminated and not truncated
    _, reward, *_ = env.step(call("add", a=1, b=2))
    assert reward == 0.0  # repeating the same call earns no bonus


def test_two_calls_in_one_message_give_two_tool_messages():
    env = make_env()
    env.reset(seed=0)
    obs, *_ , info = env.step(call("add", a=1) + "\n" + call("add", a=5, b=5))
    assert [m["content"] for m in obs[-2:]] == ["3", "10"] and len(info["tool_calls"]) == 2


@pytest.mark.parametrize(
    ("action", "fragment"),
    [
        ("<tool_call>{oops}</tool_call>", "invalid JSON"),
        (call("nope"), "unknown tool 'nope'"),
        (call("add", a="x"), "expected integer"),
        (call("add"), "missing required argument 'a'"),
        (call("fail", reason="boom"), "RuntimeError: boom"),
        (call("huge", n=500), "over the limit of 50"),
    ],
)
def test_tool_errors_become_observations(action, fragment):
    env = make_env()
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(action)
    assert fragment in info["error"]
    assert obs[-1]["role"] == "tool" and obs[-1]["content"].startswith(("Error: ", "xxxx"))
    assert info["toolcall_reward"] < 0 and reward < 0
    assert not terminated and not truncated


def test_tool_over_time_limit_does_not_hang_the_env():
    env = make_env(tools=[FunctionTool(sleepy, time_limit=0.2)])
    env.reset(seed=0)
    *_, info = env.step(call("sleepy", seconds=3))
    assert "time limit" in info["error"] and info["toolcall_reward"] < 0


def test_message_without_action_gets_a_nudge():
    env = make_env()
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("Hmm, let me think about it.")
    assert obs[-1]["role"] == "user" and "<answer>" in obs[-1]["content"]
    assert "no <tool_call>" in info["error"] and reward == pytest.approx(-0.1)


def test_tool_calls_per_step_are_capped():
    env = make_env(max_tool_calls_per_step=2)
    env.reset(seed=0)
    *_, info = env.step("\n".join(call("add", a=i) for i in range(4)))
    assert [c["ok"] for c in info["tool_calls"]] == [True, True, False, False]
    assert "at most 2 calls" in info["error"]


def test_answer_terminates_and_is_scored():
    env = make_env()
    env.reset(options={"task_index": 1})
    obs, reward, terminated, truncated, info = env.step("<think>easy</think><answer>paris.</answer>")
    assert terminated and not truncated and info["status"] is EpisodeStatus.ENV_DONE
    assert info["res_reward"] == 1.0 and reward == 1.0
    with pytest.raises(RuntimeError, match="reset"):
        env.step("<answer>again</answer>")
    env.reset(options={"task_index": 1})
    *_, info = env.step("<answer>Lyon</answer>")
    assert info["res_reward"] == 0.0


def test_max_steps_truncates_with_status():
    env = make_env(max_steps=2)
    env.reset(seed=0)
    assert env.step("thinking")[3] is False
    _, _, terminated, truncated, info = env.step("still thinking")
    assert truncated and not terminated and info["status"] == EpisodeStatus.MAX_STEPS


@pytest.mark.parametrize(
    ("finish_reason", "status", "appended"),
    [("length", EpisodeStatus.TRUNCATION, True), ("prompt_truncation", EpisodeStatus.PROMPT_TRUNCATION, False),
     ("error", EpisodeStatus.POLICY_ERROR, False)],
)
def test_policy_output_finish_reasons(finish_reason, status, appended):
    env = make_env()
    obs0, _ = env.reset(seed=0)
    text = "<tool_call>{\"name\": \"add\", \"argu" if finish_reason == "length" else ""
    obs, reward, terminated, truncated, info = env.step(PolicyOutput(text=text, finish_reason=finish_reason))
    assert truncated and not terminated and info["status"] == status and reward == 0.0
    assert len(obs) == len(obs0) + (1 if appended else 0)


def test_policy_output_stop_uses_text():
    env = make_env()
    env.reset(options={"task_index": 2})
    *_, terminated, _, info = env.step(PolicyOutput(text="<answer>10</answer>", token_ids=[1, 2], logprobs=[0.0, 0.0]))
    assert terminated and info["res_reward"] == 1.0


def test_step_argument_errors():
    env = make_env()
    with pytest.raises(RuntimeError, match="before reset"):
        env.step("hi")
    env.reset(seed=0)
    with pytest.raises(TypeError, match="expected str or PolicyOutput"):
        env.step(42)  # type: ignore[arg-type]


def test_observations_are_fresh_objects():
    env = make_env()
    obs0, info0 = env.reset(seed=0)
    obs1, *_, info1 = env.step(call("add", a=1))
    assert obs0[0] is not obs1[0] and obs0[0] == obs1[0]
    obs1[0]["content"] = "mutated"
    assert env.messages[0]["content"] != "mutated"


def test_render_ansi_and_none():
    env = make_env(render_mode="ansi")
    env.reset(options={"task_index": 0})
    env.step(call("add", a=1, b=2))
    text = env.render()
    assert "[system]" in text and "[user]\nWhat is 1 + 2?" in text and "[tool]\n3" in text
    assert make_env().render() is None


def test_oracle_plays_solution_then_answers():
    env = make_env()
    env.reset(options={"task_index": 0})
    assert env.oracle_action() == call("add", a=1, b=2)
    env.step(env.oracle_action())
    assert env.oracle_action() == "<answer>3</answer>"
    *_, terminated, _, info = env.step(env.oracle_action())
    assert terminated and info["res_reward"] == 1.0
    with pytest.raises(RuntimeError):
        env.oracle_action()
    env.reset(options={"task_index": 1})
    assert env.oracle_action() == "<answer>Paris</answer>"


def test_pickle_mid_episode_continues_identically():
    env = make_env()
    env.reset(seed=3)
    env.step(call("add", a=2))
    clone = pickle.loads(pickle.dumps(env))
    a = env.step(call("add", a=7))
    b = clone.step(call("add", a=7))
    assert a[0] == b[0] and a[1] == b[1] and a[4] == b[4]


def test_reward_config():
    env = make_env(rewards={"tool_success": 0.5, "correct": 2.0})
    env.reset(options={"task_index": 0})
    assert env.step(call("add", a=1))[1] == pytest.approx(0.5)
    assert env.step("<answer>3</answer>")[1] == pytest.approx(2.0)
    assert RewardConfig.coerce(None) == RewardConfig()
    with pytest.raises(TypeError):
        RewardConfig.coerce(3)  # type: ignore[arg-type]


def test_info_has_no_wall_clock_values():
    env = make_env()
    _, info = env.reset(seed=0)
    keys = set(info)
    *_, info = env.step(call("add", a=1))
    keys |= set(info)
    assert not any("time" in k for k in keys)


def test_normalize_text():
    assert normalize_text("  Paris! ") == normalize_text("paris")
    assert normalize_text("ＡＢＣ") == "abc"


_PIECES = st.sampled_from(["<think>", "</think>", "<tool_call>", "</tool_call>", "<answer>", "</answer>",
                           '{"name": "add", "arguments": {"a": 1}}', '{"name": "fail"', '"huge"', "{", "}"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(st.one_of(st.text(max_size=15), _PIECES), max_size=12).map("".join), min_size=1,
                max_size=4))
def test_env_step_never_raises_on_arbitrary_text(messages):
    env = make_env(max_steps=3)
    obs, _ = env.reset(seed=0)
    for text in messages:
        obs, reward, terminated, truncated, info = env.step(text)
        assert obs in env.observation_space
        assert isinstance(reward, float) and {"toolcall_reward", "res_reward", "tool_calls"} <= set(info)
        if terminated or truncated:
            assert isinstance(info["status"], EpisodeStatus)
            break


class _CountingEnv(AgentEnv):
    checks = 0

    def validate_tasks(self, tasks):
        type(self).checks += 1
        return super().validate_tasks(tasks)


def test_a_shared_tuple_of_tasks_is_validated_once():
    shared = ({"id": 1, "question": "q1", "ground_truth": "a"}, {"id": 2, "question": "q2", "ground_truth": "b"})
    first, second = _CountingEnv(tasks=shared), _CountingEnv(tasks=shared)
    assert _CountingEnv.checks == 1
    assert first.tasks == second.tasks == [dict(t) for t in shared]
    first.tasks.append({"id": 3, "question": "q3", "ground_truth": "c"})  # each env owns its list
    assert len(second.tasks) == 2 and len(_CountingEnv(tasks=shared).tasks) == 2
    _CountingEnv(tasks=list(shared))  # a list may change between envs: checked every time
    assert _CountingEnv.checks == 2


def test_invalid_tasks_in_a_tuple_still_raise_every_time():
    bad = ({"id": 1, "question": "", "ground_truth": "a"},)
    for _ in range(2):
        with pytest.raises(ValueError, match="question"):
            AgentEnv(tasks=bad)


def test_tool_call_records_carry_an_error_kind():
    def boom(x: int) -> int:
        """Raise.

        Args:
            x: A number.
        """
        raise RuntimeError("no")

    def echo(text: str) -> str:
        """Echo.

        Args:
            text: Text.
        """
        return text

    env = AgentEnv(tasks=[{"id": 1, "question": "q", "ground_truth": "a"}], tools=[boom, echo],
                   max_tool_calls_per_step=3)
    env.reset(seed=0)
    action = (
        '<tool_call>{"name": "nope", "arguments": {}}</tool_call>'
        '<tool_call>{"name": "boom", "arguments": {"x": 1}}</tool_call>'
        '<tool_call>{"name": "echo", "arguments": {"text": 5, "extra": 1}}</tool_call>'
        '<tool_call>{"name": "echo", "arguments": {"text": "hi"}}</tool_call>'
        "<tool_call>{not json</tool_call>"
    )
    _, _, _, _, info = env.step(action)
    kinds = [call["kind"] for call in info["tool_calls"]]
    assert kinds == ["unknown_tool", "tool_error", "bad_arguments", "too_many_calls"]
    assert len(info["parse_errors"]) == 1
    _, _, _, _, info = env.step('<tool_call>{"name": "echo", "arguments": {"text": "hi"}}</tool_call>')
    assert info["tool_calls"][0]["kind"] is None and "parse_errors" not in info
