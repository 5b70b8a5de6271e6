"""The reward service over real HTTP, and slime's reward_func that calls it: judge failures mask, never zero."""

import argparse
import asyncio
import threading
import time
from types import SimpleNamespace

import httpx
import pytest
from judge_faults import ScriptedJudge
from slime_types import Sample

from agent_gym.cli import build_parser
from agent_gym.cli.serve_reward import build_app, run
from agent_gym.integrations.slime import reward_post_process
from agent_gym.integrations.slime_reward import reward_func
from agent_gym.judges import JudgeCriterion, LLMJudge, RankingCriterion, Rubric
from agent_gym.serving.reward_server import create_reward_server


class _Served:
    def __init__(self, app):
        import uvicorn

        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline
            time.sleep(0.01)
        self.url = f"http://127.0.0.1:{self.server.servers[0].sockets[0].getsockname()[1]}"

    def stop(self):
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture(scope="module")
def services():
    """A rule-graded service (the CLI's app for ToolUse-v0) and a judged one whose judge fails on some answers."""
    args = build_parser().parse_args(["serve-reward", "--env", "agent_gym/ToolUse-v0"])
    rule_app, _, closers = build_app(args)
    judge = LLMJudge(ScriptedJudge(fail_answers=["Lyon"]))
    judged_app = create_reward_server(Rubric([JudgeCriterion("judge", judge),
                                              RankingCriterion("relative", judge, outcome=False, weight=0.1)]))
    served = {"rule": _Served(rule_app), "judged": _Served(judged_app)}
    yield {name: s.url for name, s in served.items()}
    for s in served.values():
        s.stop()
    for close in closers:
        close()


def test_slime_remote_rm_body_is_scored_by_the_env_grader(services):
    url = services["rule"]
    right = httpx.post(url, json={"prompt": "What is 2+2?", "response": "<answer>4</answer>", "label": "4"}).json()
    wrong = httpx.post(f"{url}/reward", json={"prompt": "q", "response": "<answer>5</answer>", "label": "4"}).json()
    assert (right["reward"], right["status"], right["scores"]) == (1.0, "ENV_DONE", {"rule": 1.0})
    assert wrong["reward"] == 0.0 and httpx.get(f"{url}/health").json()["status"] == "ok"
    assert httpx.post(url, json={"prompt": 3}).status_code == 400
    assert httpx.post(url, content=b"not json").status_code == 400


def test_a_failed_judge_is_a_503_not_a_zero_and_batches_say_it_per_item(services):
    url = services["judged"]
    failed = httpx.post(url, json={"prompt": "Capital of France?", "response": "Lyon", "label": "Paris"})
    assert failed.status_code == 503 and failed.json()["status"] == "JUDGE_ERROR"
    assert failed.json()["error"]["kind"] == "unparseable" and failed.json()["reward"] is None
    items = [{"question": "Capital of France?", "reference": "Paris", "response": r, "group": "g"}
             for r in ("Paris", "Rome")] + [{"question": "Capital?", "reference": "Paris", "response": "Lyon"}]
    results = httpx.post(f"{url}/v1/rewards", json={"items": items}).json()["results"]
    assert [r["status"] for r in results] == ["ENV_DONE", "ENV_DONE", "JUDGE_ERROR"]
    assert [r["reward"] for r in results] == [pytest.approx(1.1), 0.0, None]  # outcome + 0.1 x relative rank
    assert results[0]["outcome"] == 1.0 and results[0]["shaping"] == pytest.approx(0.1)
    assert httpx.post(f"{url}/v1/rewards", json={"items": []}).status_code == 400


def test_slime_reward_func_masks_judge_failures(services):
    args = SimpleNamespace(rm_url=services["judged"], rewards_normalization=True, grpo_std_normalization=True)
    good = Sample(index=0, group_index=0, prompt="Capital of France?", response="Paris", label="Paris")
    bad = Sample(index=1, group_index=0, prompt="Capital of France?", response="Lyon", label="Paris")
    wrong = Sample(index=2, group_index=0, prompt="Capital of France?", response="Rome", label="Paris")
    assert asyncio.run(reward_func(args, good)) == pytest.approx(1.1)
    assert good.metadata["reward_parts"]["scores"]["judge"] == 1.0 and not good.remove_sample
    assert asyncio.run(reward_func(args, bad)) == 0.0
    assert bad.remove_sample and bad.status is Sample.Status.FAILED
    assert bad.metadata["episode_status"] == "JUDGE_ERROR" and bad.metadata["masked"]
    group = [Sample(index=i, group_index=1, prompt=s.prompt, response=s.response, label=s.label)
             for i, s in enumerate((good, bad, wrong))]
    rewards = asyncio.run(reward_func(args, group))  # --group-rm: one batch, ranked together
    assert [s.remove_sample for s in group] == [False, True, False] and rewards[1] == 0.0
    for s, r in zip(group, rewards, strict=True):
        s.reward = r
    _, advantages = reward_post_process(args, group)
    assert advantages[1] == 0.0 and advantages[0] > 0 > advantages[2]  # the masked one moves no baseline
    down = Sample(prompt="q", response="a", label="b")
    assert asyncio.run(reward_func(SimpleNamespace(rm_url="127.0.0.1:9"), down)) == 0.0
    assert down.remove_sample and "could not be reached" in down.metadata["error"]


def test_serve_reward_arguments_are_checked(capsys):
    assert run(argparse.Namespace(rubric=None, env=None, judge=[], token=None, max_body_mb=8.0)) == 2
    assert "expected --env, --judge or --rubric" in capsys.readouterr().err
    args = build_parser().parse_args(["serve-reward", "--rubric", "agent_gym.judges:Rubric", "--env", "x"])
    assert run(args) == 2
