"""``ProbabilityJudge``: a judge read from a local model's verdict probabilities, in-process and offline.

An :class:`~agent_gym.judges.llm.LLMJudge` asks a server for a written verdict and parses it; a small
model rarely writes one that parses. This judge never samples: it runs the judge prompt through a
``transformers`` causal LM in this process and reads the probability the model gives each verdict word
after it (the sum of the word's token log-probabilities, the words scored together in one batched
forward pass). A verdict therefore always exists; there is nothing to parse.

* **Pointwise** (:meth:`ProbabilityJudge.ascore`): ``p(answer)`` = P("yes") / (P("yes") + P("no")) after
  "is the candidate answer correct?". With ``anchored=True`` (the default) the score is calibrated
  between two anchors the judge is also asked about, the reference answer itself (1) and the empty
  answer (0): ``(p(answer) - p("")) / (p(reference) - p(""))``, clipped to [0, 1]. The reference always
  scores 1, an empty (or blank) answer 0, and a weak judge's overall lean towards "yes" or "no" cancels out. Where
  the judge rates the empty answer at least as high as the reference (it cannot tell them apart on
  that task), an answer scores 1 when ``p(answer) >= p(reference)``, else 0. The two anchors cost two
  forward passes per task (cached), each further answer one. ``anchored=False`` returns ``p(answer)``.
* **Pairwise** (:meth:`ProbabilityJudge.acompare`): P("A") against P("B") after "which answer agrees
  better with the reference?", asked in both orders, as :class:`~agent_gym.judges.llm.PairVerdict`.

The model is loaded once per process and path (on the first verdict, not when the judge is built:
importing or pickling a judge loads nothing) and shared by every judge of that path. Verdicts are
cached by content (:class:`~agent_gym.judges.cache.VerdictCache`). A model that does not load, a
forward pass that raises, or a prompt longer than the model's context is a
:class:`~agent_gym.errors.JudgeError` (``down`` / ``prompt_too_long``): the episode ends
``JUDGE_ERROR``, never with a zero. Every forward pass is recorded as a
:class:`~agent_gym.judges.llm.JudgeCall` (prompt ids, the likelier verdict's ids and log-probabilities).
"""

from __future__ import annotations

import asyncio
import math
import os
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from agent_gym.errors import JudgeError
from agent_gym.judges.cache import VerdictCache, content_key, verdict_once
from agent_gym.judges.llm import JudgeCall, JudgeLog, PairVerdict
from agent_gym.types import Message
from agent_gym.utils.runtime import LoopThread

__all__ = ["EMBEDDED_TEMPLATES", "ProbabilityJudge", "ProbabilityTemplates", "anchored_score", "embedded_judge",
           "loaded_judge_model"]

T = TypeVar("T")

_SYSTEM = (
    "You are a strict grader. You compare a candidate answer with the reference answer of a question. "
    "An answer is correct only if it states what the reference states. An empty answer, an answer that only "
    "repeats the question and an answer that says it does not know are not correct."
)
_POINTWISE = (
    "Question:\n{question}\n\nReference answer:\n{reference}\n\nCandidate answer:\n{answer}\n\n"
    "Is the candidate answer correct? Reply with yes or no."
)
_PAIRWISE = (
    "Question:\n{question}\n\nReference answer:\n{reference}\n\nAnswer A:\n{answer_a}\n\nAnswer B:\n{answer_b}\n\n"
    "Which answer agrees better with the reference? Reply with A or B."
)


@dataclass(frozen=True)
class ProbabilityTemplates:
    """The prompts and verdict words of a :class:`ProbabilityJudge`.

    Attributes:
        system: The system message.
        pointwise: ``{question}``, ``{reference}``, ``{answer}``.
        pairwise: ``{question}``, ``{reference}``, ``{answer_a}``, ``{answer_b}``.
        prefill: Text the assistant's turn starts with before the verdict word (e.g. ``"<answer>"`` for a
            model trained to answer inside answer tags).
        yes_no: The pointwise verdict words (correct, wrong).
        a_b: The pairwise verdict words (first answer, second answer).
    """

    system: str = _SYSTEM
    pointwise: str = _POINTWISE
    pairwise: str = _PAIRWISE
    prefill: str = ""
    yes_no: tuple[str, str] = ("yes", "no")
    a_b: tuple[str, str] = ("A", "B")

    def fingerprint(self) -> str:
        """Text that changes whenever a template or a verdict word does (part of the cache key)."""
        return "\x1f".join((self.system, self.pointwise, self.pairwise, self.prefill, *self.yes_no, *self.a_b))


EMBEDDED_TEMPLATES = ProbabilityTemplates(prefill="<answer>")
"""The embedded model's templates: the verdict word comes where the model was trained to write its answer."""


@dataclass
class _Loaded:
    model: Any
    tokenizer: Any
    max_tokens: int


_MODELS: dict[str, _Loaded] = {}
_PROMPT_ROOM = 768  # tokens of the context kept for the template, question and reference
_LOAD_LOCK = threading.Lock()
_RUN_LOCK = threading.Lock()


def loaded_judge_model(path: str | os.PathLike[str]) -> tuple[Any, Any]:
    """``(model, tokenizer)`` of the causal LM at ``path``, loaded once per process (float32, eval mode, CPU).

    Raises:
        JudgeError: ``down`` when the model or its tokenizer does not load.
    """
    loaded = _load(str(path))
    return loaded.model, loaded.tokenizer


def _load(path: str) -> _Loaded:
    with _LOAD_LOCK:
        if path in _MODELS:
            return _MODELS[path]
        try:
            import torch
            from transformers import AutoModelForCausalLM, AutoTokenizer

            model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
            tokenizer = AutoTokenizer.from_pretrained(path)
        except Exception as exc:  # any failure to load is the judge being unavailable, never a score
            reason = f"the judge model at {path} did not load: {type(exc).__name__}: {exc}"
            raise JudgeError("down", reason[:600]) from exc
        limit = int(getattr(model.config, "max_position_embeddings", 0) or 2048)
        _MODELS[path] = _Loaded(model, tokenizer, limit)
        return _MODELS[path]


def _default_path() -> str:
    from agent_gym.models.tiny import default_model_path

    return str(default_model_path())


class ProbabilityJudge:
    """A judge scored by a local model's verdict-word probabilities (see the module doc).

    Args:
        model_path: Directory of a ``transformers`` causal LM with its tokenizer (default: the embedded
            model, :func:`~agent_gym.models.tiny.default_model_path`).
        templates: Prompts and verdict words.
        anchored: Score between the reference answer (1) and the empty answer (0) (default True).
        max_answer_chars: Characters of each answer shown to the judge; a longer answer (or one of more
            tokens than the model's context leaves for it) is cut with a marker (the rest of a rubric still
            reads the whole answer).
        cache: A :class:`~agent_gym.judges.cache.VerdictCache`, True for a new one, False for none.
        name: Names the judge in reports and the cache key.
    """

    def __init__(self, model_path: str | os.PathLike[str] | None = None, *,
                 templates: ProbabilityTemplates | None = None, anchored: bool = True, max_answer_chars: int = 1500,
                 cache: VerdictCache | bool = True, name: str = "probability-judge") -> None:
        if isinstance(max_answer_chars, bool) or not isinstance(max_answer_chars, int) or max_answer_chars < 1:
            raise ValueError(f"max_answer_chars: expected an int >= 1, got {max_answer_chars!r}")
        self.model_path = str(model_path) if model_path is not None else None
        self.templates = templates or ProbabilityTemplates()
        for words in (self.templates.yes_no, self.templates.a_b):
            if len(words) != 2 or words[0] == words[1] or not all(isinstance(w, str) and w for w in words):
                raise ValueError(f"verdict words: expected two different non-empty words, got {words!r}")
        self.anchored = bool(anchored)
        self.max_answer_chars = max_answer_chars
        self.cache: VerdictCache | None = VerdictCache() if cache is True else (
            cache if isinstance(cache, VerdictCache) else None)
        self.name = name
        self._runner: LoopThread | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_runner"] = None  # a thread does not pickle; a copy starts its own on demand
        return state

    @property
    def path(self) -> str:
        """The model directory (the embedded model's when none was given)."""
        return self.model_path if self.model_path is not None else _default_path()

    # ------------------------------------------------------------------ verdicts

    async def ascore(self, question: str, reference: str, answer: str, log: JudgeLog | None = None) -> float:
        """The score in [0, 1] of ``answer`` (see the module doc).

        Raises:
            JudgeError: The model did not load or run, or the prompt is longer than its context.
        """
        p_answer = await self._belief(question, reference, answer, log)
        if not self.anchored:
            return p_answer
        if answer == reference:
            return 1.0  # an anchor scores what it anchors
        if not answer.strip():
            return 0.0
        p_reference = await self._belief(question, reference, reference, log)
        p_empty = await self._belief(question, reference, "", log)
        return anchored_score(p_answer, p_reference, p_empty)

    async def acompare(self, question: str, reference: str, answer_a: str, answer_b: str,
                       log: JudgeLog | None = None) -> PairVerdict:
        """Which of two answers is better, asked as (A, B) and as (B, A).

        Raises:
            JudgeError: The model did not load or run, or a prompt is too long.
        """
        first = await self._preference(question, reference, answer_a, answer_b, log)
        swapped = await self._preference(question, reference, answer_b, answer_a, log)
        back = {"A": "B", "B": "A"}[swapped]
        return PairVerdict(winner=first if first == back else "tie", flipped=first != back)

    def score(self, question: str, reference: str, answer: str, log: JudgeLog | None = None) -> float:
        """Blocking :meth:`ascore` (safe where an event loop runs)."""
        return self.run(self.ascore(question, reference, answer, log))

    def compare(self, question: str, reference: str, answer_a: str, answer_b: str,
                log: JudgeLog | None = None) -> PairVerdict:
        """Blocking :meth:`acompare`."""
        return self.run(self.acompare(question, reference, answer_a, answer_b, log))

    def run(self, coro: Awaitable[T]) -> T:
        """Run a coroutine of this judge to completion on its own event loop thread (blocking)."""
        if self._runner is None:
            self._runner = LoopThread(f"{self.name}-loop")
        return self._runner.call(coro)  # type: ignore[arg-type]

    def close(self) -> None:
        """Stop the judge's loop thread (the shared model stays loaded for the process)."""
        if self._runner is not None:
            self._runner.stop()
            self._runner = None

    def fingerprint(self) -> str:
        """What distinguishes this judge's verdicts: name, model directory, anchoring, templates."""
        return content_key(self.name, self.path, "probability", self.anchored, self.max_answer_chars,
                           self.templates.fingerprint())

    # ------------------------------------------------------------------ internals

    def _shown(self, answer: str, share: int = 1) -> str:
        """``answer`` as the judge sees it, cut with a marker where it is too long.

        Cut at ``max_answer_chars`` characters and at a token budget (a ``share`` of the context left
        after ``_PROMPT_ROOM`` tokens), so that no answer a policy writes makes the prompt too long.
        """
        loaded = _load(self.path)
        text = answer[: self.max_answer_chars]
        ids = list(loaded.tokenizer.encode(text, add_special_tokens=False))
        budget = max(32, (loaded.max_tokens - _PROMPT_ROOM) // share)
        if len(ids) > budget:
            text = str(loaded.tokenizer.decode(ids[:budget]))
        if len(text) < len(answer):
            text += f"\n[answer cut: {len(answer) - len(text)} more characters]"
        return text

    async def _belief(self, question: str, reference: str, answer: str, log: JudgeLog | None) -> float:
        t = self.templates
        user = t.pointwise.format(question=question, reference=reference, answer=self._shown(answer))
        messages: list[Message] = [{"role": "system", "content": t.system}, {"role": "user", "content": user}]
        key = ("pointwise-probability", question, reference, answer)
        probs = await self._cached(key, log, lambda: self._verdict("pointwise", messages, t.yes_no, log))
        return probs[0]

    async def _preference(self, question: str, reference: str, answer_a: str, answer_b: str,
                          log: JudgeLog | None) -> str:
        t = self.templates
        user = t.pairwise.format(question=question, reference=reference, answer_a=self._shown(answer_a, 2),
                                 answer_b=self._shown(answer_b, 2))
        messages: list[Message] = [{"role": "system", "content": t.system}, {"role": "user", "content": user}]
        key = ("pairwise-probability", question, reference, answer_a, answer_b)
        probs = await self._cached(key, log, lambda: self._verdict("pairwise", messages, t.a_b, log))
        return "A" if probs[0] >= probs[1] else "B"

    async def _cached(self, key: tuple[Any, ...], log: JudgeLog | None,
                      compute: Callable[[], Awaitable[T]]) -> T:
        return await verdict_once(self.cache, content_key(self.fingerprint(), *key), compute, log)

    async def _verdict(self, kind: str, messages: list[Message], words: tuple[str, str],
                       log: JudgeLog | None) -> tuple[float, float]:
        """The two verdict words' probabilities (normalised over the pair) after ``messages``; one call recorded."""
        call = JudgeCall(kind=kind, messages=messages)
        if log is not None:
            log.calls.append(call)
        started = time.perf_counter()
        try:
            return await asyncio.to_thread(self._forward, messages, words, call)
        except JudgeError as exc:
            call.failure, call.text = exc.kind, str(exc)[:500]
            raise
        except Exception as exc:  # a model that raises is an unavailable judge, never a score
            call.failure, call.text = "down", f"{type(exc).__name__}: {exc}"[:500]
            raise JudgeError("down", f"the judge model raised {type(exc).__name__}: {exc}"[:600]) from exc
        finally:
            call.seconds = time.perf_counter() - started

    def _forward(self, messages: list[Message], words: tuple[str, str], call: JudgeCall) -> tuple[float, float]:
        loaded = _load(self.path)
        prompt_ids = _prompt_ids(loaded.tokenizer, messages, self.templates.prefill)
        word_ids = [list(loaded.tokenizer.encode(w, add_special_tokens=False)) for w in words]
        if not all(word_ids) or word_ids[0] == word_ids[1]:
            raise JudgeError("schema", f"the verdict words {words!r} do not encode to two different token sequences")
        longest = len(prompt_ids) + max(len(w) for w in word_ids)
        if longest > loaded.max_tokens:
            raise JudgeError("prompt_too_long", f"the judge prompt has {len(prompt_ids)} tokens; the model's "
                                                f"context is {loaded.max_tokens}")
        per_token = _sequence_logprobs(loaded.model, prompt_ids, word_ids)
        logprobs = [sum(tokens) for tokens in per_token]
        best = 0 if logprobs[0] >= logprobs[1] else 1
        top = max(logprobs)
        weights = [math.exp(lp - top) for lp in logprobs]
        total = sum(weights)
        call.prompt_token_ids = list(prompt_ids)
        call.token_ids = list(word_ids[best])
        call.logprobs = per_token[best]
        call.text = words[best]
        return weights[0] / total, weights[1] / total


def anchored_score(p_answer: float, p_reference: float, p_empty: float) -> float:
    """The answer's score between the anchors: the reference's belief is 1, the empty answer's 0 (see module doc)."""
    if p_reference <= p_empty:
        return 1.0 if p_answer >= p_reference else 0.0
    return min(1.0, max(0.0, (p_answer - p_empty) / (p_reference - p_empty)))


def _prompt_ids(tokenizer: Any, messages: Sequence[Message], prefill: str) -> list[int]:
    if getattr(tokenizer, "chat_template", None):
        text = tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
    else:
        text = "".join(f"{m['role']}: {m['content']}\n\n" for m in messages) + "assistant: "
    return list(tokenizer.encode(str(text) + prefill, add_special_tokens=False))


def _sequence_logprobs(model: Any, prompt: list[int], continuations: list[list[int]]) -> list[list[float]]:
    """Each continuation's per-token log-probabilities after ``prompt``: one batched forward pass (right-padded)."""
    import torch

    rows = [prompt + c for c in continuations]
    width = max(len(r) for r in rows)
    ids = torch.zeros((len(rows), width), dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(row)
        mask[i, : len(row)] = 1
    with _RUN_LOCK, torch.inference_mode():
        logits = model(input_ids=ids, attention_mask=mask).logits.float()
    out = []
    for i, continuation in enumerate(continuations):
        positions = torch.arange(len(prompt) - 1, len(prompt) - 1 + len(continuation))
        step = torch.log_softmax(logits[i, positions], dim=-1)
        out.append([float(v) for v in step[torch.arange(len(continuation)), torch.tensor(continuation)]])
    return out


def embedded_judge(*, anchored: bool = True, cache: VerdictCache | bool = True) -> ProbabilityJudge:
    """A :class:`ProbabilityJudge` of the embedded default model (:func:`~agent_gym.models.tiny.default_model_path`).

    Offline and in-process: nothing to serve, the model (about 7 MB) loads on the first verdict.

    Args:
        anchored: Score between the reference and the empty answer (see the module doc).
        cache: The verdict cache (True: a new one).
    """
    return ProbabilityJudge(None, templates=EMBEDDED_TEMPLATES, anchored=anchored, cache=cache, name="embedded-judge")
