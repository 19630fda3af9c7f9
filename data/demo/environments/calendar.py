"""The user's calendar and the office's meeting rooms (the demo world of "约一个会议")."""

from __future__ import annotations

import random
from typing import Any

from agentune.tasks.environments.base import Environment, ToolError, generates, snapshot, writes
from agentune.tasks.environments.blueprints import PEOPLE

ROOMS = [
    {"room_id": "A101", "name": "Maple 枫", "capacity": 4, "floor": 1},
    {"room_id": "A102", "name": "Pine 松", "capacity": 8, "floor": 1},
    {"room_id": "B201", "name": "Cedar 杉", "capacity": 12, "floor": 2},
    {"room_id": "B202", "name": "Oak 橡", "capacity": 20, "floor": 2},
]
EVENTS = [
    {"event_id": "EV-001", "title": "周会 Weekly sync", "date": "2025-06-03", "start": "10:00",
     "end": "11:00", "room_id": "A102", "attendees": ["李伟", "王芳", "Alice Chen"]},
    {"event_id": "EV-002", "title": "Design review", "date": "2025-06-03", "start": "14:00",
     "end": "15:30", "room_id": "B201", "attendees": ["Alice Chen", "Bob Li"]},
    {"event_id": "EV-003", "title": "客户演示", "date": "2025-06-04", "start": "09:30",
     "end": "10:30", "room_id": "A101", "attendees": ["王芳"]},
    {"event_id": "EV-004", "title": "All hands", "date": "2025-06-05", "start": "16:00",
     "end": "17:00", "room_id": "B202", "attendees": ["everyone"]},
]


ROOM_NAMES = ("Maple 枫", "Pine 松", "Cedar 杉", "Oak 橡", "Birch 桦", "Willow 柳", "Bamboo 竹",
              "Lotus 莲", "Plum 梅", "Orchid 兰")
TITLES = ("周会", "Design review", "客户演示", "All hands", "预算评审", "Customer call",
          "Sprint planning", "招聘面试", "Roadmap review", "新人培训", "产品发布会", "Retro")


def _minutes(hhmm: str) -> int:
    try:
        hours, minutes = hhmm.split(":")
        value = int(hours) * 60 + int(minutes)
    except ValueError:
        raise ToolError(f"time {hhmm!r} is not HH:MM") from None
    if not 0 <= value < 24 * 60:
        raise ToolError(f"time {hhmm!r} is not HH:MM")
    return value


def _clock(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


class Calendar(Environment):
    name = "calendar"
    description = {"en": "The user's calendar and the office's meeting rooms.",
                   "zh": "用户的日程和公司的会议室。"}

    def reset(self, **state: Any) -> None:
        self.rooms = snapshot(state.get("rooms", ROOMS))
        self.events = snapshot(state.get("events", EVENTS))
        self.next_event = state.get("next_event", 5)

    def state(self) -> dict[str, Any]:
        return snapshot({"rooms": self.rooms, "events": self.events,
                              "next_event": self.next_event})

    @classmethod
    def sample_state(cls, rng: random.Random) -> dict[str, Any]:
        """A new office: 3-6 rooms on a few floors, and 4-9 meetings over the coming days."""
        rooms = []
        for i, name in enumerate(rng.sample(ROOM_NAMES, rng.randint(3, 6))):
            floor = rng.randint(1, 9)
            rooms.append({"room_id": f"{'ABCDEFGHJK'[floor]}{floor}{i + 1:02d}", "name": name,
                          "capacity": rng.choice((4, 6, 8, 10, 12, 16, 20)), "floor": floor})
        events = []
        next_event = rng.randint(10, 400)
        for title in rng.sample(TITLES, rng.randint(4, 9)):
            room = rng.choice(rooms)
            day = f"2025-06-{rng.randint(3, 13):02d}"
            start = rng.randrange(9 * 60, 17 * 60, 30)
            if any(e["room_id"] == room["room_id"] and e["date"] == day for e in events):
                continue
            people = rng.sample(PEOPLE, rng.randint(1, min(5, room["capacity"])))
            events.append({"event_id": f"EV-{next_event:03d}", "title": title, "date": day,
                           "start": _clock(start), "end": _clock(start + rng.choice((30, 60, 90))),
                           "room_id": room["room_id"], "attendees": people})
            next_event += 1
        return {"rooms": rooms, "events": events, "next_event": next_event}

    def calendar_list_events(self, date: str) -> list[dict]:
        """List the events on the user's calendar on a day. 列出某一天日程上的会议和活动。

        Args:
            date: The day, YYYY-MM-DD.
        """
        return sorted((e for e in self.events if e["date"] == date), key=lambda e: e["start"])

    def list_rooms(self, min_capacity: int = 1) -> list[dict]:
        """List the meeting rooms that seat at least a number of people. 列出能容纳指定人数的会议室。

        Args:
            min_capacity: Seats needed.
        """
        return [r for r in self.rooms if r["capacity"] >= min_capacity]

    def find_free_rooms(self, date: str, start: str, duration_minutes: int,
                        min_capacity: int = 1) -> list[dict]:
        """Find the rooms free for a time slot and big enough. 查找某时段空闲且容量足够的会议室。

        Args:
            date: The day, YYYY-MM-DD.
            start: Start time, HH:MM.
            duration_minutes: Length of the slot in minutes.
            min_capacity: Seats needed.
        """
        begin = _minutes(start)
        end = begin + duration_minutes
        return [r for r in self.rooms if r["capacity"] >= min_capacity
                and not self._busy(r["room_id"], date, begin, end)]

    @generates("events.*.event_id", "next_event")
    def calendar_create_event(self, title: str, date: str, start: str, duration_minutes: int,
                              attendees: list[str], room_id: str | None = None) -> dict:
        """Create a meeting on the calendar, in a room if one is given. 在日程中创建会议，可指定会议室。

        Args:
            title: The meeting's title.
            date: The day, YYYY-MM-DD.
            start: Start time, HH:MM.
            duration_minutes: Length in minutes.
            attendees: Names of the people invited.
            room_id: The room, e.g. "A102"; leave out for a meeting without a room.
        """
        begin = _minutes(start)
        if duration_minutes < 5:
            raise ToolError("a meeting lasts at least 5 minutes")
        end = begin + duration_minutes
        if room_id is not None:
            room = next((r for r in self.rooms if r["room_id"] == room_id), None)
            if room is None:
                raise ToolError(f"no room {room_id}")
            if len(attendees) > room["capacity"]:
                raise ToolError(f"room {room_id} seats {room['capacity']}, not {len(attendees)}")
            if self._busy(room_id, date, begin, end):
                raise ToolError(f"room {room_id} is taken on {date} at that time")
        event = {"event_id": f"EV-{self.next_event:03d}", "title": title, "date": date,
                 "start": _clock(begin), "end": _clock(end), "room_id": room_id,
                 "attendees": list(attendees)}
        self.next_event += 1
        self.events.append(event)
        return dict(event)

    @writes
    def cancel_event(self, event_id: str) -> dict:
        """Cancel a meeting and free its room. 取消会议并释放会议室。

        Args:
            event_id: The event's id, e.g. "EV-002".
        """
        event = next((e for e in self.events if e["event_id"] == event_id), None)
        if event is None:
            raise ToolError(f"no event {event_id}")
        self.events.remove(event)
        return {"event_id": event_id, "cancelled": True, "title": event["title"]}

    def _busy(self, room_id: str, date: str, begin: int, end: int) -> bool:
        return any(e["room_id"] == room_id and e["date"] == date
                   and _minutes(e["start"]) < end and begin < _minutes(e["end"])
                   for e in self.events)
