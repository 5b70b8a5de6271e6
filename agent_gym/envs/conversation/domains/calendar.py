"""``Calendar``: meetings with dates, times and attendees (a stateful tool class).

Public state: ``events`` (event id -> title, date, start, end, attendees) and
``next_event`` (the number of the next event id). Times are ``"HH:MM"`` strings within
working hours (08:00 to 18:00); events of one day never overlap.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

__all__ = ["Calendar"]

_DAY_START, _DAY_END = 8 * 60, 18 * 60


def _minutes(value: str, what: str) -> int:
    try:
        hours, minutes = value.split(":")
        total = int(hours) * 60 + int(minutes)
    except (ValueError, AttributeError):
        raise ValueError(f"{what}: expected a time 'HH:MM', got {value!r}") from None
    if not _DAY_START <= total <= _DAY_END:
        raise ValueError(f"{what}: expected a time between 08:00 and 18:00, got {value!r}")
    return total


def _date(value: str) -> str:
    try:
        return dt.date.fromisoformat(value).isoformat()
    except (ValueError, TypeError):
        raise ValueError(f"date: expected 'YYYY-MM-DD', got {value!r}") from None


class Calendar:
    """A calendar of meetings."""

    def __init__(self) -> None:
        self.events: dict[str, dict[str, Any]] = {}
        self.next_event: int = 1

    def _load_scenario(self, config: dict[str, Any]) -> None:
        """Load ``{"events": {...}, "next_event": n}``."""
        unknown = set(config) - {"events", "next_event"}
        if unknown:
            raise ValueError(f"expected keys 'events' and 'next_event', got unknown {sorted(unknown)}")
        events = config.get("events", {})
        for eid, event in events.items():
            if not isinstance(event, dict) or set(event) != {"title", "date", "start", "end", "attendees"}:
                raise ValueError(f"events[{eid!r}]: expected keys 'title', 'date', 'start', 'end', 'attendees', "
                                 f"got {event!r:.80}")
            _date(event["date"])
            if _minutes(event["start"], "start") >= _minutes(event["end"], "end"):
                raise ValueError(f"events[{eid!r}]: expected start before end")
        self.events = events
        self.next_event = int(config.get("next_event", len(events) + 1))

    def _check_free(self, date: str, start: int, end: int, ignore: str | None = None) -> None:
        for eid, event in self.events.items():
            if eid == ignore or event["date"] != date:
                continue
            if start < _minutes(event["end"], "end") and _minutes(event["start"], "start") < end:
                raise ValueError(f"the time overlaps {eid} ({event['title']}, {event['start']}-{event['end']})")

    def list_events(self, date: str) -> list[dict[str, Any]]:
        """List the events of one day, earliest first.

        Args:
            date: The day, 'YYYY-MM-DD'.
        """
        date = _date(date)
        day = [{"event_id": eid, **e} for eid, e in self.events.items() if e["date"] == date]
        return sorted(day, key=lambda e: e["start"])

    def find_events(self, title: str) -> list[dict[str, Any]]:
        """Find events whose title contains a text (case-insensitive).

        Args:
            title: The text to look for.
        """
        needle = title.casefold()
        return [{"event_id": eid, **e} for eid, e in self.events.items() if needle in e["title"].casefold()]

    def create_event(self, title: str, date: str, start: str, end: str, attendees: list[str] | None = None) -> str:
        """Create an event; it must not overlap another event of that day.

        Args:
            title: What the event is.
            date: The day, 'YYYY-MM-DD'.
            start: Start time, 'HH:MM' (08:00 to 18:00).
            end: End time, 'HH:MM', after the start.
            attendees: Names of the people invited.

        Returns:
            The new event id.
        """
        date = _date(date)
        first, last = _minutes(start, "start"), _minutes(end, "end")
        if first >= last:
            raise ValueError("expected the start before the end")
        self._check_free(date, first, last)
        event_id = f"E-{self.next_event}"
        self.next_event += 1
        self.events[event_id] = {"title": title, "date": date, "start": start, "end": end,
                                 "attendees": sorted(set(attendees or []))}
        return event_id

    def cancel_event(self, event_id: str) -> str:
        """Delete an event.

        Args:
            event_id: The event to delete, e.g. 'E-2'.
        """
        if self.events.pop(event_id, None) is None:
            raise ValueError(f"no event {event_id!r}")
        return f"cancelled {event_id}"

    def reschedule_event(self, event_id: str, date: str, start: str, end: str) -> str:
        """Move an event to another day or time; it must not overlap another event.

        Args:
            event_id: The event to move.
            date: The new day, 'YYYY-MM-DD'.
            start: The new start time, 'HH:MM'.
            end: The new end time, 'HH:MM'.
        """
        event = self.events.get(event_id)
        if event is None:
            raise ValueError(f"no event {event_id!r}")
        date = _date(date)
        first, last = _minutes(start, "start"), _minutes(end, "end")
        if first >= last:
            raise ValueError("expected the start before the end")
        self._check_free(date, first, last, ignore=event_id)
        event.update(date=date, start=start, end=end)
        return f"moved {event_id} to {date} {start}-{end}"

    def add_attendee(self, event_id: str, name: str) -> str:
        """Invite one more person to an event.

        Args:
            event_id: The event.
            name: The person's name.
        """
        event = self.events.get(event_id)
        if event is None:
            raise ValueError(f"no event {event_id!r}")
        if name in event["attendees"]:
            raise ValueError(f"{name} is already invited")
        event["attendees"] = sorted([*event["attendees"], name])
        return f"invited {name} to {event_id}"

    def free_slots(self, date: str, duration_minutes: int) -> list[str]:
        """Free slots of a day long enough for a meeting, on the hour and half hour.

        Args:
            date: The day, 'YYYY-MM-DD'.
            duration_minutes: How long the meeting is.

        Returns:
            Start times 'HH:MM' at which a meeting of that length fits.
        """
        date = _date(date)
        if duration_minutes < 1:
            raise ValueError(f"duration_minutes: expected at least 1, got {duration_minutes}")
        busy = [(_minutes(e["start"], "start"), _minutes(e["end"], "end"))
                for e in self.events.values() if e["date"] == date]
        slots = []
        for first in range(_DAY_START, _DAY_END - duration_minutes + 1, 30):
            last = first + duration_minutes
            if all(last <= b0 or b1 <= first for b0, b1 in busy):
                slots.append(f"{first // 60:02d}:{first % 60:02d}")
        return slots
