"""Web-v0's synthetic multi-page sites: a sign-up wizard, a shop with search and cart, a settings area.

Each site is seeded (its data and its goal come from the task's seed), served per episode by
:mod:`~agent_gym.envs.web.site_server` with its state on the server, and graded there by its
checker (:meth:`score`): 1 when the state the agent left is the goal, else 0. A task needs several
pages and real state (a draft carried across the wizard's steps, a cart, saved settings). Each site
also has an oracle that reads the instruction, the page's address and its accessibility snapshot.
"""

from __future__ import annotations

import html
import random
import re
from typing import Any
from urllib.parse import parse_qs, quote_plus, urlsplit

from agent_gym.envs.web.miniwob import SnapshotNode
from agent_gym.envs.web.site_server import Response, page_html

__all__ = ["SITES", "SettingsSite", "ShopSite", "WizardSite", "site_tasks"]

_FIRST = ["Ada", "Boris", "Chen", "Dalia", "Emil", "Farah", "Goran", "Hana", "Ivo", "Jana", "Kofi", "Lena"]
_LAST = ["Moreau", "Novak", "Okafor", "Petrov", "Quinn", "Rossi", "Sato", "Tanaka", "Ueda", "Varga"]
_ADJ = ["Red", "Quiet", "Swift", "Solid", "Bright", "Tiny", "Grand", "Smooth", "Lucky", "Plain", "Sturdy", "Warm"]
_NOUN = ["Kettle", "Lamp", "Backpack", "Notebook", "Mug", "Chair", "Scarf", "Clock", "Blender", "Pillow", "Tent"]

Calls = list[tuple[str, dict[str, Any]]]


def _e(text: Any) -> str:
    return html.escape(str(text))


def _ref(nodes: list[SnapshotNode], role: str, name: str | None = None) -> str:
    for node in nodes:
        if node.role == role and node.ref and (name is None or node.name == name):
            return node.ref
    raise LookupError(f"no {role} {name!r} on the page")


def _quoted(instruction: str) -> list[str]:
    return re.findall(r'"([^"]*)"', instruction)


class WizardSite:
    """A three-step sign-up form (details, plan, review) whose draft lives on the server until confirmed."""

    name = "wizard"
    PLANS = ("Basic", "Pro", "Team")
    BILLING = ("Monthly", "Yearly")

    def __init__(self, seed: int) -> None:
        rng = random.Random(f"wizard-{seed}")
        first, last = rng.choice(_FIRST), rng.choice(_LAST)
        email = f"{first.lower()}.{last.lower()}{rng.randint(1, 99)}@example.org"
        self.goal = {"name": f"{first} {last}", "email": email,
                     "plan": rng.choice(self.PLANS), "billing": rng.choice(self.BILLING)}
        self.instruction = (f'Sign up as "{self.goal["name"]}" with the email "{self.goal["email"]}", choose the '
                            f'"{self.goal["plan"]}" plan billed "{self.goal["billing"]}", and confirm.')
        self.draft: dict[str, str] = {}
        self.submitted: dict[str, str] | None = None

    def handle(self, method: str, path: str, params: dict[str, str]) -> Response:
        """The wizard's pages: details (""), plan, review, done."""
        if method == "POST" and path in ("", "plan"):
            keys = ("name", "email") if path == "" else ("plan", "billing")
            values = {k: params.get(k, "").strip()[:200] for k in keys}
            if not all(values.values()):
                return Response(location=f"{path}?error=1")
            self.draft.update(values)
            return Response(location="plan" if path == "" else "review")
        if method == "POST" and path == "confirm" and len(self.draft) == 4 and self.submitted is None:
            self.submitted = dict(self.draft)
            return Response(location="done")
        error = "<p role='alert'>Please fill in every field.</p>" if params.get("error") else ""
        if path == "":
            body = (f"{error}<form method='post' action=''><label for='n'>Full name</label>"
                    f"<input id='n' name='name' value='{_e(self.draft.get('name', ''))}'>"
                    f"<label for='m'>Email</label><input id='m' name='email' value='{_e(self.draft.get('email', ''))}'>"
                    "<button>Next</button></form>")
            return Response(page_html("Sign up: your details", body))
        if path == "plan":
            options = "".join(f"<option>{p}</option>" for p in self.PLANS)
            radios = "".join(f"<label><input type='radio' name='billing' value='{b}'>{b}</label>" for b in self.BILLING)
            body = (f"{error}<form method='post' action='plan'><label for='p'>Plan</label>"
                    f"<select id='p' name='plan'><option value=''>Choose a plan</option>{options}</select>"
                    f"<fieldset><legend>Billing</legend>{radios}</fieldset><button>Next</button></form>")
            return Response(page_html("Sign up: plan", body))
        if path == "review":
            rows = "".join(f"<li>{_e(k)}: {_e(v)}</li>" for k, v in self.draft.items())
            body = f"<ul>{rows}</ul><form method='post' action='confirm'><button>Confirm</button></form>"
            return Response(page_html("Sign up: review", body, (("", "Edit details"), ("plan", "Edit plan"))))
        if path == "done":
            return Response(page_html("Signed up", "<p>Welcome aboard.</p>" if self.submitted else "<p>Not yet.</p>"))
        return Response(page_html("Not found", ""), status=404)

    def score(self) -> float:
        """1 when the confirmed sign-up is the goal."""
        return 1.0 if self.submitted == self.goal else 0.0

    @staticmethod
    def oracle(instruction: str, nodes: list[SnapshotNode], path: str, query: dict[str, str]) -> Calls:
        """The wizard's next page of steps, from the page's address."""
        name, email, plan, billing = _quoted(instruction)[:4]
        if path == "":
            return [("type", {"ref": _ref(nodes, "textbox", "Full name"), "text": name}),
                    ("type", {"ref": _ref(nodes, "textbox", "Email"), "text": email}),
                    ("click", {"ref": _ref(nodes, "button", "Next")})]
        if path == "plan":
            return [("select", {"ref": _ref(nodes, "combobox", "Plan"), "option": plan}),
                    ("click", {"ref": _ref(nodes, "radio", billing)}),
                    ("click", {"ref": _ref(nodes, "button", "Next")})]
        if path == "review":
            return [("click", {"ref": _ref(nodes, "button", "Confirm")})]
        return [("finish", {})]


class ShopSite:
    """A shop whose products are found only by search, with a server-side cart and checkout."""

    name = "shop"

    def __init__(self, seed: int) -> None:
        rng = random.Random(f"shop-{seed}")
        names = rng.sample([f"{a} {n}" for a in _ADJ for n in _NOUN], 14)
        self.products = {f"p{i}": (name, rng.randint(3, 120)) for i, name in enumerate(names)}
        self.goal = sorted(rng.sample(sorted(self.products), 2))
        wanted = [self.products[p][0] for p in self.goal]
        self.instruction = (f'Buy "{wanted[0]}" and "{wanted[1]}" (one of each) in the shop: find them with the '
                            "search, add both to the cart and check out.")
        self.cart: list[str] = []
        self.order: list[str] | None = None

    def _nav(self) -> tuple[tuple[str, str], ...]:
        return (("", "Home"), ("cart", f"Cart ({len(self.cart)})"))

    def _search_form(self, query: str = "") -> str:
        return (f"<form method='get' action='search' role='search'><label for='q'>Search</label>"
                f"<input id='q' name='q' value='{_e(query)}'><button>Search</button></form>")

    def handle(self, method: str, path: str, params: dict[str, str]) -> Response:
        """The shop's pages: home, search, cart, done; cart/add, cart/remove and checkout take POSTs."""
        query = params.get("q", "")[:100]
        if method == "POST" and path == "cart/add" and params.get("id") in self.products and self.order is None:
            self.cart.append(params["id"])
            return Response(location=f"search?q={quote_plus(query)}")
        if method == "POST" and path == "cart/remove" and params.get("id") in self.cart:
            self.cart.remove(params["id"])
            return Response(location="cart")
        if method == "POST" and path == "checkout" and self.cart and self.order is None:
            self.order, self.cart = sorted(self.cart), []
            return Response(location="done")
        if path == "":
            return Response(page_html("Shop", self._search_form() + "<p>Search the catalogue.</p>", self._nav()))
        if path == "search":
            words = query.lower().split()
            found = [(pid, n, price) for pid, (n, price) in self.products.items()
                     if words and all(w in n.lower() for w in words)]
            items = "".join(f"<li>{_e(n)}, ${price}<form method='post' action='cart/add'>"
                            f"<input type='hidden' name='id' value='{pid}'><input type='hidden' name='q' "
                            f"value='{_e(query)}'><button>Add {_e(n)} to cart</button></form></li>"
                            for pid, n, price in found)
            body = self._search_form(query) + (f"<ul>{items}</ul>" if found else "<p>No products found.</p>")
            return Response(page_html(f"Results for {query}", body, self._nav()))
        if path == "cart":
            items = "".join(f"<li>{_e(self.products[p][0])}<form method='post' action='cart/remove'>"
                            f"<input type='hidden' name='id' value='{p}'><button>Remove {_e(self.products[p][0])}"
                            f"</button></form></li>" for p in self.cart)
            checkout = "<form method='post' action='checkout'><button>Check out</button></form>" if self.cart else ""
            return Response(page_html("Cart", f"<ul>{items}</ul>{checkout}" if items else "<p>Empty.</p>",
                                      self._nav()))
        if path == "done":
            return Response(page_html("Order placed", "<p>Thank you.</p>", self._nav()))
        return Response(page_html("Not found", "", self._nav()), status=404)

    def score(self) -> float:
        """1 when the order placed holds exactly the two goal products, one of each."""
        return 1.0 if self.order == self.goal else 0.0

    @staticmethod
    def oracle(instruction: str, nodes: list[SnapshotNode], path: str, query: dict[str, str]) -> Calls:
        """Search and add each wanted product in turn (the cart's size says which), then check out."""
        wanted = _quoted(instruction)[:2]
        in_cart = next((int(m.group(1)) for n in nodes if n.role == "link"
                        for m in [re.match(r"Cart \((\d+)\)", n.name)] if m), 0)
        if path == "done":
            return [("finish", {})]
        if in_cart >= 2:
            if path == "cart":
                return [("click", {"ref": _ref(nodes, "button", "Check out")})]
            return [("click", {"ref": _ref(nodes, "link", f"Cart ({in_cart})")})]
        target = wanted[in_cart]
        if path == "search" and query.get("q") == target:
            return [("click", {"ref": _ref(nodes, "button", f"Add {target} to cart")})]
        return [("type", {"ref": _ref(nodes, "textbox", "Search"), "text": target}),
                ("click", {"ref": _ref(nodes, "button", "Search")})]


class SettingsSite:
    """An account's settings on three pages (profile, notifications, privacy), each saved by its own form."""

    name = "settings"
    CHANNELS = ("Email", "SMS", "Push")
    VISIBILITY = ("Everyone", "Friends", "Only me")

    def __init__(self, seed: int) -> None:
        rng = random.Random(f"settings-{seed}")
        start_vis, goal_vis = rng.sample(self.VISIBILITY, 2)
        self.state: dict[str, Any] = {"display_name": rng.choice(_FIRST), "visibility": start_vis,
                                      **{c: rng.random() < 0.5 for c in self.CHANNELS}}
        flip = rng.choice(self.CHANNELS)
        self.goal = {**self.state, "display_name": f"{rng.choice(_ADJ)} {rng.choice(_NOUN)}", "visibility": goal_vis,
                     flip: not self.state[flip]}
        turn = "on" if self.goal[flip] else "off"
        self.instruction = (f'In the settings, change your display name to "{self.goal["display_name"]}", turn '
                            f'{turn} the "{flip} notifications", and set the profile visibility to '
                            f'"{goal_vis}"; save each page. Leave everything else as it is.')

    _NAV = (("", "Settings"), ("profile", "Profile"), ("notifications", "Notifications"), ("privacy", "Privacy"))

    def handle(self, method: str, path: str, params: dict[str, str]) -> Response:
        """The settings pages; each POST saves its page and comes back with ``saved=1``."""
        if method == "POST" and path == "profile":
            self.state["display_name"] = params.get("display_name", "").strip()[:100]
            return Response(location="profile?saved=1")
        if method == "POST" and path == "notifications":
            for channel in self.CHANNELS:
                self.state[channel] = params.get(channel) == "on"
            return Response(location="notifications?saved=1")
        if method == "POST" and path == "privacy" and params.get("visibility") in self.VISIBILITY:
            self.state["visibility"] = params["visibility"]
            return Response(location="privacy?saved=1")
        saved = "<p role='status'>Saved.</p>" if params.get("saved") else ""
        if path == "":
            return Response(page_html("Settings", "<p>Choose a section.</p>", self._NAV))
        if path == "profile":
            body = (f"{saved}<form method='post' action='profile'><label for='d'>Display name</label>"
                    f"<input id='d' name='display_name' value='{_e(self.state['display_name'])}'>"
                    "<button>Save profile</button></form>")
            return Response(page_html("Profile", body, self._NAV))
        if path == "notifications":
            boxes = "".join(f"<label><input type='checkbox' name='{c}'{' checked' if self.state[c] else ''}>"
                            f"{c} notifications</label>" for c in self.CHANNELS)
            body = (f"{saved}<form method='post' action='notifications'>{boxes}"
                    "<button>Save notifications</button></form>")
            return Response(page_html("Notifications", body, self._NAV))
        if path == "privacy":
            options = "".join(f"<option{' selected' if v == self.state['visibility'] else ''}>{v}</option>"
                              for v in self.VISIBILITY)
            body = (f"{saved}<form method='post' action='privacy'><label for='v'>Profile visibility</label>"
                    f"<select id='v' name='visibility'>{options}</select><button>Save privacy</button></form>")
            return Response(page_html("Privacy", body, self._NAV))
        return Response(page_html("Not found", "", self._NAV), status=404)

    def score(self) -> float:
        """1 when every setting is the goal's (the ones not asked about unchanged)."""
        return 1.0 if self.state == self.goal else 0.0

    @staticmethod
    def oracle(instruction: str, nodes: list[SnapshotNode], path: str, query: dict[str, str]) -> Calls:
        """Profile, then notifications, then privacy: each page filled and saved, then the next one."""
        name, channel, visibility = _quoted(instruction)[:3]
        saved = query.get("saved") == "1"
        if path in ("", "profile") and not (path == "profile" and saved):
            if path == "":
                return [("click", {"ref": _ref(nodes, "link", "Profile")})]
            return [("type", {"ref": _ref(nodes, "textbox", "Display name"), "text": name}),
                    ("click", {"ref": _ref(nodes, "button", "Save profile")})]
        if path == "profile":
            return [("click", {"ref": _ref(nodes, "link", "Notifications")})]
        if path == "notifications" and not saved:
            want_on = " turn on " in instruction
            box = next(n for n in nodes if n.role == "checkbox" and n.name == channel)
            calls: Calls = [] if box.checked == want_on else [("click", {"ref": box.ref})]
            return [*calls, ("click", {"ref": _ref(nodes, "button", "Save notifications")})]
        if path == "notifications":
            return [("click", {"ref": _ref(nodes, "link", "Privacy")})]
        if path == "privacy" and not saved:
            return [("select", {"ref": _ref(nodes, "combobox", "Profile visibility"), "option": visibility}),
                    ("click", {"ref": _ref(nodes, "button", "Save privacy")})]
        return [("finish", {})]


SITES: dict[str, type[WizardSite] | type[ShopSite] | type[SettingsSite]] = {
    "wizard": WizardSite, "shop": ShopSite, "settings": SettingsSite}
"""The synthetic sites by name."""

SITE_SPLITS = {"train": range(0, 64), "test": range(1000, 1016)}
"""Seeds of each split."""


def site_tasks(split: str = "train") -> list[dict[str, Any]]:
    """The synthetic-site tasks of ``split``: ``{"id": "site-<name>/<seed>", ..., "source": "site", "site", "seed"}``.

    Raises:
        ValueError: For an unknown split.
    """
    if split not in SITE_SPLITS:
        raise ValueError(f"split: expected one of {sorted(SITE_SPLITS)}, got {split!r}")
    return [{"id": f"site-{name}/{seed}", "question": f"The {name} site (instance {seed})", "ground_truth": "",
             "source": "site", "site": name, "seed": seed} for name in SITES for seed in SITE_SPLITS[split]]


def split_url(url: str, prefix: str) -> tuple[str, dict[str, str]]:
    """The path below ``prefix`` and the query of a page address."""
    parts = urlsplit(url)
    path = parts.path[len(prefix):] if parts.path.startswith(prefix) else parts.path
    return path, {k: v[-1] for k, v in parse_qs(parts.query).items()}
