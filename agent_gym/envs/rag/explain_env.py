"""``RAGExplainEnv`` (``agent_gym/RAGExplain-v0``): explain an entity of the RAG world in free text, rubric-judged."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any

from agent_gym.env.grade import Grade
from agent_gym.env.rewards import RewardConfig
from agent_gym.envs.rag.corpus import Corpus
from agent_gym.envs.rag.env import RAGEnv
from agent_gym.envs.rag.explain import SPLITS, explain_tasks, fact_recall
from agent_gym.envs.rag.retrieval import Retriever
from agent_gym.judges.rubric import JudgeCriterion, JudgedEpisode, PointwiseJudge, Rubric, RuleCriterion
from agent_gym.parsers import ParsedResponse, ResponseParser
from agent_gym.tools import DEFAULT_TIME_LIMIT, Tool
from agent_gym.types import EpisodeStatus

__all__ = ["EMBEDDED_JUDGE", "RAGExplainEnv", "explain_rubric", "shared_embedded_judge", "sources_read"]

EMBEDDED_JUDGE = "embedded"
"""The ``judge`` value naming the embedded model, run in-process (the default)."""


@lru_cache(maxsize=1)
def shared_embedded_judge() -> PointwiseJudge:
    """The process's one embedded-model judge (its verdict cache shared by every env of the process)."""
    from agent_gym.judges.probability import embedded_judge

    return embedded_judge()


def sources_read(episode: JudgedEpisode) -> float:
    """The share of the task's gold documents the episode opened (a tool result starting ``doc_id: <id>``)."""
    gold = list(episode.task.get("gold_ids") or [])
    if not gold:
        return 0.0
    opened = {str(m.get("content", "")).split("\n", 1)[0].removeprefix("doc_id: ").strip()
              for m in episode.messages if m.get("role") == "tool"}
    return sum(1 for g in gold if g in opened) / len(gold)


def explain_rubric(judge: PointwiseJudge, *, facts_weight: float = 2.0, judge_weight: float = 1.0,
                   sources_weight: float = 0.1) -> Rubric:
    """The rubric of ``RAGExplain-v0`` (see :class:`RAGExplainEnv`'s Rewards).

    Args:
        judge: The judge of the ``judge`` criterion.
        facts_weight: Weight of ``facts`` (required: an answer stating none of the facts scores 0).
        judge_weight: Weight of ``judge``.
        sources_weight: Weight of the ``sources`` shaping criterion.
    """

    def facts(episode: JudgedEpisode) -> float:
        return fact_recall(episode.answer, episode.task.get("facts") or [])

    return Rubric([
        RuleCriterion("facts", facts, facts_weight, required=True),
        JudgeCriterion("judge", judge, judge_weight),
        RuleCriterion("sources", sources_read, sources_weight, outcome=False),
    ])


class RAGExplainEnv(RAGEnv):
    """Explain an entity of a fictional world from its documents; the free-text answer is graded by a rubric.

    ## Description
    The world and search tools of ``RAG-v0`` (2,024 documents), with 240 explanation questions
    (:mod:`agent_gym.envs.rag.explain`): 60 each about a city, an organisation, a person and an event,
    each asking for several facts of one document ("Describe the city of X: which country is it in,
    which river does it lie on, and when was it founded?"). The reference answer is a sentence, not a
    short string: no exact match can grade it, so a rubric with a judge does. 192 tasks are in the
    ``train`` split, 48 in ``test``.

    ## Action Space
    As ``RAG-v0``: optional ``<think>``, ``<tool_call>`` blocks calling ``search(query, k=5)`` or
    ``open(doc_id)``, or the final ``<answer>...</answer>`` holding the explanation.

    ## Observation Space
    As ``RAG-v0``: the conversation so far, a tuple of ``{"role", "content"}`` dicts.

    ## Rewards
    The answer is scored when the episode ends by :func:`explain_rubric`
    (:class:`~agent_gym.judges.rubric.Rubric`). Outcome (``res_reward`` = ``rewards.correct`` times the
    weighted mean): ``facts`` (weight 2, a rule: the share of the task's ``facts`` the answer states,
    whole words after QA normalisation; *required*: an answer stating none scores 0 whatever the judge
    says, so empty, evasive or echoed answers earn nothing) and ``judge`` (weight 1: the judge's score of
    the answer against the reference). Shaping (``sources``, weight 0.1, paid from the episode's shaping
    budget into ``toolcall_reward``): the share of the gold documents the episode opened. The default
    judge is the embedded model run in this process
    (:class:`~agent_gym.judges.probability.ProbabilityJudge`: its probability of "yes" after a judge
    prompt, calibrated between the reference answer (1) and the empty answer (0)); it needs
    no server and loads on the first judged answer. ``judge="HOST:PORT"`` asks an
    :class:`~agent_gym.judges.llm.LLMJudge` at an OpenAI-compatible server instead. The answering step's
    ``info["rubric"]`` has each criterion's score, the outcome, the shaping and the judge's calls.
    ``toolcall_reward``: as ``RAG-v0``. An episode that ends without an answer is not judged.

    ## Starting State
    As ``RAG-v0``: a task drawn with the env's seeded RNG (or ``options["task"]`` /
    ``options["task_index"]``); ``info`` has ``task``, ``tools``, ``tools_in_prompt``, ``episode_id``,
    ``retrieved_ids`` and ``gold_retrieved``.

    ## Episode End
    Terminated (ENV_DONE) on an ``<answer>``; truncated (MAX_STEPS) after ``max_steps`` messages or by
    the policy output's finish reason. A judge that cannot score (its model does not load or raises, its
    server is down or times out, its verdict does not parse) ends the episode ``JUDGE_ERROR``
    (truncated, ``end_reason`` ``"judge_error"``, ``info["error"]`` saying why) with no outcome: trainer
    adapters and exporters mask it, it is never a zero.

    ## Arguments
    * ``tasks``: path or list of task dicts with ``question``, ``ground_truth`` (the reference text) and
      ``facts`` (a list of facts, each a list of accepted spellings); default: the shipped questions of
      ``split``.
    * ``split``: ``"train"``, ``"test"`` or None (all 240; default).
    * ``judge``: ``"embedded"`` (default), a server ``"HOST:PORT"`` / URL or a list of them, or a judge
      object with ``ascore(question, reference, answer, log)`` (an ``LLMJudge``, a ``ProbabilityJudge``).
    * ``judge_tokenizer``: the server judge's tokenizer directory for token-exact calls (None: the
      server's chat route).
    * ``tools``, ``corpus``, ``retriever``, ``retriever_options``, ``max_k``, ``max_doc_chars``,
      ``max_query_chars``, ``max_tool_output_chars``: as ``RAG-v0``.
    * ``max_steps`` (default 10), ``tools_in_prompt``, ``system_prompt``, ``rewards``, ``parser``,
      ``tool_parser``, ``reasoning_parser``, ``tool_time_limit``, ``max_tool_calls_per_step``,
      ``render_mode``: see :class:`~agent_gym.env.core.AgentEnv`.

    ## Version History
    * v0: initial version. Deterministic with the default local index and the embedded judge.

    Example:
        >>> import gymnasium as gym, agent_gym
        >>> env = gym.make("agent_gym/RAGExplain-v0", split="test")
        >>> obs, info = env.reset(seed=0)
    """

    default_system_prompt = (
        "You answer questions about a document collection. You know nothing about its people, places, "
        "organisations and events: find every fact with the tools. search(query, k) lists matching documents "
        "(doc_id, title, start of the text); open(doc_id) shows a whole document. You may think inside "
        "<think>...</think>. Call tools with <tool_call> blocks. When you know the answer, reply with a short "
        "explanation inside <answer>...</answer>: one or two sentences that state every fact the question asks "
        "for, for example <answer>Paris is the capital of France and lies on the Seine.</answer>"
    )

    def __init__(
        self,
        tasks: str | os.PathLike[str] | Sequence[Mapping[str, Any]] | None = None,
        tools: Sequence[Tool | Callable[..., Any]] | None = None,
        *,
        split: str | None = None,
        judge: str | Sequence[str] | PointwiseJudge = EMBEDDED_JUDGE,
        judge_tokenizer: str | None = None,
        corpus: str | os.PathLike[str] | Iterable[Mapping[str, Any]] | Corpus | None = None,
        retriever: str | Retriever = "bm25",
        retriever_options: Mapping[str, Any] | None = None,
        max_k: int = 10,
        max_doc_chars: int = 4000,
        max_query_chars: int = 1000,
        max_steps: int = 10,
        tools_in_prompt: bool = False,
        system_prompt: str | None = None,
        rewards: RewardConfig | Mapping[str, float] | None = None,
        parser: ResponseParser | str | None = None,
        tool_parser: str | None = None,
        reasoning_parser: str | None = None,
        tool_time_limit: float | None = DEFAULT_TIME_LIMIT,
        max_tool_output_chars: int | None = None,
        max_tool_calls_per_step: int = 8,
        render_mode: str | None = None,
    ) -> None:
        if split is not None and split not in SPLITS:
            raise ValueError(f"split: expected one of {SPLITS} or None, got {split!r}")
        self.split = split
        self._judge_spec: Any = _checked_judge(judge)
        self._judge_tokenizer = judge_tokenizer
        self._judge: PointwiseJudge | None = None
        self._rubric: Rubric | None = None
        self._answer: str | None = None
        super().__init__(tasks, tools, corpus=corpus, retriever=retriever, retriever_options=retriever_options,
                         max_k=max_k, max_doc_chars=max_doc_chars, max_query_chars=max_query_chars,
                         answer_metric="f1", max_steps=max_steps, tools_in_prompt=tools_in_prompt,
                         system_prompt=system_prompt, rewards=rewards, parser=parser, tool_parser=tool_parser,
                         reasoning_parser=reasoning_parser, tool_time_limit=tool_time_limit,
                         max_tool_output_chars=max_tool_output_chars, max_tool_calls_per_step=max_tool_calls_per_step,
                         render_mode=render_mode)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        if isinstance(self._judge_spec, (str, tuple)):
            state["_judge"] = state["_rubric"] = None  # rebuilt from the spec (a server judge holds connections)
        return state

    # ------------------------------------------------------------------ the rubric

    @property
    def judge(self) -> PointwiseJudge:
        """The judge (built from ``judge`` on first use)."""
        if self._judge is None:
            spec = self._judge_spec
            if spec == EMBEDDED_JUDGE:
                self._judge = shared_embedded_judge()
            elif isinstance(spec, (str, tuple)):
                from agent_gym.judges.specs import default_judge

                self._judge = default_judge(list(spec) if isinstance(spec, tuple) else spec,
                                            tokenizer=self._judge_tokenizer)
            else:
                self._judge = spec
        return self._judge

    @property
    def rubric(self) -> Rubric:
        """The rubric grading answers (:func:`explain_rubric` of :attr:`judge`)."""
        if self._rubric is None:
            self._rubric = explain_rubric(self.judge)
        return self._rubric

    # ------------------------------------------------------------------ AgentEnv hooks

    def default_tasks(self) -> tuple[dict[str, Any], ...]:
        """The shipped explanation questions of ``split`` (all 240 when None)."""
        return explain_tasks(self.split)

    def validate_tasks(self, tasks: list[Any]) -> list[dict[str, Any]]:
        """RAG-v0's checks, then: ``ground_truth`` a str and ``facts`` a non-empty list of lists of str."""
        checked = super().validate_tasks(tasks)
        for i, task in enumerate(checked):
            if not isinstance(task["ground_truth"], str):
                raise ValueError(f"tasks[{i}]: expected 'ground_truth' to be the reference answer text, got "
                                 f"{type(task['ground_truth']).__name__}")
            facts = task.get("facts")
            if not isinstance(facts, list) or not facts or not all(
                    isinstance(f, list) and f and all(isinstance(s, str) and s.strip() for s in f) for f in facts):
                raise ValueError(f"tasks[{i}]: expected 'facts' to be a non-empty list of facts, each a list of "
                                 f"accepted spellings, got {facts!r:.80}")
        return checked

    def score_answer(self, task: Mapping[str, Any], answer: str) -> float:
        """The rubric's rule part: the share of the task's facts the answer states (the judge is not asked)."""
        return fact_recall(answer, task.get("facts") or [])

    def oracle_answer(self, task: Mapping[str, Any]) -> str:
        """The reference answer."""
        return str(task["ground_truth"])

    def handle_message(self, parsed: ParsedResponse, info: dict[str, Any]) -> None:
        """An ``<answer>`` ends the episode (the rubric grades it in :meth:`grade_episode`); tool calls run.

        Raises:
            RetrieverError: If a retrieval server failed (not the model's fault).
        """
        if parsed.answer is not None:
            self._answer = parsed.answer
            self.end_episode(EpisodeStatus.ENV_DONE, "answer")
        else:
            self.run_tool_calls(parsed, info)

    def grade_episode(self, status: EpisodeStatus, reason: str, info: dict[str, Any]) -> Grade:
        """Score the answer with the rubric; a judge that could not score ends the episode JUDGE_ERROR."""
        answer, self._answer = self._answer, None
        task = self.task
        if status != EpisodeStatus.ENV_DONE or answer is None or task is None:
            return Grade.ungraded()
        messages = tuple({"role": str(m["role"]), "content": str(m["content"])} for m in self.messages)
        episode = JudgedEpisode(question=str(task["question"]), reference=str(task["ground_truth"]), answer=answer,
                                task=task, messages=messages)
        (score,) = self.rubric.score([episode])
        info["rubric"] = score.info()
        if score.failure is not None or score.outcome is None:
            info["error"] = f"judge failed: {score.failure}"
            return Grade.judge_failure("judge_error")
        info["toolcall_reward"] += self.pay_shaping(score.shaping)
        return Grade.scored(score.outcome)

    def release_episode(self) -> None:
        """Forget the episode's documents and answer."""
        super().release_episode()
        self._answer = None


def _checked_judge(judge: Any) -> Any:
    if isinstance(judge, str):
        if not judge.strip():
            raise ValueError("judge: expected 'embedded', a server HOST:PORT or URL, or a judge object, got ''")
        return judge
    if isinstance(judge, (list, tuple)) and judge and all(isinstance(s, str) and s for s in judge):
        return tuple(judge)
    if callable(getattr(judge, "ascore", None)):
        return judge
    raise TypeError(f"judge: expected 'embedded', a server HOST:PORT or URL (or a list), or an object with "
                    f"ascore(), got {type(judge).__name__}")
