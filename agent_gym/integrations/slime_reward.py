"""slime's ``reward_func`` calling agent_gym's reward service: a judge that failed masks the sample, never a zero.

Run ``agent-gym serve-reward`` (an env's grader, an LLM judge or a rubric) and point slime at it:
``--custom-rm-path agent_gym.integrations.slime_reward.reward_func --rm-url http://HOST:PORT``. slime
calls the function with one ``Sample`` (or, with ``--group-rm``, a group's list; sent as one batch, the
group scored together so group-relative criteria compare its samples). Each sample's prompt, response
and label go to the service; its reward comes back as a float, the criteria's scores in
``metadata["reward_parts"]``.

A sample the service could not score (its judge was down, timed out or answered unparseably: status
``JUDGE_ERROR``; or the service itself could not be reached) gets ``remove_sample = True`` (slime zeroes
its loss mask), status ``FAILED``, ``metadata["episode_status"] = "JUDGE_ERROR"``, ``metadata["masked"]``
and ``metadata["error"]``, and the reward 0.0 that slime needs as a number: masked, so no gradient
comes from it, and :func:`agent_gym.integrations.slime.reward_post_process` leaves it out of its group's
baseline.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from typing import Any

from agent_gym.types import EpisodeStatus

__all__ = ["REWARD_URL_ENV", "reward_func", "reward_url"]

REWARD_URL_ENV = "AGENT_GYM_REWARD_URL"
"""Read for the service's address when slime's ``args.rm_url`` is not set."""

_RETRIES = 3  # the service itself unreachable: tries before the sample is masked
_TIMEOUT_S = 600.0  # a judged batch may take long; the service's judge has its own timeouts


def reward_url(args: Any) -> str:
    """The service's base URL: ``args.rm_url``, else ``$AGENT_GYM_REWARD_URL``.

    Raises:
        ValueError: Neither is set.
    """
    url = getattr(args, "rm_url", None) or os.environ.get(REWARD_URL_ENV)
    if not url:
        raise ValueError(f"reward_func: expected slime's --rm-url (or ${REWARD_URL_ENV}) naming the reward service")
    url = str(url).rstrip("/")
    return url if "://" in url else f"http://{url}"


def _text(prompt: Any) -> str:
    """A sample's prompt as text (a chat prompt: its last user message)."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, Sequence):
        users = [m.get("content", "") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
        return str(users[-1]) if users else ""
    return str(prompt)


def _mask(sample: Any, error: str) -> float:
    """Mark ``sample`` as an unscored judge failure; the 0.0 slime needs (the sample is removed from the loss)."""
    sample.remove_sample = True
    status = getattr(type(sample), "Status", None)
    if status is not None and hasattr(status, "FAILED"):
        sample.status = status.FAILED
    metadata = sample.metadata if isinstance(getattr(sample, "metadata", None), dict) else {}
    metadata.update(episode_status=EpisodeStatus.JUDGE_ERROR.value, masked=True, error=error)
    sample.metadata = metadata
    return 0.0


def _keep(sample: Any, result: dict[str, Any]) -> float:
    metadata = sample.metadata if isinstance(getattr(sample, "metadata", None), dict) else {}
    metadata["reward_parts"] = {"outcome": result.get("outcome"), "shaping": result.get("shaping"),
                                "scores": result.get("scores"), "judge": result.get("judge")}
    sample.metadata = metadata
    return float(result["reward"])


async def _post(url: str, body: dict[str, Any]) -> tuple[int, Any]:
    """POST ``body``; ``(status, json)``, or ``(0, error text)`` when the service could not be reached."""
    import httpx

    error = ""
    for attempt in range(_RETRIES):
        try:
            async with httpx.AsyncClient(timeout=_TIMEOUT_S) as client:
                reply = await client.post(url, json=body)
            try:
                return reply.status_code, reply.json()
            except ValueError:
                return reply.status_code, {"error": {"message": reply.text[:300]}}
        except httpx.HTTPError as exc:
            error = f"the reward service at {url} could not be reached: {type(exc).__name__}: {exc}"
            await asyncio.sleep(0.2 * 2**attempt)
    return 0, error


def _error(status: int, data: Any) -> str:
    if status == 0:
        return str(data)
    message = data.get("error", {}).get("message") if isinstance(data, dict) else None
    return f"judge failed (HTTP {status}): {message or data}"


async def reward_func(args: Any, sample_or_list: Any, **kwargs: Any) -> float | list[float]:
    """The reward of one slime sample (or of a group's list) from agent_gym's reward service.

    Args:
        args: slime's arguments (``rm_url``).
        sample_or_list: A ``Sample``, or a list of them (``--group-rm``).
        **kwargs: What slime passes besides (unused).

    Returns:
        A float per sample: the service's reward, or 0.0 for a masked sample (see the module doc).
    """
    url = reward_url(args)
    if isinstance(sample_or_list, Sequence) and not isinstance(sample_or_list, (str, bytes)):
        samples = list(sample_or_list)
        if not samples:
            return []
        items = [{"question": _text(s.prompt), "response": str(s.response or ""), "reference": s.label,
                  "group": str(getattr(s, "group_index", None))} for s in samples]
        status, data = await _post(f"{url}/v1/rewards", {"items": items})
        results = data.get("results") if status == 200 and isinstance(data, dict) else None
        if not isinstance(results, list) or len(results) != len(samples):
            return [_mask(s, _error(status, data)) for s in samples]
        return [_keep(s, r) if r.get("reward") is not None else _mask(s, _error(503, r))
                for s, r in zip(samples, results, strict=True)]
    sample = sample_or_list
    status, data = await _post(f"{url}/reward", {"prompt": _text(sample.prompt), "response": str(sample.response or ""),
                                                 "label": sample.label})
    if status == 200 and isinstance(data, dict) and data.get("reward") is not None:
        return _keep(sample, data)
    return _mask(sample, _error(status, data))
