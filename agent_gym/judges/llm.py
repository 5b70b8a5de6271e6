"""``LLMJudge``: pointwise, pairwise and group-ranking verdicts from any OpenAI-compatible server.

The judge samples through a policy of this package (:class:`~agent_gym.policy.VLLMPolicy`, token-in
and token-exact, or :class:`~agent_gym.policy.VLLMChatPolicy`), so its requests get the same
session-affine routing, timeouts, retries with backoff and failover as the policy's own. Every call is
recorded (:class:`JudgeCall`: prompt ids, sampled ids, logprobs, text, time, failure kind) in the
:class:`JudgeLog` passed in, and becomes a ``judge`` segment (:meth:`JudgeCall.segment`) that the trainer
adapters can train the judge on.

A reply is read strictly (:mod:`agent_gym.judges.verdicts`); a reply that breaks the schema is asked
once more (``parse_retries``, bounded), then the call fails with :class:`~agent_gym.errors.JudgeError`:
never a score. Identical requests are answered once (:class:`~agent_gym.judges.cache.VerdictCache`).

Pairwise and group verdicts are asked in both positions (A/B and B/A; the group in its order and
reversed): :class:`PairVerdict` says whether the swap changed the verdict, :class:`RankVerdict` how far
the swapped scores moved, measuring the judge's position bias.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from agent_gym.errors import AgentGymError, JudgeError, PromptTooLong
from agent_gym.judges.cache import VerdictCache, content_key, verdict_once
from agent_gym.judges.templates import JudgeTemplates, pairwise_messages, pointwise_messages, ranking_messages
from agent_gym.judges.verdicts import DEFAULT_SCALE, parse_preference, parse_score, parse_scores
from agent_gym.types import FinishReason, Message, PolicyOutput, Segment
from agent_gym.utils.runtime import LoopThread

__all__ = ["JUDGE_ROLE", "JudgeCall", "JudgeLog", "LLMJudge", "PairVerdict", "RankVerdict"]

JUDGE_ROLE = "judge"
"""The ``Segment.role`` of a judge's recorded calls."""

T = TypeVar("T")


@dataclass
class JudgeCall:
    """One request to the judge's server and what came back.

    Attributes:
        kind: ``"pointwise"``, ``"pairwise"`` or ``"ranking"``.
        messages: The prompt messages.
        text: The reply ("" when none came).
        prompt_token_ids: The prompt ids (None when the policy reports none).
        token_ids: The sampled ids (None when none).
        logprobs: One logprob per sampled id (None when none).
        seconds: Wall time of the request.
        failure: The :class:`~agent_gym.errors.JudgeError` kind when the call gave no verdict, else None.
    """

    kind: str
    messages: list[Message]
    text: str = ""
    prompt_token_ids: list[int] | None = None
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    seconds: float = 0.0
    failure: str | None = None

    def segment(self, reward: float | None = None) -> Segment | None:
        """The call as a trainable ``judge`` segment (None when the server returned no ids).

        Args:
            reward: The ``role_reward`` of the segment (e.g. 1.0 when the verdict agreed with a rule grader).
        """
        if not self.prompt_token_ids or not self.token_ids:
            return None
        logprobs = self.logprobs if self.logprobs is not None else [0.0] * len(self.token_ids)
        return Segment(prompt_tokens=list(self.prompt_token_ids), response_tokens=list(self.token_ids),
                       response_masks=[1] * len(self.token_ids), response_logprobs=list(logprobs),
                       role=JUDGE_ROLE, role_reward=reward)


@dataclass
class JudgeLog:
    """What judging one episode (or one request) cost: its calls and cache hits.

    Attributes:
        calls: Every request sent, in order.
        cache_hits: Verdicts answered from the cache (no request).
    """

    calls: list[JudgeCall] = field(default_factory=list)
    cache_hits: int = 0

    def usage(self) -> dict[str, Any]:
        """``calls``, ``cache_hits``, ``failed_calls``, ``prompt_tokens``, ``completion_tokens``, ``seconds``."""
        return {
            "calls": len(self.calls),
            "cache_hits": self.cache_hits,
            "failed_calls": sum(1 for c in self.calls if c.failure),
            "prompt_tokens": sum(len(c.prompt_token_ids or ()) for c in self.calls),
            "completion_tokens": sum(len(c.token_ids or ()) for c in self.calls),
            "seconds": sum(c.seconds for c in self.calls),
        }


@dataclass(frozen=True)
class PairVerdict:
    """A pairwise verdict asked in both positions.

    Attributes:
        winner: ``"A"``, ``"B"`` or ``"tie"`` (also when the two positions disagree).
        flipped: The swap changed the verdict (position bias).
    """

    winner: str
    flipped: bool


@dataclass(frozen=True)
class RankVerdict:
    """Group scores asked in the given order and reversed.

    Attributes:
        scores: One score in [0, 1] per answer: the mean of the two orders.
        position_shift: Mean absolute difference of an answer's score between the orders (0: no bias).
    """

    scores: list[float]
    position_shift: float


def _failure_kind(exc: BaseException) -> str:
    """The JudgeError kind of an exception raised by the policy's request."""
    if isinstance(exc, PromptTooLong):
        return "prompt_too_long"
    if isinstance(exc, TimeoutError) or "timeout" in str(exc).lower() or "timed out" in str(exc).lower():
        return "timeout"
    return "down"


class LLMJudge:
    """A judge model behind an OpenAI-compatible endpoint, asked through a policy of this package.

    Args:
        policy: A :class:`~agent_gym.policy.VLLMPolicy` (token-exact; recommended) or
            :class:`~agent_gym.policy.VLLMChatPolicy`, or any object with ``aact`` and ``close_session``.
            Its sampling decides the judge's (temperature 0 and a few hundred ``max_tokens`` suit a judge).
        scale: The (low, high) scores are asked on; verdicts are divided into [0, 1].
        templates: The prompts (:class:`~agent_gym.judges.templates.JudgeTemplates`).
        parse_retries: Requests sent again after a reply that broke the verdict schema (bounded; >= 0).
        cache: A :class:`~agent_gym.judges.cache.VerdictCache` (shared across judges of the same
            fingerprint), True for a new one (the default), False for none.
        name: Names the judge in reports and in the cache key.
    """

    def __init__(self, policy: Any, *, scale: tuple[float, float] = DEFAULT_SCALE,
                 templates: JudgeTemplates | None = None, parse_retries: int = 1,
                 cache: VerdictCache | bool = True, name: str = "judge") -> None:
        if not callable(getattr(policy, "aact", None)):
            raise TypeError(f"policy: expected a policy with aact(), got {type(policy).__name__}")
        if isinstance(parse_retries, bool) or not isinstance(parse_retries, int) or not 0 <= parse_retries <= 3:
            raise ValueError(f"parse_retries: expected an int in [0, 3], got {parse_retries!r}")
        self.policy = policy
        self.scale = (float(scale[0]), float(scale[1]))
        parse_score(f'{{"score": {self.scale[0]!r}}}', self.scale)  # checks the scale itself
        self.templates = templates or JudgeTemplates()
        self.parse_retries = parse_retries
        self.cache: VerdictCache | None = VerdictCache() if cache is True else (
            cache if isinstance(cache, VerdictCache) else None)
        self.name = name
        self._runner: LoopThread | None = None

    @classmethod
    def from_server(cls, servers: Sequence[str] | str, *, tokenizer: Any = None, model: str | None = None,
                    max_tokens: int = 256, timeout: float = 60.0, max_retries: int = 2, chat: bool = False,
                    **kwargs: Any) -> LLMJudge:
        """A judge sampling greedily from ``servers`` (``"HOST:PORT"`` or URLs).

        Args:
            servers: One or several servers of the judge model.
            tokenizer: The judge model's tokenizer (or its path) for token-exact calls through
                ``/v1/completions``; None asks the server's chat route (no tokenizer needed).
            model: The model name to send (None: the server's first).
            max_tokens: The most tokens of a reply.
            timeout: Seconds per request.
            max_retries: Retries of a request after a connection error, a timeout or an HTTP 5xx.
            chat: Ask through ``/v1/chat/completions`` even with a tokenizer.
            **kwargs: :class:`LLMJudge`'s other arguments.
        """
        from agent_gym.policy import ClientOptions, SamplingParams, VLLMChatPolicy, VLLMPolicy

        sampling = SamplingParams(temperature=0.0, max_tokens=max_tokens, logprobs=1)
        options = ClientOptions(timeout=timeout, max_retries=max_retries, backoff=0.2, max_backoff=2.0)
        policy_class = VLLMChatPolicy if chat or tokenizer is None else VLLMPolicy
        policy = policy_class(servers, tokenizer, sampling, model=model, client_options=options)
        return cls(policy, **kwargs)

    # ------------------------------------------------------------------ verdicts

    async def ascore(self, question: str, reference: str, answer: str, log: JudgeLog | None = None) -> float:
        """The pointwise score in [0, 1] of ``answer``.

        Raises:
            JudgeError: No verdict (server down, timeout, unparseable after the bounded retry).
        """
        messages = pointwise_messages(self.templates, self.scale, question, reference, answer)
        key = ("pointwise", question, reference, answer)
        return await self._cached(key, log, lambda: self._ask("pointwise", messages, self._parse_score, log))

    async def acompare(self, question: str, reference: str, answer_a: str, answer_b: str,
                       log: JudgeLog | None = None) -> PairVerdict:
        """Which of two answers is better, asked as (A, B) and as (B, A).

        Raises:
            JudgeError: Either order gave no verdict.
        """
        first = await self._preference(question, reference, answer_a, answer_b, log)
        swapped = await self._preference(question, reference, answer_b, answer_a, log)
        back = {"A": "B", "B": "A", "tie": "tie"}[swapped]
        return PairVerdict(winner=first if first == back else "tie", flipped=first != back)

    async def arank(self, question: str, reference: str, answers: Sequence[str],
                    log: JudgeLog | None = None) -> RankVerdict:
        """One score in [0, 1] per answer of a group, asked in the given order and reversed.

        Raises:
            JudgeError: Either order gave no verdict (or not one score per answer).
        """
        answers = list(answers)
        if not answers:
            return RankVerdict(scores=[], position_shift=0.0)
        forward = await self._ranking(question, reference, answers, log)
        backward = list(reversed(await self._ranking(question, reference, answers[::-1], log)))
        shift = sum(abs(a - b) for a, b in zip(forward, backward, strict=True)) / len(answers)
        return RankVerdict(scores=[(a + b) / 2 for a, b in zip(forward, backward, strict=True)],
                           position_shift=shift)

    def score(self, question: str, reference: str, answer: str, log: JudgeLog | None = None) -> float:
        """Blocking :meth:`ascore` (safe where an event loop runs)."""
        return self.run(self.ascore(question, reference, answer, log))

    def compare(self, question: str, reference: str, answer_a: str, answer_b: str,
                log: JudgeLog | None = None) -> PairVerdict:
        """Blocking :meth:`acompare`."""
        return self.run(self.acompare(question, reference, answer_a, answer_b, log))

    def rank(self, question: str, reference: str, answers: Sequence[str], log: JudgeLog | None = None) -> RankVerdict:
        """Blocking :meth:`arank`."""
        return self.run(self.arank(question, reference, answers, log))

    def run(self, coro: Awaitable[T]) -> T:
        """Run a coroutine of this judge to completion on its own event loop thread (blocking)."""
        if self._runner is None:
            self._runner = LoopThread(f"{self.name}-loop")
        return self._runner.call(coro)  # type: ignore[arg-type]

    def close(self) -> None:
        """Close the policy's connections and stop the judge's loop thread."""
        close = getattr(self.policy, "close", None)
        if callable(close):
            close()
        if self._runner is not None:
            self._runner.stop()
            self._runner = None

    def fingerprint(self) -> str:
        """What distinguishes this judge's verdicts: its name, model, scale and templates."""
        model = getattr(self.policy, "model", None)
        return content_key(self.name, str(model), self.scale, self.templates.fingerprint())

    # ------------------------------------------------------------------ internals

    def _parse_score(self, text: str) -> float:
        return parse_score(text, self.scale)

    async def _preference(self, question: str, reference: str, answer_a: str, answer_b: str,
                          log: JudgeLog | None) -> str:
        messages = pairwise_messages(self.templates, self.scale, question, reference, answer_a, answer_b)
        key = ("pairwise", question, reference, answer_a, answer_b)
        return await self._cached(key, log, lambda: self._ask("pairwise", messages, parse_preference, log))

    async def _ranking(self, question: str, reference: str, answers: list[str], log: JudgeLog | None) -> list[float]:
        messages = ranking_messages(self.templates, self.scale, question, reference, answers)
        key = ("ranking", question, reference, answers)
        count = len(answers)
        return await self._cached(key, log, lambda: self._ask(
            "ranking", messages, lambda text: parse_scores(text, count, self.scale), log))

    async def _cached(self, key: tuple[Any, ...], log: JudgeLog | None,
                      compute: Callable[[], Awaitable[T]]) -> T:
        return await verdict_once(self.cache, content_key(self.fingerprint(), *key), compute, log)

    async def _ask(self, kind: str, messages: list[Message], parse: Callable[[str], T], log: JudgeLog | None) -> T:
        """Send ``messages``, read the reply with ``parse``; one bounded retry after a reply that broke the schema."""
        failure: JudgeError | None = None
        for _ in range(self.parse_retries + 1):
            call = await self._call(kind, messages)
            if log is not None:
                log.calls.append(call)
            if call.failure is not None and call.failure in ("down", "timeout", "prompt_too_long"):
                raise JudgeError(call.failure, call.text or f"the judge's request failed ({call.failure})")
            if call.failure == "truncated":
                failure = JudgeError("truncated", "the verdict was cut at max_tokens")
                continue
            try:
                return parse(call.text)
            except JudgeError as exc:
                call.failure = exc.kind
                failure = exc
        assert failure is not None
        raise failure

    async def _call(self, kind: str, messages: list[Message]) -> JudgeCall:
        """One request; a failed request is a JudgeCall with its failure kind (and the error as its text)."""
        session = f"{self.name}-{uuid.uuid4().hex[:12]}"
        started = time.perf_counter()
        call = JudgeCall(kind=kind, messages=messages)
        try:
            out: PolicyOutput = await self.policy.aact(messages, session_id=session)
        except (AgentGymError, OSError, TimeoutError) as exc:
            call.failure, call.text = _failure_kind(exc), str(exc)[:500]
            call.seconds = time.perf_counter() - started
            return call
        finally:
            close = getattr(self.policy, "close_session", None)
            if callable(close):
                close(session)
        call.seconds = time.perf_counter() - started
        call.text = out.text
        call.prompt_token_ids, call.token_ids, call.logprobs = out.prompt_token_ids, out.token_ids, out.logprobs
        if out.finish_reason == FinishReason.ERROR:
            call.failure, call.text = _failure_kind(RuntimeError(out.error or "")), out.error or "policy error"
        elif out.finish_reason == FinishReason.PROMPT_TRUNCATION:
            call.failure = "prompt_too_long"
        elif out.finish_reason == FinishReason.LENGTH:
            call.failure = "truncated"
        return call
