"""Retrieval quality on a question set: recall@k of gold documents and oracle path success.

:func:`recall_at_k` queries a retriever with each question's text and counts the
questions whose gold document is among the first ``k`` hits (single-hop questions have
one gold document). :func:`path_success` replays each multi-hop question's reference
searches (``task["hops"]``: one query per hop, the second containing the first answer)
and counts the questions whose every hop finds its gold document in the top ``k``.

Example:
    >>> from agent_gym.envs.rag import builtin_tasks, load_corpus, builtin_corpus_path, make_retriever
    >>> bm25 = make_retriever("bm25", load_corpus(builtin_corpus_path()))
    >>> single = [t for t in builtin_tasks() if t["type"] == "single_hop"]
    >>> recall_at_k(bm25, single, ks=(1, 5))  # doctest: +SKIP
    {1: 0.83, 5: 0.99}
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["path_success", "recall_at_k"]


def recall_at_k(retriever: Any, tasks: Iterable[Mapping[str, Any]], ks: Sequence[int] = (1, 5),
                batch_size: int = 64) -> dict[int, float]:
    """Fraction of tasks with all their ``gold_ids`` in the top ``k`` hits for the question text.

    Args:
        retriever: Anything with ``search_batch(queries, k)``.
        tasks: Tasks with ``question`` and ``gold_ids`` (tasks without gold ids are skipped).
        ks: Cut-offs.
        batch_size: Questions per ``search_batch`` call.

    Returns:
        ``{k: recall}`` (0.0 for every k when no task has gold ids).
    """
    chosen = [t for t in tasks if t.get("gold_ids")]
    if not chosen:
        return {k: 0.0 for k in ks}
    depth = max(ks)
    found = {k: 0 for k in ks}
    for start in range(0, len(chosen), batch_size):
        part = chosen[start:start + batch_size]
        results = retriever.search_batch([t["question"] for t in part], depth)
        for task, hits in zip(part, results, strict=True):
            ids = [h.doc_id for h in hits]
            for k in ks:
                if set(task["gold_ids"]) <= set(ids[:k]):
                    found[k] += 1
    return {k: found[k] / len(chosen) for k in ks}


def path_success(retriever: Any, tasks: Iterable[Mapping[str, Any]], k: int = 5) -> float:
    """Fraction of tasks whose every reference hop finds its document in the top ``k``.

    Args:
        retriever: Anything with ``search_batch(queries, k)``.
        tasks: Tasks with ``hops`` (``[{"query", "doc_id"}, ...]``); others are skipped.
        k: Cut-off (the env's default search size is 5).

    Returns:
        The success rate (0.0 when no task has hops).
    """
    chosen = [t for t in tasks if t.get("hops")]
    if not chosen:
        return 0.0
    queries = [hop["query"] for t in chosen for hop in t["hops"]]
    results = retriever.search_batch(queries, k)
    position = 0
    ok = 0
    for task in chosen:
        hops = task["hops"]
        hits = results[position:position + len(hops)]
        position += len(hops)
        ok += all(hop["doc_id"] in {h.doc_id for h in found} for hop, found in zip(hops, hits, strict=True))
    return ok / len(chosen)
