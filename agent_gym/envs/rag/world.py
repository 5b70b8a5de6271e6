"""A seeded fictional world, its encyclopedia and questions about it: the data of ``RAG-v0``.

:func:`generate_world` builds, from a seed, countries, cities, organisations, people
and events with dates and relations (a person's birthplace and employer, an
organisation's founder and headquarters, an event's organiser and place), all
consistent with each other (an organisation is founded decades after its founder's
birth, an event happens after its organiser was founded). Every name is made of
generated syllables, so no answer can come from a model's memory. Names are shared on
purpose: people share first names and surnames, organisations carry the names of cities
and families, events the names of cities, and documents mention other entities, so
keyword overlap alone does not find the right document.

:func:`write_world` writes ``corpus.jsonl`` (one document per entity) and
``questions.jsonl`` (single-hop, two-hop, comparison and date questions with gold
document ids, answer aliases, the reference search path and a tool-call solution).
Run ``python -m agent_gym.envs.rag.world --out DIR`` to regenerate the shipped files.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent_gym.generation import DeterministicRandom
from agent_gym.grading import qa_normalize

__all__ = ["World", "generate_questions", "generate_world", "main", "world_documents", "write_world"]

SEED = "agent_gym.rag.world.v0"
"""Seed of the shipped world."""

_ONSETS = ("b", "br", "d", "dr", "f", "g", "gr", "h", "k", "kr", "l", "m", "n", "p", "r", "s", "st", "t",
           "th", "tr", "v", "z", "sh", "ch", "j", "y")
_VOWELS = ("a", "e", "i", "o", "u", "ae", "ei", "ou", "y", "ia")
_CODAS = ("", "", "n", "r", "l", "s", "th", "m", "nd", "rk", "sk", "v", "x", "ld")
_CITY_SUFFIX = ("", "", "", "ford", "holm", "mere", "wick", "by", "stad", "port")
_INDUSTRIES = ("Shipping", "Textile", "Glass", "Railway", "Printing", "Brewing", "Mining", "Insurance",
               "Clockmaking", "Porcelain", "Telegraph", "Salt", "Timber", "Canal")
_ORG_KINDS = ("Company", "Guild", "Works", "Society", "Trust", "Cooperative", "Foundry")
_EVENT_KINDS = ("Treaty of {}", "{} Trade Fair", "Great Flood of {}", "{} Music Festival", "Siege of {}",
                "{} Expedition", "{} Dockworkers' Strike", "{} Exhibition")
_OCCUPATIONS = ("shipwright", "cartographer", "engineer", "botanist", "printer", "glassblower", "architect",
                "surveyor", "chemist", "composer", "weaver", "astronomer", "clockmaker", "lawyer", "physician",
                "teacher", "banker", "sculptor")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")


@dataclass
class Entity:
    """One thing in the world: its document id, name, kind and facts."""

    id: str
    name: str
    kind: str
    facts: dict[str, Any] = field(default_factory=dict)


@dataclass
class World:
    """Every entity of a generated world, by kind (lists in id order)."""

    countries: list[Entity]
    cities: list[Entity]
    organisations: list[Entity]
    people: list[Entity]
    events: list[Entity]

    def all(self) -> list[Entity]:
        """Every entity, in document order."""
        return [*self.countries, *self.cities, *self.organisations, *self.people, *self.events]


def _long_date(day: dt.date) -> str:
    return f"{day.day} {_MONTHS[day.month - 1]} {day.year}"


def _date_aliases(day: dt.date) -> list[str]:
    month = _MONTHS[day.month - 1]
    return [_long_date(day), f"{month} {day.day}, {day.year}", day.isoformat(), f"{month} {day.day} {day.year}"]


class _Names:
    """Unique generated names."""

    def __init__(self, rng: DeterministicRandom) -> None:
        self.rng = rng
        self.used: set[str] = set()

    def root(self, syllables: int | None = None) -> str:
        while True:
            count = syllables or self.rng.choice((1, 2, 2, 2, 3))
            parts = [self.rng.choice(_ONSETS) + self.rng.choice(_VOWELS) + self.rng.choice(_CODAS)
                     for _ in range(count)]
            word = "".join(parts)
            if 4 <= len(word) <= 10 and word not in self.used:
                self.used.add(word)
                return word.capitalize()


def _random_date(rng: DeterministicRandom, first_year: int, last_year: int) -> dt.date:
    start = dt.date(first_year, 1, 1)
    return rng.date(start, (dt.date(last_year, 12, 31) - start).days)


def generate_world(seed: str = SEED, *, countries: int = 24, cities: int = 200, organisations: int = 400,
                   people: int = 1000, events: int = 400) -> World:
    """Generate a consistent fictional world.

    Args:
        seed: Seed string; the same seed gives the same world on every platform.
        countries: Number of countries.
        cities: Number of cities.
        organisations: Number of organisations.
        people: Number of people.
        events: Number of events.

    Returns:
        The :class:`World`.
    """
    rng = DeterministicRandom(seed)
    names = _Names(rng)
    country_list = []
    for i in range(countries):
        name = names.root(2) + rng.choice(("ia", "ora", "and", "istan", "ary"))
        country_list.append(Entity(f"country-{i:03d}", name, "country",
                                   {"currency": names.root(1).lower(), "founded": rng.randint(1100, 1850)}))
    city_list = []
    for i in range(cities):
        name = names.root() + rng.choice(_CITY_SUFFIX)
        country = country_list[i % countries] if i < countries else rng.choice(country_list)
        city_list.append(Entity(f"city-{i:04d}", name, "city", {
            "country": country.id, "founded": rng.randint(800, 1800), "river": names.root(1) + " River",
            "population": rng.randint(8, 900) * 1000}))
    for country in country_list:
        own = [c for c in city_list if c.facts["country"] == country.id]
        country.facts["capital"] = own[0].id
    first_names = [names.root(rng.choice((1, 2, 2))) for _ in range(110)]
    surnames = [names.root(rng.choice((1, 2, 2))) for _ in range(160)]
    person_list = []
    used_full: set[str] = set()
    for i in range(people):
        while True:
            full = f"{rng.choice(first_names)} {rng.choice(surnames)}"
            if full not in used_full:
                used_full.add(full)
                break
        born = _random_date(rng, 1850, 1990)
        person_list.append(Entity(f"person-{i:04d}", full, "person", {
            "born": born, "birthplace": rng.choice(city_list).id, "occupation": rng.choice(_OCCUPATIONS)}))
    founders = [p for p in person_list if p.facts["born"].year <= 1950]
    org_list = []
    org_names: set[str] = set()
    for i in range(organisations):
        founder = rng.choice(founders)
        industry = rng.choice(_INDUSTRIES)
        hq = rng.choice(city_list)
        pattern = rng.randint(0, 3)
        while True:
            if pattern == 0:
                name = f"{hq.name} {industry} {rng.choice(_ORG_KINDS)}"
            elif pattern == 1:
                name = f"{founder.name.split()[1]} {industry} {rng.choice(_ORG_KINDS)}"
            elif pattern == 2:
                name = f"{founder.name.split()[1]} & Sons"
                if name in org_names:
                    pattern = 3
                    continue
            else:
                name = f"{names.root(2)} {industry} {rng.choice(_ORG_KINDS)}"
            if name not in org_names:
                org_names.add(name)
                break
        founded = founder.facts["born"] + dt.timedelta(days=365 * rng.randint(24, 50) + rng.randint(0, 364))
        org_list.append(Entity(f"org-{i:04d}", name, "organisation", {
            "founder": founder.id, "founded": founded, "hq": hq.id, "industry": industry.lower()}))
    for person in person_list:
        fitting = [o for o in org_list if o.facts["founded"].year <= person.facts["born"].year + 40
                   and o.facts["founder"] != person.id]
        person.facts["employer"] = rng.choice(fitting).id
        person.facts["colleague"] = rng.choice(person_list).id
        if person.facts["colleague"] == person.id:
            person.facts["colleague"] = person_list[(int(person.id[-4:]) + 1) % len(person_list)].id
    event_list = []
    event_names: set[str] = set()
    for i in range(events):
        while True:
            city = rng.choice(city_list)
            name = rng.choice(_EVENT_KINDS).format(city.name)
            if name not in event_names:
                event_names.add(name)
                break
        organiser = rng.choice([o for o in org_list if o.facts["founded"].year < 2000])
        date = _random_date(rng, organiser.facts["founded"].year + 1, 2022)
        event_list.append(Entity(f"event-{i:04d}", name, "event", {
            "date": date, "city": city.id, "organiser": organiser.id, "attendance": rng.randint(2, 400) * 100}))
    return World(country_list, city_list, org_list, person_list, event_list)


def world_documents(world: World) -> list[dict[str, Any]]:
    """One encyclopedia document per entity: ``{"id", "title", "text", "metadata"}``.

    A document states its entity's own facts and names related entities without
    stating their facts, so that two-hop questions need two documents.
    """
    by_id = {e.id: e for e in world.all()}
    employees: dict[str, list[Entity]] = {}
    for person in world.people:
        employees.setdefault(person.facts["employer"], []).append(person)
    docs = []
    for e in world.all():
        f = e.facts
        if e.kind == "country":
            capital = by_id[f["capital"]].name
            cities = [c.name for c in world.cities if c.facts["country"] == e.id and c.id != f["capital"]][:3]
            text = (f"{e.name} is a country whose capital is {capital}. Its currency is the {f['currency']}. "
                    f"The first charter of {e.name} dates from {f['founded']}.")
            if cities:
                text += f" Other towns of {e.name} include {', '.join(cities)}."
        elif e.kind == "city":
            text = (f"{e.name} is a city in {by_id[f['country']].name}. It lies on the {f['river']} and was "
                    f"founded in {f['founded']}. About {f['population']:,} people live in {e.name}, "
                    f"which is known for its markets and its bridges over the {f['river']}.")
        elif e.kind == "organisation":
            founder = by_id[f["founder"]].name
            text = (f"The {e.name} is a {f['industry']} business headquartered in {by_id[f['hq']].name}. "
                    f"It was founded on {_long_date(f['founded'])} by {founder}.")
            staff = employees.get(e.id, [])[:2]
            if staff:
                text += f" Its staff have included {' and '.join(p.name for p in staff)}."
        elif e.kind == "person":
            surname = e.name.split()[1]
            article = "an" if f["occupation"][0] in "aeiou" else "a"
            text = (f"{e.name} is {article} {f['occupation']} born on {_long_date(f['born'])} in "
                    f"{by_id[f['birthplace']].name}. {surname} works for the {by_id[f['employer']].name}. "
                    f"{e.name} is often mentioned together with {by_id[f['colleague']].name}, a fellow member "
                    f"of the {f['occupation']}s' association.")
        else:
            text = (f"The {e.name} took place on {_long_date(f['date'])} in {by_id[f['city']].name}. "
                    f"It was organised by the {by_id[f['organiser']].name} and drew about {f['attendance']:,} "
                    f"people.")
        docs.append({"id": e.id, "title": e.name, "text": text, "metadata": {"kind": e.kind}})
    return docs


def _question(qid: str, kind: str, question: str, answer: str, aliases: Sequence[str],
              hops: Sequence[tuple[str, str]]) -> dict[str, Any]:
    alias_list = list(dict.fromkeys([answer, *aliases]))
    solution = [[{"name": "search", "arguments": {"query": query, "k": 5}},
                 {"name": "open", "arguments": {"doc_id": doc_id}}] for query, doc_id in hops]
    return {"id": qid, "question": question, "ground_truth": answer, "aliases": alias_list, "type": kind,
            "gold_ids": list(dict.fromkeys(d for _, d in hops)),
            "hops": [{"query": q, "doc_id": d} for q, d in hops], "solution": solution}


def _name_aliases(name: str) -> list[str]:
    if name.endswith(" River"):
        return [name, name[: -len(" River")]]
    return [name]


def generate_questions(world: World, seed: str = SEED, *, single_hop: int = 200, two_hop: int = 200,
                       comparison: int = 120, date: int = 120) -> list[dict[str, Any]]:
    """Questions about ``world``, each answerable from its gold documents.

    Types: ``single_hop`` (one fact of one entity), ``two_hop`` (a fact of an entity
    named in the first document: the first answer is the second query), ``comparison``
    (which of two entities is older) and ``date`` (a full date, in several accepted
    formats). An answer never appears in its own question (except comparison answers,
    which are one of the two names asked about), and a two-hop answer never appears in
    the first document.
    """
    rng = DeterministicRandom(seed + ".questions")
    by_id = {e.id: e for e in world.all()}
    docs = {d["id"]: d["text"] for d in world_documents(world)}

    def name(eid: str) -> str:
        return by_id[eid].name

    def fine(question: str, answer: str, first_doc: str | None = None) -> bool:
        norm = qa_normalize(answer)
        if not norm or norm in qa_normalize(question):
            return False
        return first_doc is None or norm not in qa_normalize(docs[first_doc])

    out: list[dict[str, Any]] = []
    seen: set[str] = set()

    def add(kind: str, count: int, make: Any) -> None:
        made = 0
        tries = 0
        while made < count and tries < count * 50:
            tries += 1
            item = make()
            if item is None or item[0] in seen:
                continue
            question, answer, aliases, hops, first = item
            if kind != "comparison" and not fine(question, answer, first):
                continue
            seen.add(question)
            made += 1
            out.append(_question(f"rag-{kind.replace('_', '')}-{made:04d}", kind, question, answer, aliases, hops))

    def single() -> Any:
        choice = rng.randint(0, 5)
        if choice == 0:
            p = rng.choice(world.people)
            city = name(p.facts["birthplace"])
            return f"In which city was {p.name} born?", city, [], [(p.name, p.id)], None
        if choice == 1:
            p = rng.choice(world.people)
            org = name(p.facts["employer"])
            return f"Which organisation does {p.name} work for?", org, [], [(p.name, p.id)], None
        if choice == 2:
            o = rng.choice(world.organisations)
            return f"Who founded the {o.name}?", name(o.facts["founder"]), [], [(o.name, o.id)], None
        if choice == 3:
            o = rng.choice(world.organisations)
            return f"In which city is the {o.name} headquartered?", name(o.facts["hq"]), [], [(o.name, o.id)], None
        if choice == 4:
            c = rng.choice(world.cities)
            river = c.facts["river"]
            return f"Which river does {c.name} lie on?", river, _name_aliases(river), [(f"{c.name} city", c.id)], None
        ev = rng.choice(world.events)
        return f"In which city did the {ev.name} take place?", name(ev.facts["city"]), [], [(ev.name, ev.id)], None

    def double() -> Any:
        choice = rng.randint(0, 4)
        if choice == 0:
            p = rng.choice(world.people)
            city = by_id[p.facts["birthplace"]]
            return (f"In which country is the city where {p.name} was born?", name(city.facts["country"]), [],
                    [(p.name, p.id), (f"{city.name} city", city.id)], p.id)
        if choice == 1:
            p = rng.choice(world.people)
            org = by_id[p.facts["employer"]]
            return (f"Who founded the organisation that {p.name} works for?", name(org.facts["founder"]), [],
                    [(p.name, p.id), (org.name, org.id)], p.id)
        if choice == 2:
            p = rng.choice(world.people)
            org = by_id[p.facts["employer"]]
            return (f"In which city is the employer of {p.name} headquartered?", name(org.facts["hq"]), [],
                    [(p.name, p.id), (org.name, org.id)], p.id)
        if choice == 3:
            ev = rng.choice(world.events)
            org = by_id[ev.facts["organiser"]]
            year = str(org.facts["founded"].year)
            return (f"In what year was the organiser of the {ev.name} founded?", year, [],
                    [(ev.name, ev.id), (org.name, org.id)], ev.id)
        o = rng.choice(world.organisations)
        founder = by_id[o.facts["founder"]]
        return (f"In which city was the founder of the {o.name} born?", name(founder.facts["birthplace"]), [],
                [(o.name, o.id), (founder.name, founder.id)], o.id)

    def compare() -> Any:
        choice = rng.randint(0, 2)
        pool, key, template = [
            (world.people, "born", "Who was born earlier, {} or {}?"),
            (world.organisations, "founded", "Which was founded earlier, the {} or the {}?"),
            (world.cities, "founded", "Which city was founded earlier, {} or {}?"),
        ][choice]
        a, b = rng.sample(pool, 2)
        if a.facts[key] == b.facts[key]:
            return None
        winner = a if a.facts[key] < b.facts[key] else b
        hops = [(f"{e.name} city" if e.kind == "city" else e.name, e.id) for e in (a, b)]
        return template.format(a.name, b.name), winner.name, [], hops, None

    def when() -> Any:
        choice = rng.randint(0, 2)
        if choice == 0:
            p = rng.choice(world.people)
            day = p.facts["born"]
            return f"On what date was {p.name} born?", _long_date(day), _date_aliases(day), [(p.name, p.id)], None
        if choice == 1:
            o = rng.choice(world.organisations)
            day = o.facts["founded"]
            return (f"On what date was the {o.name} founded?", _long_date(day), _date_aliases(day),
                    [(o.name, o.id)], None)
        ev = rng.choice(world.events)
        day = ev.facts["date"]
        return (f"On what date did the {ev.name} take place?", _long_date(day), _date_aliases(day),
                [(ev.name, ev.id)], None)

    add("single_hop", single_hop, single)
    add("two_hop", two_hop, double)
    add("comparison", comparison, compare)
    add("date", date, when)
    return out


def write_world(out_dir: str | Path, seed: str = SEED) -> tuple[Path, Path]:
    """Generate the world of ``seed`` and write ``corpus.jsonl`` and ``questions.jsonl`` into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    world = generate_world(seed)
    corpus_path, questions_path = out / "corpus.jsonl", out / "questions.jsonl"
    for path, rows in ((corpus_path, world_documents(world)), (questions_path, generate_questions(world, seed))):
        with path.open("w", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
    return corpus_path, questions_path


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m agent_gym.envs.rag.world --out DIR [--seed S]``."""
    parser = argparse.ArgumentParser(description="Generate the fictional RAG corpus and questions.")
    parser.add_argument("--out", default=str(Path(__file__).parent / "data"), help="output folder")
    parser.add_argument("--seed", default=SEED, help="world seed")
    args = parser.parse_args(argv)
    corpus_path, questions_path = write_world(args.out, args.seed)
    print(f"wrote {corpus_path} and {questions_path}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
