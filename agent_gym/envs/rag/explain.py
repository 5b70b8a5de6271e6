"""Explanation questions about the ``RAG-v0`` world: free-text reference answers, the data of ``RAGExplain-v0``.

Each question asks for a short explanation of one entity of the fictional world (a city, an
organisation, a person or an event) that needs several facts of its document: "Describe the city of
X: which country is it in, which river does it lie on, and when was it founded?". Its reference answer
(``ground_truth``) is a sentence stating them; ``facts`` lists each fact with its accepted spellings
(a river with and without "River", a date as its year), so a rule can check which facts an answer
states. A fact whose words appear in the question is left out (echoing the question states nothing).

Tasks carry a ``split`` (``"train"``: four of five, ``"test"``: every fifth of each kind), the gold
document, and a solution (search for the entity, open its document). Run
``python -m agent_gym.envs.rag.explain --out DIR`` to regenerate the shipped file.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from agent_gym.envs.rag.corpus import read_jsonl_records
from agent_gym.envs.rag.world import SEED, Entity, World, generate_world
from agent_gym.generation import DeterministicRandom
from agent_gym.grading import qa_normalize

__all__ = ["EXPLAIN_PATH", "SPLITS", "explain_tasks", "fact_recall", "generate_explain_tasks", "main",
           "write_explain_tasks"]

EXPLAIN_PATH = Path(__file__).parent / "data" / "explain_questions.jsonl"
"""The shipped explanation questions."""

SPLITS = ("train", "test")
"""The splits of the shipped questions."""

_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")
_PER_KIND = 60


def _date(day: Any) -> str:
    return f"{day.day} {_MONTHS[day.month - 1]} {day.year}"


def _contains(haystack: str, needle: str) -> bool:
    """Whether the normalised words of ``needle`` occur, in order and whole, in those of ``haystack``."""
    words, target = qa_normalize(haystack).split(), qa_normalize(needle).split()
    if not target:
        return False
    width = len(target)
    return any(words[i:i + width] == target for i in range(len(words) - width + 1))


def fact_recall(answer: str, facts: Sequence[Sequence[str]]) -> float:
    """The share of ``facts`` (each a list of accepted spellings) that ``answer`` states, in [0, 1].

    Matching is on whole normalised words (lowercase, no punctuation or articles), so "1834" does not
    match inside "18345" and "Dryrk" matches "the Dryrk River".
    """
    if not facts:
        return 0.0
    return sum(1 for spellings in facts if any(_contains(answer, s) for s in spellings)) / len(facts)


def _task(entity: Entity, kind: str, question: str, reference: str, facts: list[tuple[str, list[str]]],
          query: str) -> dict[str, Any] | None:
    kept = [(label, spellings) for label, spellings in facts
            if not any(_contains(question, s) for s in spellings)]
    if len(kept) < 2:
        return None
    return {"question": question, "ground_truth": reference, "type": kind,
            "facts": [spellings for _, spellings in kept], "fact_names": [label for label, _ in kept],
            "gold_ids": [entity.id], "hops": [{"query": query, "doc_id": entity.id}],
            "solution": [[{"name": "search", "arguments": {"query": query, "k": 5}}],
                         [{"name": "open", "arguments": {"doc_id": entity.id}}]]}


def _city(world: World, by_id: dict[str, Entity], c: Entity) -> dict[str, Any] | None:
    f = c.facts
    country, river = by_id[f["country"]].name, f["river"]
    return _task(c, "city", f"Describe the city of {c.name}: which country is it in, which river does it lie on, "
                 "and when was it founded?",
                 f"{c.name} is a city in {country}. It lies on the {river} and was founded in {f['founded']}.",
                 [("country", [country]), ("river", [river, river.removesuffix(" River")]),
                  ("founded", [str(f["founded"])])], f"{c.name} city")


def _organisation(world: World, by_id: dict[str, Entity], o: Entity) -> dict[str, Any] | None:
    f = o.facts
    hq, founder = by_id[f["hq"]].name, by_id[f["founder"]].name
    return _task(o, "organisation", f"Explain what the {o.name} is: what kind of business, where it is "
                 "headquartered, and who founded it and when.",
                 f"The {o.name} is a {f['industry']} business headquartered in {hq}, founded by {founder} on "
                 f"{_date(f['founded'])}.",
                 [("industry", [f["industry"]]), ("headquarters", [hq]), ("founder", [founder]),
                  ("founded", [str(f["founded"].year)])], o.name)


def _person(world: World, by_id: dict[str, Entity], p: Entity) -> dict[str, Any] | None:
    f = p.facts
    birthplace, employer = by_id[f["birthplace"]].name, by_id[f["employer"]].name
    article = "an" if f["occupation"][0] in "aeiou" else "a"
    return _task(p, "person", f"Who is {p.name}? Explain their occupation, where and when they were born, and "
                 "whom they work for.",
                 f"{p.name} is {article} {f['occupation']}, born in {birthplace} on {_date(f['born'])}, who works "
                 f"for the {employer}.",
                 [("occupation", [f["occupation"]]), ("birthplace", [birthplace]), ("born", [str(f["born"].year)]),
                  ("employer", [employer])], p.name)


def _event(world: World, by_id: dict[str, Entity], e: Entity) -> dict[str, Any] | None:
    f = e.facts
    city, organiser = by_id[f["city"]].name, by_id[f["organiser"]].name
    return _task(e, "event", f"Explain what happened at the {e.name}: when and where it took place, who organised "
                 "it, and how many people it drew.",
                 f"The {e.name} took place in {city} on {_date(f['date'])}. It was organised by the {organiser} "
                 f"and drew about {f['attendance']:,} people.",
                 [("city", [city]), ("date", [str(f["date"].year)]), ("organiser", [organiser]),
                  ("attendance", [f"{f['attendance']:,}", str(f["attendance"])])], e.name)


def generate_explain_tasks(world: World, seed: str = SEED, *, per_kind: int = _PER_KIND) -> list[dict[str, Any]]:
    """``per_kind`` explanation questions for each kind of entity (city, organisation, person, event).

    Entities are drawn without repetition with a seeded generator; every fifth task of a kind is in the
    ``test`` split, the others in ``train``.
    """
    rng = DeterministicRandom(seed + ".explain")
    by_id = {e.id: e for e in world.all()}
    makers = (("city", world.cities, _city), ("organisation", world.organisations, _organisation),
              ("person", world.people, _person), ("event", world.events, _event))
    out: list[dict[str, Any]] = []
    for kind, pool, make in makers:
        made = 0
        for entity in rng.sample(list(pool), len(pool)):
            if made == per_kind:
                break
            task = make(world, by_id, entity)
            if task is None:
                continue
            made += 1
            task["id"] = f"rag-explain-{kind}-{made:03d}"
            task["split"] = "test" if made % 5 == 0 else "train"
            out.append(task)
    return out


def write_explain_tasks(path: str | Path = EXPLAIN_PATH, seed: str = SEED) -> Path:
    """Generate the world of ``seed`` and write its explanation questions to ``path`` (JSONL)."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8") as handle:
        for task in generate_explain_tasks(generate_world(seed), seed):
            handle.write(json.dumps(task, ensure_ascii=False, sort_keys=True) + "\n")
    return out


@lru_cache(maxsize=4)
def explain_tasks(split: str | None = None) -> tuple[dict[str, Any], ...]:
    """The shipped explanation questions (all, or those of ``split``; one shared, read-only tuple).

    Raises:
        ValueError: For a split other than ``"train"``, ``"test"`` or None.
    """
    if split is not None and split not in SPLITS:
        raise ValueError(f"split: expected one of {SPLITS} or None, got {split!r}")
    rows = (rec for _, rec in read_jsonl_records(EXPLAIN_PATH))
    return tuple(r for r in rows if split is None or r["split"] == split)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m agent_gym.envs.rag.explain [--out FILE] [--seed S]``."""
    parser = argparse.ArgumentParser(description="Generate the explanation questions of RAGExplain-v0.")
    parser.add_argument("--out", default=str(EXPLAIN_PATH), help="output JSONL file")
    parser.add_argument("--seed", default=SEED, help="world seed")
    args = parser.parse_args(argv)
    print(f"wrote {write_explain_tasks(args.out, args.seed)}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
