"""Question sets for ``RAG-v0``: the shipped questions and loaders for common QA formats.

Native task dicts have ``id``, ``question``, ``ground_truth`` (a str, or a list of
aliases) and optionally ``aliases``, ``gold_ids`` / ``gold_titles`` (documents that
support the answer), ``type``, ``hops`` and ``solution``. :func:`load_tasks` reads
them from a JSONL or JSON file or a list, and converts the common formats on the way:

* Search-R1 / FlashRAG style: ``question`` and ``golden_answers`` (a list of aliases);
  also the verl parquet layout with ``reward_model.ground_truth.target``.
* HotpotQA style: ``question``, ``answer`` and ``supporting_facts`` (``[[title, sentence], ...]``
  or ``{"title": [...], "sent_id": [...]}``); the supporting titles become ``gold_titles``
  and, given a corpus, ``gold_ids``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from agent_gym.envs.rag.corpus import Corpus, read_jsonl_records
from agent_gym.errors import CorpusError

__all__ = [
    "DATA_DIR",
    "builtin_corpus_path",
    "builtin_tasks",
    "from_hotpotqa",
    "from_search_r1",
    "load_tasks",
]

DATA_DIR = Path(__file__).parent / "data"
"""Folder of the shipped ``corpus.jsonl`` and ``questions.jsonl``."""


def builtin_corpus_path() -> Path:
    """Path of the shipped corpus (2,024 documents about a generated fictional world)."""
    return DATA_DIR / "corpus.jsonl"


@lru_cache(maxsize=1)
def builtin_tasks() -> tuple[dict[str, Any], ...]:
    """The 640 shipped questions (one shared, read-only tuple)."""
    return tuple(rec for _, rec in read_jsonl_records(DATA_DIR / "questions.jsonl"))


def _title_ids(corpus: Corpus | None) -> dict[str, str]:
    if corpus is None:
        return {}
    out: dict[str, str] = {}
    for doc in corpus:
        out.setdefault(doc.title, doc.id)
    return out


def from_search_r1(record: Mapping[str, Any], index: int = 0) -> dict[str, Any]:
    """A native task from a Search-R1 style record (``question``, ``golden_answers``).

    Raises:
        ValueError: If the record has no question or no answers.
    """
    answers = record.get("golden_answers")
    if answers is None:
        target = ((record.get("reward_model") or {}).get("ground_truth") or {})
        answers = target.get("target") if isinstance(target, Mapping) else None
    if isinstance(answers, str):
        answers = [answers]
    answers = [str(a) for a in (answers or [])]
    question = record.get("question")
    if question is None and isinstance(record.get("extra_info"), Mapping):
        question = record["extra_info"].get("question")
    if not isinstance(question, str) or not question.strip() or not answers:
        raise ValueError(f"record {index}: expected 'question' and a non-empty 'golden_answers', "
                         f"got keys {sorted(map(str, record))}")
    task = {"id": record.get("id", f"q{index}"), "question": question.strip(), "ground_truth": answers[0],
            "aliases": answers, "type": record.get("data_source", "search_r1")}
    for key in ("gold_ids", "gold_titles"):
        if key in record:
            task[key] = list(record[key])
    return task


def from_hotpotqa(record: Mapping[str, Any], index: int = 0, corpus: Corpus | None = None) -> dict[str, Any]:
    """A native task from a HotpotQA style record (``question``, ``answer``, ``supporting_facts``).

    Raises:
        ValueError: If the record has no question or answer.
    """
    question, answer = record.get("question"), record.get("answer")
    if not isinstance(question, str) or not question.strip() or answer is None or str(answer) == "":
        raise ValueError(f"record {index}: expected 'question' and 'answer', got keys {sorted(map(str, record))}")
    facts = record.get("supporting_facts") or []
    if isinstance(facts, Mapping):
        titles = list(facts.get("title", []))
    else:
        titles = [f[0] for f in facts if isinstance(f, (list, tuple)) and f]
    titles = list(dict.fromkeys(str(t) for t in titles))
    task: dict[str, Any] = {"id": record.get("_id", record.get("id", f"q{index}")), "question": question.strip(),
                            "ground_truth": str(answer), "aliases": [str(answer)],
                            "type": record.get("type", "hotpotqa"), "gold_titles": titles}
    by_title = _title_ids(corpus)
    if by_title:
        task["gold_ids"] = [by_title[t] for t in titles if t in by_title]
    return task


def _convert(record: Any, index: int, corpus: Corpus | None, where: str) -> dict[str, Any]:
    if not isinstance(record, Mapping):
        raise CorpusError(f"{where}: expected a JSON object per task, got {type(record).__name__}")
    try:
        if "ground_truth" in record:
            return dict(record)
        if "golden_answers" in record or "reward_model" in record:
            return from_search_r1(record, index)
        if "answer" in record:
            return from_hotpotqa(record, index, corpus)
    except ValueError as exc:
        raise CorpusError(f"{where}: {exc}") from None
    raise CorpusError(f"{where}: expected a task with 'ground_truth', 'golden_answers' (Search-R1) or "
                      f"'answer' (HotpotQA), got keys {sorted(map(str, record))}")


def load_tasks(source: str | os.PathLike[str] | Iterable[Mapping[str, Any]],
               corpus: Corpus | None = None) -> list[dict[str, Any]]:
    """Tasks from a JSONL / JSON file or a list of dicts, in native, Search-R1 or HotpotQA format.

    Args:
        source: A path (``.jsonl``: one object per line; ``.json``: a list) or records.
        corpus: Maps HotpotQA supporting titles to document ids when given.

    Raises:
        CorpusError: For an unreadable file, a broken line or a record of no known format.
    """
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if path.suffix == ".json":
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise CorpusError(f"tasks: cannot read {path} as a JSON list: {exc}") from None
            if not isinstance(data, list):
                raise CorpusError(f"{path}: expected a JSON list of tasks, got {type(data).__name__}")
            return [_convert(r, i, corpus, f"{path}[{i}]") for i, r in enumerate(data)]
        return [_convert(r, i, corpus, f"{path}:{n}") for i, (n, r) in enumerate(read_jsonl_records(path))]
    if isinstance(source, (bytes, Mapping)) or not isinstance(source, Iterable):
        raise TypeError(f"tasks: expected a path or a list of task dicts, got {type(source).__name__}")
    return [_convert(r, i, corpus, f"tasks[{i}]") for i, r in enumerate(source)]
