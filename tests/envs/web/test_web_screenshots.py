"""Web-v0 with screenshots="observation": the screenshot rides on the observation, text consumers never see it."""

from __future__ import annotations

import base64
import json
import subprocess
import sys

import pytest
from web_helpers import requires_browser, task

from agent_gym.envs.web import WebEnv
from agent_gym.envs.web.shots import ScreenshotTrail, check_screenshots
from agent_gym.messages import IMAGES_KEY, image_part, vision_messages
from agent_gym.wrappers import TrajectoryWrapper

PNG = b"\x89PNG\r\n\x1a\n"


def scroll() -> str:
    return f'<tool_call>{json.dumps({"name": "scroll", "arguments": {"direction": "down"}})}</tool_call>'


def png_of(message: dict) -> bytes:
    (part,) = message[IMAGES_KEY]
    return base64.b64decode(part["image_url"]["url"].split(",", 1)[1])


def test_arguments_are_checked():
    check_screenshots("observation", None)
    for bad in ("images", 1, None):
        with pytest.raises(ValueError, match="screenshots"):
            check_screenshots(bad, 1)
    for bad in (0, True, 1.5):
        with pytest.raises(ValueError, match="keep_screenshots"):
            check_screenshots(True, bad)


def test_trail_keeps_the_newest():
    trail = ScreenshotTrail(keep=2)
    parts = [image_part(PNG + bytes([i])) for i in range(3)]
    obs = ({"role": "system", "content": "s"}, {"role": "user", "content": "u"})
    trail.record(obs, parts[0])
    obs += ({"role": "assistant", "content": "a"},)
    assert trail.record(obs, parts[1])[-1] == {"role": "assistant", "content": "a"}  # not on the model's turn
    obs += ({"role": "tool", "content": "t1"}, {"role": "tool", "content": "t2"})
    out = trail.record(obs, parts[1])
    assert [IMAGES_KEY in m for m in out] == [False, True, False, False, True]
    obs += ({"role": "assistant", "content": "b"}, {"role": "tool", "content": "t3"})
    out = trail.record(obs, parts[2])
    assert [i for i, m in enumerate(out) if IMAGES_KEY in m] == [4, 6]
    assert all(IMAGES_KEY not in m for m in obs)  # the given messages are not changed
    assert ScreenshotTrail(keep=None).record(obs, None) == obs


@requires_browser
def test_observation_carries_the_newest_screenshot(pool):
    env = WebEnv(pool=pool, screenshots="observation", max_steps=3)
    try:
        obs, info = env.reset(options={"task": task("click-button", 1)})
        assert "screenshot" not in info
        assert [IMAGES_KEY in m for m in obs] == [False, True]
        assert png_of(obs[1]).startswith(PNG)
        assert obs in env.observation_space and isinstance(obs[1]["content"], str)
        obs, *_ , info = env.step(scroll())
        assert "screenshot" not in info
        assert [IMAGES_KEY in m for m in obs] == [False, False, False, True]  # only the newest keeps its image
        assert obs[-1]["role"] == "tool" and png_of(obs[-1]).startswith(PNG)
        assert obs in env.observation_space
        assert all(IMAGES_KEY not in m for m in env.messages)  # the env's own record is text
        wire = vision_messages(obs)
        assert wire[-1]["role"] == "user" and wire[-1]["content"][0]["type"] == "image_url"
        assert wire[-2] == {"role": "tool", "content": obs[-1]["content"]}
    finally:
        env.close()


@requires_browser
def test_keep_all_and_the_wrapper(pool):
    """keep_screenshots=None keeps each one; the policy's view has them, the trajectory's text never does."""
    env = TrajectoryWrapper(WebEnv(pool=pool, screenshots="observation", keep_screenshots=None, max_steps=2))
    try:
        obs, _ = env.reset(options={"task": task("click-button", 2)})
        assert IMAGES_KEY in obs[-1]
        obs, _, _, _, _ = env.step(scroll())
        assert [IMAGES_KEY in m for m in obs] == [False, True, False, True]
        obs, _, terminated, truncated, info = env.step(scroll())
        assert truncated and not terminated
        trajectory = info["trajectory"]
        for step in trajectory.steps:
            assert all(set(m) == {"role", "content"} for m in step.chat_completions)
        assert all(isinstance(v, str) for m in trajectory.chat_completions for v in m.values())
        assert json.dumps(trajectory.to_dict()).count("data:image/") == 0
    finally:
        env.close()


@requires_browser
@pytest.mark.timeout(180)
def test_play_shows_the_screenshot_as_a_line():
    """``agent-gym play`` with the observation's screenshots: one line per image, never the base64 data."""
    proc = subprocess.run(
        [sys.executable, "-m", "agent_gym", "play", "agent_gym/Web-v0", "--oracle", "--task-index", "0",
         "--env-kwargs", '{"screenshots": "observation", "prepare_next": false}'],
        capture_output=True, text=True, timeout=170, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("[image: image/png, ") >= 2 and "base64" not in proc.stdout
    assert "episode over: terminated" in proc.stdout


@requires_browser
@pytest.mark.timeout(300)
@pytest.mark.parametrize("send_images", [False, True])
def test_collect_sends_the_newest_screenshot_only_when_asked(pool, reference_server, send_images):
    """End to end: env -> TrajectoryWrapper -> chat policy -> server. The text-only reference model refuses images
    as vLLM does (the episode is a POLICY_ERROR); without send_images the same episodes run on text."""
    from chat_bodies import BodyRecorder

    from agent_gym.policy import ClientOptions, VLLMChatPolicy
    from agent_gym.rollout import collect
    from agent_gym.types import EpisodeStatus

    client = BodyRecorder([str(reference_server)], options=ClientOptions(max_retries=0))
    policy = VLLMChatPolicy(client, sampling={"top_k": -1, "max_tokens": 8, "temperature": 1.0},
                            send_images=send_images)
    try:
        (trajectory,) = collect("agent_gym/Web-v0", policy, tasks=[task("click-button", 5)], max_steps=2,
                                env_kwargs={"pool": pool, "screenshots": "observation"}, progress=False)
    finally:
        policy.close()
    images = [[part for m in body["messages"] if isinstance(m["content"], list) for part in m["content"]
               if part["type"] == "image_url"] for body in client.bodies]
    if send_images:
        assert trajectory.status == EpisodeStatus.POLICY_ERROR
        assert "is not a multimodal model" in json.dumps(trajectory.steps[-1].info)
        assert images and all(len(parts) == 1 for parts in images)  # the newest screenshot only
    else:
        assert trajectory.status in (EpisodeStatus.ENV_DONE, EpisodeStatus.MAX_STEPS, EpisodeStatus.TRUNCATION)
        assert images and all(parts == [] for parts in images)
    assert "data:image/" not in json.dumps(trajectory.to_dict())


@requires_browser
@pytest.mark.timeout(300)
def test_gymnasium_env_checker_passes_with_screenshots_on_the_observation(pool):
    """The observations with images are in the observation space, resets are deterministic, warnings are errors."""
    import warnings

    from gymnasium.utils.env_checker import check_env

    env = WebEnv(pool=pool, screenshots="observation", max_steps=2)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            check_env(env, skip_render_check=True)
    finally:
        env.close()
