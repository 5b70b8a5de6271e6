"""Generator of the shipped conversation tasks (``data/tasks.jsonl``), seeded and platform-independent.

Run ``python -m agent_gym.envs.conversation.generate [--check]`` to rewrite the file (``--check``
only compares). Every task is built from :class:`~agent_gym.generation.DeterministicRandom`
seeded with ``"agent_gym.conversation.<domain>.<i>"``, so adding a domain never changes the others.
Each domain mixes plain requests, turns whose correct action is to ask the user for a missing
detail or to refuse (each with an ``expect`` naming the detail or the reason, see
:mod:`~agent_gym.envs.conversation.expectations`), tools that appear mid-conversation, and
one to five user turns.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from agent_gym.generation import DeterministicRandom

__all__ = ["PER_DOMAIN", "generate_tasks", "main"]

PER_DOMAIN = 60
"""Tasks per domain (three domains)."""

_WORDS = ["alpha", "budget", "client", "draft", "euro", "forest", "garden", "harbor", "island", "jungle",
          "kernel", "lemon", "meadow", "nectar", "orbit", "pepper", "quartz", "river", "saffron", "tundra"]
_NAMES = ["Ana", "Ben", "Chen", "Dana", "Eli", "Fatima", "Goran", "Hana", "Ivan", "Jun", "Kofi", "Lena"]


def _call(method: str, /, **arguments: Any) -> dict[str, Any]:
    return {"name": method, "arguments": arguments}


def _clarify(content: str, slot: str, terms: list[str], reply: str) -> dict[str, Any]:
    """A turn whose right move is to ask for ``slot`` (its solution makes no change)."""
    return {"content": content, "expect": {"kind": "clarify", "slot": slot, "terms": terms, "reply": reply}}


def _refuse(content: str, reason: str, terms: list[str], reply: str) -> dict[str, Any]:
    """A turn whose right move is to refuse because of ``reason`` (its solution makes no change)."""
    return {"content": content, "expect": {"kind": "refuse", "reason": reason, "terms": terms, "reply": reply}}


# ---------------------------------------------------------------------------- file system


def _fs_task(i: int) -> dict[str, Any]:
    rng = DeterministicRandom(f"agent_gym.conversation.filesystem.{i}")
    words = rng.sample(_WORDS, 8)
    docs = {f"{w}.txt": f"{w} notes: item {rng.randint(10, 99)}\nowner {rng.choice(_NAMES)}" for w in words[:3]}
    root: dict[str, Any] = {"docs": docs, "projects": {f"{words[3]}.md": f"# {words[3]}\nstatus: open"},
                            "todo.txt": "call Ana"}
    kind = ["organize", "read", "ask", "new_tool", "refuse"][i % 5]
    turns: list[Any] = []
    ref: list[list[dict[str, Any]]] = []
    out: list[list[str]] = []
    excluded: list[str] = []
    first, folder = f"{words[0]}.txt", words[4]
    if kind == "organize":
        turns.append(f"In the docs folder, create a folder named {folder} and move {first} into it.")
        ref.append([_call("cd", folder="docs"), _call("mkdir", dir_name=folder), _call("mv", source=first,
                                                                                         destination=folder)])
        out.append([])
        where = ["docs"]
    elif kind == "read":
        turns.append(f"What does the file {first} in docs say about the item number?")
        number = docs[first].split("item ")[1].split("\n")[0]
        ref.append([_call("cd", folder="docs"), _call("cat", file_name=first)])
        out.append([number])
        turns.append(f"Make a copy of it named {words[0]}_backup.txt in the same folder.")
        ref.append([_call("cp", source=first, destination=f"{words[0]}_backup.txt")])
        out.append([])
        where = ["docs"]
    elif kind == "ask":
        root["docs"][f"draft_{words[5]}.txt"] = "old draft"
        root["docs"][f"draft_{words[6]}.txt"] = "new draft"
        old, new = f"draft_{words[5]}.txt", f"draft_{words[6]}.txt"
        turns.append(_clarify("Please delete my draft in the docs folder.", "which of the two drafts to delete",
                              ["draft", "which one", "which file", old, new],
                              f"There are two drafts in docs, {old} and {new}. Which one should I delete?"))
        ref.append([])  # two drafts: the right move is to ask which one
        out.append([])
        turns.append(f"The one called draft_{words[5]}.txt.")
        ref.append([_call("cd", folder="docs"), _call("rm", file_name=f"draft_{words[5]}.txt")])
        out.append([])
        where = ["docs"]
    elif kind == "new_tool":
        excluded = []
        turns.append(f"Rename todo.txt to {words[7]}_todo.txt.")
        ref.append([_call("mv", source="todo.txt", destination=f"{words[7]}_todo.txt")])
        out.append([])
        turns.append({"content": f"Where is the file about {words[3]}? You can search now.", "new_tools": ["find"]})
        ref.append([_call("find", name=words[3])])
        out.append([f"projects/{words[3]}.md"])
        where = []
    else:  # refuse: deleting a non-empty folder is not possible with these tools
        turns.append(_refuse("Delete the whole projects folder with everything in it.",
                             "rm only removes empty folders, and projects is not empty",
                             ["empty", "contains", "file"],
                             "Sorry, I can't delete the projects folder: rm only removes empty folders, and projects "
                             "still contains files."))
        ref.append([])
        out.append([])
        turns.append(f"Fine, then just add the line 'closed' to the end of {words[3]}.md in projects.")
        ref.append([_call("cd", folder="projects"), _call("write", file_name=f"{words[3]}.md", content="\nclosed",
                                                          append=True)])
        out.append([])
        where = ["projects"]
    extras = rng.randint(0, 5 - len(turns))
    for k in range(extras):
        name = f"{rng.choice(_WORDS)}_{i}_{k}.txt"
        text = f"{rng.choice(_WORDS)} {rng.randint(100, 999)}"
        here = "/" + "/".join(where)
        turns.append(f"Now create a file {name} in {here} containing exactly: {text}")
        ref.append([_call("write", file_name=name, content=text)])
        out.append([])
    if kind != "new_tool":
        excluded = ["find"]
    return {"id": f"fs-{i:04d}", "domain": "filesystem", "kind": kind, "classes": ["FileSystem"],
            "initial_state": {"FileSystem": {"root": root, "cwd": []}}, "excluded": excluded,
            "turns": turns, "solution": ref, "expected_outputs": out,
            "user": {"persona": f"{rng.choice(_NAMES)}, who keeps notes in a small file tree.",
                     "goal": " Then: ".join(t if isinstance(t, str) else t["content"] for t in turns)}}


# ---------------------------------------------------------------------------- orders

_PRODUCTS = [("lamp", 24.5), ("kettle", 31.0), ("backpack", 45.0), ("notebook", 3.5), ("headphones", 59.9),
             ("mug", 8.0), ("umbrella", 15.0), ("charger", 19.99), ("blanket", 27.0), ("scarf", 12.5)]


def _orders_task(i: int) -> dict[str, Any]:
    rng = DeterministicRandom(f"agent_gym.conversation.orders.{i}")
    chosen = rng.sample(range(len(_PRODUCTS)), 5)
    products: dict[str, dict[str, Any]] = {
        f"SKU-{j + 1:02d}": {"name": _PRODUCTS[j][0], "price": _PRODUCTS[j][1], "stock": rng.randint(3, 9)}
        for j in sorted(chosen)}
    skus = sorted(products)
    customer, other = rng.sample(_NAMES, 2)
    a, b, c = rng.sample(skus, 3)
    orders = {
        "O-1": {"customer": customer, "items": {a: 1}, "status": "pending"},
        "O-2": {"customer": other, "items": {b: 2}, "status": "pending"},
        "O-3": {"customer": customer, "items": {c: 1}, "status": "shipped"},
    }
    kind = ["cancel", "ask", "refuse", "transfer", "new_tool", "add"][i % 6]
    turns: list[Any] = []
    ref: list[list[dict[str, Any]]] = []
    out: list[list[str]] = []
    excluded = ["return_order"] if kind == "new_tool" else []
    next_order = 4
    if kind == "cancel":
        turns.append(f"Hi, I'm {customer}. Please cancel my pending order O-1.")
        ref.append([_call("cancel_order", order_id="O-1")])
        out.append([])
    elif kind == "ask":
        orders["O-4"] = {"customer": customer, "items": {b: 1}, "status": "pending"}
        next_order = 5
        first, second = products[a]["name"], products[b]["name"]
        turns.append(_clarify(f"Hi, I'm {customer}. Please cancel my order.",
                              "which of the two pending orders to cancel",
                              ["which order", "which one", "O-1", "O-4", first, second],
                              f"You have two pending orders: O-1 (the {first}) and O-4 (the {second}). "
                              "Which one should I cancel?"))
        ref.append([])  # two pending orders: ask which one
        out.append([])
        turns.append(f"The one with the {products[b]['name']}.")
        ref.append([_call("cancel_order", order_id="O-4")])
        out.append([])
    elif kind == "refuse":
        turns.append(_refuse(f"I'm {customer}. Cancel order O-3, please.",
                             "O-3 has already shipped, and only pending orders can be cancelled",
                             ["shipped", "pending"],
                             "Sorry, I can't cancel O-3: it has already shipped, and only pending orders can be "
                             "cancelled."))
        ref.append([])  # shipped orders cannot be cancelled
        out.append([])
        turns.append("I see. Then I want to return it.")
        ref.append([_call("return_order", order_id="O-3")])
        out.append([])
    elif kind == "transfer":
        item = products[a]["name"]
        turns.append(_refuse(f"I'm {customer}. Please remove the {item} from order O-1.",
                             f"the {item} is the only product in O-1, and an order keeps at least one product",
                             ["only", "last", "at least one", "single"],
                             f"Sorry, I can't remove the {item} from O-1: it is the only product in the order, and "
                             "an order keeps at least one product."))
        ref.append([])  # the only item: removing it is refused
        out.append([])
        turns.append("This is unacceptable, I want to talk to a person about a refund.")
        ref.append([_call("transfer_to_human", reason="customer asks for a person")])
        out.append([])
    elif kind == "new_tool":
        turns.append(f"Hello, {customer} here. What is the status of order O-3?")
        ref.append([_call("get_order", order_id="O-3")])
        out.append(["shipped"])
        turns.append({"content": "I'd like to return it.", "new_tools": ["return_order"]})
        ref.append([_call("return_order", order_id="O-3")])
        out.append([])
    else:  # add
        qty = rng.randint(1, 2)
        turns.append(f"I'm {customer}. Add {qty} {products[b]['name']} to my order O-1.")
        ref.append([_call("add_item", order_id="O-1", sku=b, quantity=qty)])
        out.append([])
        total = products[a]["price"] + qty * products[b]["price"]
        turns.append("What is the order total now?")
        ref.append([_call("get_order", order_id="O-1")])
        out.append([f"{round(total, 2):g}"])
    if kind != "transfer":
        for _ in range(rng.randint(0, 5 - len(turns))):
            sku = rng.choice(skus)
            qty = rng.randint(1, 2)
            turns.append(f"Also place a new order for {qty} {products[sku]['name']} for me ({customer}).")
            ref.append([_call("place_order", customer=customer, sku=sku, quantity=qty)])
            out.append([])
            products_left = products[sku]["stock"] - qty - sum(
                c["arguments"]["quantity"] for turn in ref[:-1] for c in turn
                if c["name"] in ("place_order", "add_item") and c["arguments"]["sku"] == sku)
            if products_left < 0:  # keep every solution call valid
                turns.pop()
                ref.pop()
                out.pop()
                break
            next_order += 1
    return {"id": f"orders-{i:04d}", "domain": "orders", "kind": kind, "classes": ["OrderService"],
            "initial_state": {"OrderService": {"products": products, "orders": orders, "next_order": 4
                                               if kind != "ask" else 5}},
            "excluded": excluded, "turns": turns, "solution": ref, "expected_outputs": out,
            "user": {"persona": f"{customer}, a customer of the shop.",
                     "goal": " Then: ".join(t if isinstance(t, str) else t["content"] for t in turns)}}


# ---------------------------------------------------------------------------- calendar


def _calendar_task(i: int) -> dict[str, Any]:
    rng = DeterministicRandom(f"agent_gym.conversation.calendar.{i}")
    day = f"2025-03-{rng.randint(3, 28):02d}"
    people = rng.sample(_NAMES, 4)
    titles = [w.capitalize() + " review" for w in rng.sample(_WORDS, 3)]
    events = {
        "E-1": {"title": titles[0], "date": day, "start": "09:00", "end": "10:00", "attendees": sorted(people[:2])},
        "E-2": {"title": titles[1], "date": day, "start": "13:00", "end": "14:30", "attendees": [people[2]]},
    }
    kind = ["create", "reschedule", "ask", "conflict", "cancel"][i % 5]
    turns: list[Any] = []
    ref: list[list[dict[str, Any]]] = []
    out: list[list[str]] = []
    excluded = ["free_slots"] if kind == "conflict" else []
    new_title = titles[2]
    if kind == "create":
        turns.append(f"Schedule '{new_title}' on {day} from 11:00 to 12:00 with {people[0]} and {people[3]}.")
        ref.append([_call("create_event", title=new_title, date=day, start="11:00", end="12:00",
                          attendees=[people[0], people[3]])])
        out.append([])
        turns.append(f"Please invite {people[1]} to it too.")
        ref.append([_call("add_attendee", event_id="E-3", name=people[1])])
        out.append([])
    elif kind == "reschedule":
        turns.append(f"Move my '{titles[1]}' meeting to 15:00-16:30 the same day.")
        ref.append([_call("find_events", title=titles[1]),
                    _call("reschedule_event", event_id="E-2", date=day, start="15:00", end="16:30")])
        out.append([])
    elif kind == "ask":
        turns.append(_clarify(f"Book a meeting called '{new_title}' with {people[3]}.",
                              "the date and time of the meeting", ["date", "time", "when", "day"],
                              f"Sure. On which date, and from what time to what time, should I book '{new_title}'?"))
        ref.append([])  # no date or time given: ask
        out.append([])
        turns.append(f"On {day}, 16:00 to 17:00.")
        ref.append([_call("create_event", title=new_title, date=day, start="16:00", end="17:00",
                          attendees=[people[3]])])
        out.append([])
    elif kind == "conflict":
        turns.append(_refuse(f"Put '{new_title}' on {day} from 09:30 to 10:30.",
                             f"09:30-10:30 overlaps '{titles[0]}' (09:00-10:00) that day",
                             ["overlap", "conflict", "clash", "busy", "already booked", titles[0]],
                             f"Sorry, I can't book '{new_title}' then: 09:30-10:30 overlaps '{titles[0]}' "
                             "(09:00-10:00) that day."))
        ref.append([])  # overlaps E-1: it cannot be booked
        out.append([])
        turns.append({"content": f"Then book it for one hour at the earliest free time after the "
                                 f"'{titles[0]}' meeting that day. You can look up free slots now.",
                      "new_tools": ["free_slots"]})
        ref.append([_call("free_slots", date=day, duration_minutes=60),
                    _call("create_event", title=new_title, date=day, start="10:00", end="11:00")])
        out.append(["10:00"])
    else:  # cancel
        turns.append(f"Cancel the '{titles[0]}' meeting.")
        ref.append([_call("find_events", title=titles[0]), _call("cancel_event", event_id="E-1")])
        out.append([])
    for k in range(rng.randint(0, 5 - len(turns))):
        title = f"{rng.choice(_WORDS).capitalize()} sync {k + 1}"
        other_day = f"2025-04-{rng.randint(1, 28):02d}"
        hour = 8 + 2 * k
        start, end = f"{hour:02d}:00", f"{hour + 1:02d}:00"
        turns.append(f"Also add '{title}' on {other_day} from {start} to {end}, no attendees.")
        ref.append([_call("create_event", title=title, date=other_day, start=start, end=end)])
        out.append([])
    return {"id": f"calendar-{i:04d}", "domain": "calendar", "kind": kind, "classes": ["Calendar"],
            "initial_state": {"Calendar": {"events": events, "next_event": 3}}, "excluded": excluded,
            "turns": turns, "solution": ref, "expected_outputs": out,
            "user": {"persona": f"{people[0]}, a busy team lead.",
                     "goal": " Then: ".join(t if isinstance(t, str) else t["content"] for t in turns)}}


def generate_tasks(per_domain: int = PER_DOMAIN) -> list[dict[str, Any]]:
    """The shipped tasks: ``per_domain`` each of the file system, orders and calendar domains."""
    tasks: list[dict[str, Any]] = []
    for make in (_fs_task, _orders_task, _calendar_task):
        tasks.extend(make(i) for i in range(per_domain))
    return tasks


def _render(tasks: list[dict[str, Any]]) -> str:
    return "".join(json.dumps(t, ensure_ascii=False, sort_keys=True) + "\n" for t in tasks)


def main(argv: list[str] | None = None) -> int:
    """Write (or with ``--check`` compare) ``data/tasks.jsonl`` beside this module."""
    parser = argparse.ArgumentParser(description="Write the shipped conversation tasks (data/tasks.jsonl).")
    parser.add_argument("--check", action="store_true", help="only check that the file is up to date")
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("data") / "tasks.jsonl")
    args = parser.parse_args(argv)
    text = _render(generate_tasks())
    if args.check:
        same = args.out.exists() and args.out.read_text(encoding="utf-8") == text
        print("up to date" if same else f"{args.out} differs from the generator's output")
        return 0 if same else 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(f"wrote {text.count(chr(10))} tasks to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
