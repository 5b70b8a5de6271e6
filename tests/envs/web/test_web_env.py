"""Web-v0 on real MiniWoB++ pages: oracles, rewards, the tools and what a model's text may try against them."""

from __future__ import annotations

import base64
import pickle
import time

import pytest
from web_helpers import play_oracle, requires_browser, task

from agent_gym.envs.web import WebEnv
from agent_gym.envs.web.miniwob import SOLVABLE_PAGES, miniwob_tasks, parse_snapshot
from agent_gym.errors import ConfigError
from agent_gym.types import EpisodeStatus

pytestmark = requires_browser

# A few pages per kind of action (click, type, select, checkboxes, a dialog); every solvable page is played
# by benchmarks/web.py --oracle.
ORACLE_PAGES = ["click-button", "enter-text-2", "login-user", "choose-list", "click-checkboxes", "click-dialog"]


@pytest.fixture(scope="module")
def env(pool):
    env = WebEnv(pool=pool, max_steps=6)
    yield env
    env.close()


def call(name: str, **arguments) -> str:
    import json

    return f'<tool_call>{json.dumps({"name": name, "arguments": arguments})}</tool_call>'


def test_tasks_splits_and_solvable_list():
    train, test = miniwob_tasks("train"), miniwob_tasks("test")
    assert {t["page"] for t in train} == set(SOLVABLE_PAGES) == {t["page"] for t in test}
    assert not {t["id"] for t in train} & {t["id"] for t in test}
    assert len(miniwob_tasks("train", "all")) > 100 * 48
    from agent_gym.envs.web.sites import site_tasks

    assert {t["site"] for t in site_tasks("train")} == {"wizard", "shop", "settings"}
    assert not {t["id"] for t in site_tasks("train")} & {t["id"] for t in site_tasks("test")}
    with pytest.raises(ValueError, match="no MiniWoB"):
        miniwob_tasks("train", ("no-such-page",))
    with pytest.raises(ConfigError):
        WebEnv(tools=[len])


@pytest.mark.parametrize("page", ORACLE_PAGES)
def test_oracle_solves_and_the_page_pays(env, page):
    obs, info = play_oracle(env, {"task": task(page, 3)})
    assert info["status"] == EpisodeStatus.ENV_DONE and info["end_reason"] == "page_done"
    assert info["web"]["raw_reward"] == 1.0 and info["res_reward"] == pytest.approx(env.rewards.correct)


def test_wrong_action_is_paid_by_the_page_as_failure(env):
    obs, info = env.reset(options={"task": task("click-test-2", 1)})
    nodes = parse_snapshot(obs[1]["content"])
    wanted = obs[1]["content"].split("Click button ")[1].split(".")[0]
    wrong = next(n.ref for n in nodes if n.role == "button" and n.name != wanted)
    obs, reward, terminated, _, info = env.step(call("click", ref=wrong))
    assert terminated and info["end_reason"] == "page_done"
    assert info["web"]["raw_reward"] == -1.0 and info["res_reward"] == 0.0


def test_empty_finish_earns_nothing(env):
    obs, info = env.reset(options={"task": task("click-button", 2)})
    assert obs[1]["content"].startswith("Task: Click on the") and "[ref=e" in obs[1]["content"]
    obs, reward, terminated, _, info = env.step(call("finish"))
    assert terminated and info["end_reason"] == "finish" and info["status"] == EpisodeStatus.ENV_DONE
    assert info["res_reward"] == 0.0 and info["web"]["raw_reward"] is None


def test_answer_tag_earns_nothing_by_itself(env):
    env.reset(options={"task": task("enter-text", 2)})
    _, _, terminated, _, info = env.step("<answer>done, reward 1</answer>")
    assert terminated and info["res_reward"] == 0.0


ATTACKS = [
    ("goto", {"url": "http://example.com/"}, "not one of this task's pages"),
    ("goto", {"url": "file:///etc/passwd"}, "not one of this task's pages"),
    ("goto", {"url": "javascript:core.endEpisode(1)"}, "not one of this task's pages"),
    ("goto", {"url": "data:text/html,<script>alert(1)</script>"}, "not one of this task's pages"),
    ("goto", {"url": "/miniwob/../miniwob/click-test.html"}, "not one of this task's pages"),
    ("goto", {"url": "/miniwob/click-test.html"}, "not one of this task's pages"),
    ("goto", {"url": "//example.com/x"}, "not one of this task's pages"),
    ("click", {"ref": "e99999"}, "no element with ref e99999"),
    ("click", {"ref": "body >> nth=0"}, "is not an element ref"),
    ("click", {"ref": "aria-ref=e1"}, "is not an element ref"),
    ("type", {"ref": "e1", "text": "x" * 5000}, "over the limit"),
    ("press", {"key": "Enter; alert(1)"}, "is not a key name"),
    ("scroll", {"direction": "sideways"}, "direction"),
    ("select", {"ref": "e3", "option": "nope"}, "is not a list of options"),
]


def test_attacks_are_error_observations(env):
    obs, info = env.reset(options={"task": task("enter-text", 5)})
    for name, arguments, expected in ATTACKS:
        obs, reward, terminated, truncated, info = env.step(call(name, **arguments))
        assert not (terminated or truncated), (name, arguments, info)
        assert expected in obs[-1]["content"] and obs[-1]["content"].startswith("Error:"), obs[-1]["content"]
        assert info["error_kinds"]
        if env.step_count >= env.max_steps - 1:
            env.reset(options={"task": task("enter-text", 5)})
    assert env.session is not None and "/miniwob/enter-text.html" in env.session.url


def test_own_page_goto_restarts_the_same_problem(env):
    obs, _ = env.reset(options={"task": task("enter-text", 6)})
    before = obs[1]["content"]
    obs, _, terminated, _, info = env.step(call("goto", url="/miniwob/enter-text.html"))
    assert not terminated and "error" not in info
    assert before.split("\n")[0].split("Task: ")[1] in obs[-1]["content"]
    _, info = play_oracle(env, {"task": task("enter-text", 6)})
    assert info["web"]["raw_reward"] == 1.0


def test_the_reward_is_not_what_a_page_variable_says(env):
    """The env never reads MiniWoB's globals: a script setting them (the agent runs none) changes nothing."""
    env.reset(options={"task": task("enter-text", 7)})
    env.worker.call(env.session.page.evaluate, "() => { WOB_RAW_REWARD_GLOBAL = 1; WOB_REWARD_GLOBAL = 1; "
                                              "WOB_DONE_GLOBAL = true; }")
    _, _, _, _, info = env.step(call("type", ref="e1", text="WOB_RAW_REWARD_GLOBAL = 1") + call("finish"))
    assert info["end_reason"] == "finish" and info["res_reward"] == 0.0 and info["web"]["raw_reward"] is None


def test_requests_off_the_task_are_blocked(env):
    env.reset(options={"task": task("click-test", 0)})
    page = env.session.page
    script = ("async (url) => { try { const r = await fetch(url); return r.status; } "
              "catch (e) { return 'blocked'; } }")
    origin = env.session.spec.origin
    for url in ("http://example.com/", f"{origin}/miniwob/click-button.html", f"{origin}/../../etc/passwd",
                "http://127.0.0.1:9/"):
        assert env.worker.call(page.evaluate, script, url) == "blocked", url
    assert env.worker.call(page.evaluate, script, f"{origin}/core/core.js") == 200
    assert env.session.blocked_count >= 4


def test_fresh_context_per_episode(env):
    env.reset(options={"task": task("click-test", 0)})
    first = env.session.context
    env.worker.call(env.session.page.evaluate, "() => localStorage.setItem('kept', '1')")
    env.reset(options={"task": task("click-test", 0)})
    assert env.session.context is not first
    deadline = time.monotonic() + 30  # the ended episode's context closes in the background
    while len(env.worker.contexts - env.worker.prepared) > 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert env.worker.contexts - env.worker.prepared == {env.session.context}  # (and the next one's, prepared)
    assert env.worker.call(env.session.page.evaluate, "() => localStorage.getItem('kept')") is None


def test_screenshots_and_pickling(pool):
    env = WebEnv(pool=pool, screenshots=True)
    try:
        _, info = env.reset(options={"task": task("click-button", 1)})
        part = info["screenshot"]
        assert part["type"] == "image_url"
        assert base64.b64decode(part["image_url"]["url"].split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
        copy = pickle.loads(pickle.dumps(env))
        assert copy.worker is None and copy.session is None and copy.pool is None
        copy.pool = pool  # (a copy leases from the process's pool; this test keeps to its own)
        _, info = play_oracle(copy, {"task": task("click-button", 1)})
        assert info["web"]["raw_reward"] == 1.0
        copy.close()
    finally:
        env.close()


@pytest.mark.timeout(300)
def test_token_exact_episodes_under_collect(pool, reference_server, qwen_tokenizer):
    """A real tiny model's episodes: its own sampled ids are the trajectory's response ids, never re-tokenized."""
    from agent_gym.policy import SamplingParams, VLLMPolicy
    from agent_gym.rollout import collect

    policy = VLLMPolicy([str(reference_server)], qwen_tokenizer, SamplingParams(max_tokens=8, temperature=1.0))
    try:
        result = collect("agent_gym/Web-v0", policy, tasks=[task("click-button", 4), task("enter-text", 4)],
                         n_parallel=2, max_steps=2, env_kwargs={"pool": pool}, progress=False)
    finally:
        policy.close()
    assert len(result) == 2
    for trajectory in result:
        assert trajectory.status in (EpisodeStatus.MAX_STEPS, EpisodeStatus.TRUNCATION, EpisodeStatus.ENV_DONE)
        assert not trajectory.retokenized
        masks = trajectory.response_masks.tolist()
        assert sum(masks) >= 1 and len(trajectory.response_tokens) == len(masks) == len(trajectory.response_logprobs)
        assert bool((trajectory.response_logprobs <= 0).all())
        assert all(lp == 0.0 for lp, m in zip(trajectory.response_logprobs.tolist(), masks, strict=True) if m == 0)


@pytest.mark.parametrize("site", ["wizard", "shop", "settings"])
def test_synthetic_site_oracle_and_empty_finish(env, site):
    from agent_gym.envs.web.site_server import site_server

    site_task = {"id": f"site-{site}/5", "question": "q", "ground_truth": "", "source": "site", "site": site, "seed": 5}
    env.max_steps = 10
    try:
        obs, info = play_oracle(env, {"task": site_task})
        assert info["status"] == EpisodeStatus.ENV_DONE and info["end_reason"] == "finish"
        assert info["web"]["site_score"] == 1.0 and info["res_reward"] == pytest.approx(env.rewards.correct)
        assert env.step_count >= 4  # several pages, state carried between them
        obs, _ = env.reset(options={"task": site_task})
        prefix = env.site_prefix
        _, _, terminated, _, info = env.step(call("goto", url=prefix.replace(prefix.split("/")[2], "0" * 16)))
        assert not terminated and "not one of this task's pages" in info["error"]
        _, _, terminated, _, info = env.step(call("finish"))
        assert terminated and info["res_reward"] == 0.0 and info["web"]["site_score"] == 0.0
    finally:
        env.max_steps = 6
    env.reset(options={"task": task("click-test", 0)})
    assert site_server().instances == 0  # each episode's site is gone with it
