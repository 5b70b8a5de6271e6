"""The reward service: a rubric (an env's rule grader, an LLM judge, or both) over HTTP.

Routes (``create_reward_server``):

* ``POST /`` and ``POST /reward`` - slime's remote reward model shape: the body is ``{"prompt", "response",
  "label"}`` (what slime's ``remote_rm`` posts to ``--rm-url``; ``label`` is the reference answer, or a task
  dict with ``question`` and ``ground_truth``). A score answers 200 with ``{"reward", "outcome", "shaping",
  "scores", "status": "ENV_DONE", "judge"}`` (run slime with ``--reward-key reward``). A judge that failed
  answers **503** with ``{"status": "JUDGE_ERROR", "error": {"message", "type": "JudgeError", "kind"}}``:
  slime's ``remote_rm`` retries it with backoff and raises if the judge never recovers; no zero is handed
  back in its place. :func:`agent_gym.integrations.slime_reward.reward_func` calls this route and masks
  such a sample instead.
* ``POST /v1/rewards`` - batched plain JSON: ``{"items": [{"question", "reference", "response", "group"?}]}``
  answers ``{"results": [...]}``, one per item in order, each a score as above or ``{"status":
  "JUDGE_ERROR", "reward": null, "error": {...}}``; items with the same ``group`` are scored together
  (group-relative criteria compare them).
* ``GET /health`` - 200 ``{"status": "ok"}``.
"""

# No ``from __future__ import annotations``: FastAPI reads the route functions' annotations (``Request``,
# imported inside create_reward_server) when the routes are added.
import json
from collections.abc import Mapping, Sequence
from typing import Any

from agent_gym.judges.rubric import JudgedEpisode, Rubric, RubricScore
from agent_gym.types import EpisodeStatus

__all__ = ["MAX_BATCH", "create_reward_server", "episode_from_request", "score_body"]

MAX_BATCH = 1024
"""The most items one ``POST /v1/rewards`` may hold."""


def episode_from_request(prompt: Any, response: Any, label: Any) -> JudgedEpisode:
    """The episode a reward request describes (``label``: a reference answer, or a task dict).

    Raises:
        ValueError: ``prompt`` or ``response`` is not text.
    """
    if not isinstance(prompt, str) or not isinstance(response, str):
        raise ValueError("expected 'prompt' (or 'question') and 'response' as strings")
    if isinstance(label, str) and label.lstrip().startswith("{"):
        try:
            label = json.loads(label)
        except json.JSONDecodeError:
            pass
    task = dict(label) if isinstance(label, Mapping) else {"ground_truth": "" if label is None else label}
    task.setdefault("question", prompt)
    return JudgedEpisode.from_messages(task, [{"role": "user", "content": prompt},
                                             {"role": "assistant", "content": response}])


def score_body(score: RubricScore, correct: float = 1.0) -> dict[str, Any]:
    """The JSON answer for one scored (or failed) episode."""
    if score.failure is not None or score.outcome is None:
        kind = score.failure.kind if score.failure is not None else "schema"
        message = str(score.failure) if score.failure is not None else "the rubric has no outcome criterion"
        return {"status": EpisodeStatus.JUDGE_ERROR.value, "reward": None, "scores": score.scores,
                "error": {"message": message, "type": "JudgeError", "kind": kind}, "judge": score.log.usage()}
    outcome = correct * score.outcome
    return {"status": EpisodeStatus.ENV_DONE.value, "reward": outcome + score.shaping, "outcome": outcome,
            "shaping": score.shaping, "scores": score.scores, "judge": score.log.usage()}


def create_reward_server(rubric: Rubric, *, correct: float = 1.0) -> Any:
    """The reward service's ASGI app (FastAPI) for ``rubric`` (see the module doc).

    Args:
        rubric: What scores each request.
        correct: The reward of a fully correct outcome.
    """
    from fastapi import FastAPI, Request
    from fastapi.responses import JSONResponse

    app = FastAPI(title="agent_gym reward service")
    stats = {"requests": 0, "scored": 0, "judge_errors": 0}

    def bad(message: str) -> JSONResponse:
        return JSONResponse({"error": {"message": message, "type": "BadRequestError", "code": 400}}, status_code=400)

    async def body_of(request: Request) -> Any:
        try:
            return await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None

    async def score_groups(episodes: Sequence[JudgedEpisode], groups: Sequence[str]) -> list[dict[str, Any]]:
        import asyncio

        members: dict[str, list[int]] = {}
        for i, group in enumerate(groups):
            members.setdefault(group, []).append(i)
        scored = await asyncio.gather(*(rubric.ascore([episodes[i] for i in idx]) for idx in members.values()))
        out: list[dict[str, Any]] = [{} for _ in episodes]
        for idx, scores in zip(members.values(), scored, strict=True):
            for i, score in zip(idx, scores, strict=True):
                out[i] = score_body(score, correct)
                stats["scored" if out[i]["reward"] is not None else "judge_errors"] += 1
        return out

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", **stats}

    async def slime_reward(request: Request) -> JSONResponse:
        stats["requests"] += 1
        body = await body_of(request)
        if not isinstance(body, dict):
            return bad("expected a JSON object {'prompt', 'response', 'label'}")
        try:
            episode = episode_from_request(body.get("prompt", body.get("question")), body.get("response"),
                                           body.get("label", body.get("reference")))
        except ValueError as exc:
            return bad(str(exc))
        (answer,) = await score_groups([episode], [""])
        return JSONResponse(answer, status_code=200 if answer["reward"] is not None else 503)

    app.add_api_route("/", slime_reward, methods=["POST"])
    app.add_api_route("/reward", slime_reward, methods=["POST"])

    @app.post("/v1/rewards")
    async def rewards(request: Request) -> JSONResponse:
        stats["requests"] += 1
        body = await body_of(request)
        items = body.get("items") if isinstance(body, dict) else None
        if not isinstance(items, list) or not items or len(items) > MAX_BATCH:
            return bad(f"expected {{'items': [...]}} with 1 to {MAX_BATCH} items")
        episodes, groups = [], []
        for i, item in enumerate(items):
            if not isinstance(item, dict):
                return bad(f"items[{i}]: expected an object")
            try:
                episodes.append(episode_from_request(item.get("question", item.get("prompt")), item.get("response"),
                                                     item.get("reference", item.get("label"))))
            except ValueError as exc:
                return bad(f"items[{i}]: {exc}")
            groups.append(str(item.get("group", f"\x00{i}")))
        return JSONResponse({"results": await score_groups(episodes, groups)})

    return app
