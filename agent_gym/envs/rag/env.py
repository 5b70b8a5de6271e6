"""``RAGEnv`` (``agent_gym/RAG-v0``): answer questions by searching a document collection."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from agent_gym.checks import check_int
from agent_gym.env.core import AgentEnv
from agent_gym.env.rewards import RewardConfig
from agent_gym.envs.rag.corpus import Corpus, load_corpus
from agent_gym.envs.rag.remote import RemoteRetriever
from agent_gym.envs.rag.retrieval import Retriever
from agent_gym.envs.rag.tasks import builtin_corpus_path, builtin_tasks, load_tasks
from agent_gym.errors import RetrieverError
from agent_gym.grading import exact_match, token_f1
from agent_gym.parsers import ParsedResponse, ResponseParser
from agent_gym.tools import DEFAULT_TIME_LIMIT, Tool, ToolResult, as_tool

__all__ = ["RAGEnv", "SearchTools", "make_retriever"]

_KINDS = ("bm25", "dense", "hybrid")


def make_retriever(spec: str | Retriever, corpus: Corpus | None, options: Mapping[str, Any] | None = None) -> Any:
    """A retriever from a name, a URL or an instance.

    Args:
        spec: ``"bm25"``, ``"dense"``, ``"hybrid"`` (an index over ``corpus``, shared by the
            process and cached on disk), ``"http(s)://host:port/retrieve"`` (a
            :class:`~agent_gym.envs.rag.remote.RemoteRetriever`) or an object with ``search``.
        corpus: The documents (needed for the local kinds).
        options: Keyword arguments of the retriever class.

    Raises:
        ValueError: For an unknown name, or a local kind without a corpus.
        MissingExtraError: If the retriever's optional packages are missing.
    """
    options = dict(options or {})
    if not isinstance(spec, str):
        if not callable(getattr(spec, "search", None)):
            raise TypeError(f"retriever: expected one of {_KINDS}, a URL or an object with search(query, k), "
                            f"got {type(spec).__name__}")
        return spec
    if spec.startswith(("http://", "https://")):
        return RemoteRetriever(spec, **options)
    if spec not in _KINDS:
        raise ValueError(f"retriever: expected one of {_KINDS} or an http(s) URL, got {spec!r}")
    if corpus is None:
        raise ValueError(f"retriever {spec!r} needs a corpus, got None")
    from agent_gym.envs.rag.retrieval import BM25Retriever, shared_retriever

    if spec == "bm25":
        return shared_retriever(BM25Retriever, corpus, options)
    from agent_gym.envs.rag.dense import DenseRetriever, HybridRetriever

    return shared_retriever(DenseRetriever if spec == "dense" else HybridRetriever, corpus, options)


def _clean_query(query: str, limit: int) -> str:
    text = "".join(ch if ch.isprintable() else " " for ch in query)
    text = " ".join(text.split())
    if not text:
        raise ValueError("query: expected a non-empty search query of words, got only blanks or control characters")
    if len(text) > limit:
        raise ValueError(f"query: expected at most {limit} characters, got {len(text)}; search with a few keywords")
    return text


class SearchTools:
    """The ``search`` and ``open`` tools of one env, bound to its retriever.

    Records which documents each episode saw, and holds back a retriever failure so that it
    reaches ``env.step`` as an exception (an infrastructure error, not the model's).

    Args:
        retriever: The retriever.
        max_k: Largest ``k`` the model may ask for.
        max_doc_chars: Characters of a document shown by ``open`` before the cut marker.
        max_query_chars: Longest query accepted.
    """

    def __init__(self, retriever: Any, *, max_k: int = 10, max_doc_chars: int = 4000,
                 max_query_chars: int = 1000) -> None:
        self.retriever = retriever
        self.max_k = check_int("max_k", max_k, low=1, high=100)
        self.max_doc_chars = check_int("max_doc_chars", max_doc_chars, low=100)
        self.max_query_chars = check_int("max_query_chars", max_query_chars, low=10)
        self.retrieved: list[str] = []
        self.opened: list[str] = []
        self.failure: RetrieverError | None = None

    def clear(self) -> None:
        """Forget what the last episode saw."""
        self.retrieved, self.opened, self.failure = [], [], None

    def search(self, query: str, k: int = 5) -> str:
        """Search the document collection.

        Args:
            query: A few keywords or a question.
            k: Number of results, from 1 to the env's max_k (default 5).

        Returns:
            The best matching documents: id, title and the start of the text of each.
        """
        if not 1 <= k <= self.max_k:
            raise ValueError(f"k: expected an int from 1 to {self.max_k}, got {k}")
        text = _clean_query(query, self.max_query_chars)
        try:
            hits = self.retriever.search(text, k)
        except RetrieverError as exc:
            self.failure = exc
            raise
        if not hits:
            return f"No documents match {text!r}. Try other keywords."
        lines = []
        for rank, hit in enumerate(hits, start=1):
            if hit.doc_id not in self.retrieved:
                self.retrieved.append(hit.doc_id)
            lines.append(f"[{rank}] doc_id: {hit.doc_id} | title: {hit.title}\n{hit.snippet}")
        return "\n\n".join(lines)

    def open(self, doc_id: str) -> str:
        """Read a whole document.

        Args:
            doc_id: The id of a document, as shown in search results.

        Returns:
            The document's title and full text.
        """
        key = str(doc_id).strip()
        try:
            doc = self.retriever.document(key) if key else None
        except RetrieverError as exc:
            self.failure = exc
            raise
        if doc is None:
            raise ValueError(f"unknown doc_id {key[:80]!r}; use a doc_id from the search results")
        if doc.id not in self.opened:
            self.opened.append(doc.id)
        text = doc.text
        if len(text) > self.max_doc_chars:
            cut = len(text) - self.max_doc_chars
            text = f"{text[: self.max_doc_chars]}\n[document truncated: {cut} more characters]"
        return f"doc_id: {doc.id}\ntitle: {doc.title}\n\n{text}"


class _ServiceTool:
    """A tool whose retriever failures escape ``run`` (every other error stays an observation)."""

    def __init__(self, inner: Tool, box: SearchTools) -> None:
        self._inner, self._box = inner, box

    @property
    def name(self) -> str:
        return self._inner.name

    @property
    def schema(self) -> dict[str, Any]:
        return self._inner.schema

    def run(self, arguments: Mapping[str, Any]) -> ToolResult:
        self._box.failure = None
        result = self._inner.run(arguments)
        if self._box.failure is not None:
            failure, self._box.failure = self._box.failure, None
            raise failure
        return result


def _golds(task: Mapping[str, Any]) -> list[str]:
    truth = task["ground_truth"]
    golds = [str(g) for g in truth] if isinstance(truth, (list, tuple)) else [str(truth)]
    golds += [str(a) for a in task.get("aliases") or []]
    return list(dict.fromkeys(golds))


class RAGEnv(AgentEnv):
    """Answer questions with a search engine over a document collection.

    ## Description
    The shipped data is an encyclopedia of a generated fictional world (2,024 documents:
    countries, cities, organisations, people, events) and 640 questions about it: 200
    single-hop, 200 two-hop (the first answer is the second query), 120 comparison and
    120 date questions. No answer can come from a model's memory; each is stated in the
    question's gold documents. See :mod:`agent_gym.envs.rag.world`.

    ## Action Space
    The next assistant message (``str`` or ``PolicyOutput``): optional ``<think>...</think>``,
    then ``<tool_call>`` blocks calling ``search(query, k=5)`` or ``open(doc_id)``, or the
    final ``<answer>...</answer>``.

    ## Observation Space
    The conversation so far, a tuple of ``{"role", "content"}`` dicts. ``search`` returns
    ranked ``doc_id``, title and snippet lines; ``open`` the full document (cut at
    ``max_doc_chars`` with a marker). Bad queries (empty, control characters only, over
    ``max_query_chars``), ``k`` outside ``[1, max_k]`` and unknown ids give error observations.

    ## Rewards
    ``res_reward``: exact match (``answer_metric="em"``, default) or token F1 (``"f1"``) of
    the text inside the final message's ``<answer>``, after QA normalisation (lowercase, no
    punctuation or articles, single spaces), maximised over every alias of the ground truth.
    Only the assistant's answering message is read. ``toolcall_reward``: +0.1 for a step
    with a useful well-formed call, -0.1 per failed call or a message with no call and no
    answer, paid from the episode's shaping budget (the bonuses of an episode sum to at most
    ``bonus_cap``, its penalties to at most ``penalty_cap``: see
    :class:`~agent_gym.env.rewards.RewardConfig`). The answering step's ``info`` has
    ``em`` and ``f1``; every step's ``info`` has ``retrieved_ids`` (documents returned by
    searches so far) and ``gold_retrieved`` (whether all of the task's ``gold_ids`` are
    among them; None for a task without gold ids).

    ## Starting State
    A task drawn with the env's seeded RNG (or ``options["task"]``, checked like constructor tasks,
    or ``options["task_index"]``); the documents retrieved in the last episode are forgotten. The
    observation is the system message and the question as a user message; ``info`` has ``task``,
    ``tools`` (the ``search`` and ``open`` schemas; ``[]`` when ``tools_in_prompt``),
    ``tools_in_prompt``, ``episode_id``, ``retrieved_ids`` (``[]``) and ``gold_retrieved``.

    ## Episode End
    Terminated (ENV_DONE) on an ``<answer>``; truncated (MAX_STEPS) after ``max_steps``
    messages (default 10, the only step limit) or by the policy output's finish reason; the
    last step's ``info`` has ``status`` and ``end_reason``. A retrieval server that fails
    (after its retries) raises :class:`~agent_gym.envs.rag.remote.RetrieverError` naming it
    out of ``step``: rollouts record that episode as ENV_ERROR.

    ## Arguments
    * ``corpus``: JSONL path, list of ``{"id", "title", "text"}`` dicts or a ``Corpus``
      (default: the shipped corpus).
    * ``tasks``: path (JSONL / JSON) or list of task dicts, native, Search-R1 style
      (``golden_answers``) or HotpotQA style (``answer``, ``supporting_facts``); default:
      the shipped questions.
    * ``tools``: tools or plain callables replacing ``search`` and ``open`` (default: both, bound
      to the retriever).
    * ``retriever``: ``"bm25"`` (default), ``"dense"``, ``"hybrid"``, a server URL
      ``"http://host:port/retrieve"`` or a retriever object. ``retriever_options``: its
      keyword arguments (e.g. ``{"model": ...}`` for dense, ``{"timeout": 5}`` for a URL).
    * ``max_k`` (10), ``max_doc_chars`` (4000), ``max_query_chars`` (1000), ``answer_metric``.
    * ``max_tool_output_chars``: default ``max(8192, max_doc_chars + 1000)``.
    * ``max_steps`` (default 10), ``tools_in_prompt``, ``system_prompt``, ``rewards``, ``parser``,
      ``tool_parser``, ``reasoning_parser`` (the model's formats by vLLM's names),
      ``tool_time_limit``, ``max_tool_calls_per_step``, ``render_mode``: see
      :class:`~agent_gym.env.core.AgentEnv`.

    ## Version History
    * v0: one step limit (``max_steps``), ``info["end_reason"]``; initial version. Registered
      as deterministic (local index); with a retrieval server the episodes depend on that server.

    Example:
        >>> import gymnasium as gym, agent_gym
        >>> env = gym.make("agent_gym/RAG-v0")
        >>> obs, info = env.reset(seed=0)
        >>> obs, reward, terminated, truncated, info = env.step(env.unwrapped.oracle_action())
    """

    default_system_prompt = (
        "You answer questions about a document collection. You know nothing about its people, places, "
        "organisations and events: find every fact with the tools. search(query, k) lists matching documents "
        "(doc_id, title, start of the text); open(doc_id) shows a whole document. Questions may need several "
        "searches, one per entity. You may think inside <think>...</think>. Call tools with <tool_call> blocks. "
        "When you know the answer, reply with only the answer inside <answer>...</answer>, "
        "for example <answer>Paris</answer>."
    )

    def __init__(
        self,
        tasks: str | os.PathLike[str] | Sequence[Mapping[str, Any]] | None = None,
        tools: Sequence[Tool | Callable[..., Any]] | None = None,
        *,
        corpus: str | os.PathLike[str] | Iterable[Mapping[str, Any]] | Corpus | None = None,
        retriever: str | Retriever = "bm25",
        retriever_options: Mapping[str, Any] | None = None,
        max_k: int = 10,
        max_doc_chars: int = 4000,
        max_query_chars: int = 1000,
        answer_metric: str = "em",
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
        if answer_metric not in ("em", "f1"):
            raise ValueError(f"answer_metric: expected 'em' or 'f1', got {answer_metric!r}")
        self.answer_metric = answer_metric
        remote = isinstance(retriever, str) and retriever.startswith(("http://", "https://"))
        if corpus is None and not remote:
            corpus = builtin_corpus_path()
        self.corpus: Corpus | None = None if corpus is None else load_corpus(corpus)
        self.retriever = make_retriever(retriever, self.corpus, retriever_options)
        self.search_tools = SearchTools(self.retriever, max_k=max_k, max_doc_chars=max_doc_chars,
                                        max_query_chars=max_query_chars)
        if tasks is not None and not (isinstance(tasks, tuple) and tasks is builtin_tasks()):
            tasks = load_tasks(tasks, self.corpus)
        self._answer_scores: dict[str, float] = {}  # em and f1 of the answer being scored
        if max_tool_output_chars is None:
            max_tool_output_chars = max(8192, max_doc_chars + 1000)
        super().__init__(tasks, tools, max_steps=max_steps, tools_in_prompt=tools_in_prompt,
                         system_prompt=system_prompt, rewards=rewards, parser=parser,
                         tool_parser=tool_parser, reasoning_parser=reasoning_parser, tool_time_limit=tool_time_limit,
                         max_tool_output_chars=max_tool_output_chars, max_tool_calls_per_step=max_tool_calls_per_step,
                         render_mode=render_mode)

    # ------------------------------------------------------------------ AgentEnv hooks

    def default_tasks(self) -> tuple[dict[str, Any], ...]:
        """The 640 shipped questions."""
        return builtin_tasks()

    def default_tools(self) -> Sequence[Tool]:
        """``search`` and ``open`` bound to this env's retriever."""
        box = self.search_tools
        return [_ServiceTool(as_tool(fn, time_limit=None, max_output_chars=self.max_tool_output_chars), box)
                for fn in (box.search, box.open)]

    def validate_tasks(self, tasks: list[Any]) -> list[dict[str, Any]]:
        """The common checks, then: ``ground_truth`` a str or a non-empty list, ``gold_ids`` a list of str."""
        checked = super().validate_tasks(tasks)
        for i, task in enumerate(checked):
            truth = task["ground_truth"]
            if isinstance(truth, (list, tuple)) and (not truth or not all(isinstance(t, (str, int)) for t in truth)):
                raise ValueError(f"tasks[{i}]: expected 'ground_truth' to be a str or a non-empty list of "
                                 f"aliases, got {truth!r:.80}")
            gold = task.get("gold_ids")
            if gold is not None and (not isinstance(gold, list) or not all(isinstance(g, str) for g in gold)):
                raise ValueError(f"tasks[{i}]: expected 'gold_ids' to be a list of document ids, got {gold!r:.80}")
        return checked

    def score_answer(self, task: Mapping[str, Any], answer: str) -> float:
        """Exact match or token F1 (``answer_metric``) against every alias; both go to ``info``."""
        golds = _golds(task)
        em, f1 = exact_match(answer, golds), token_f1(answer, golds)
        self._answer_scores.update(em=em, f1=f1)
        return em if self.answer_metric == "em" else f1

    def oracle_answer(self, task: Mapping[str, Any]) -> str:
        """The first alias of the ground truth."""
        return _golds(task)[0]

    def handle_message(self, parsed: ParsedResponse, info: dict[str, Any]) -> None:
        """Act as :class:`AgentEnv` does; an answer's ``em`` and ``f1`` go to ``info``.

        Raises:
            RetrieverError: If a retrieval server failed (not the model's fault).
        """
        self._answer_scores.clear()
        super().handle_message(parsed, info)
        info.update(self._answer_scores)

    def episode_info(self) -> dict[str, Any]:
        """``retrieved_ids`` (documents returned by searches so far) and ``gold_retrieved``."""
        retrieved = list(self.search_tools.retrieved)
        gold = (self.task or {}).get("gold_ids")
        return {"retrieved_ids": retrieved, "gold_retrieved": None if not gold else set(gold) <= set(retrieved)}

    def release_episode(self) -> None:
        """Forget the documents the episode saw."""
        self.search_tools.clear()
        self._answer_scores.clear()

    def close(self) -> None:
        """Close a retrieval server's connection pool, if any."""
        closer = getattr(self.retriever, "close", None)
        if isinstance(self.retriever, RemoteRetriever) and callable(closer):
            closer()
        super().close()
