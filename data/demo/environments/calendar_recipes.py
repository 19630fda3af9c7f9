"""Task recipes of the calendar environment (tools.yaml: `recipes:`), generated in sampled
offices when `scenarios.generate.enabled` is on. Each `bind` reads the Calendar state and returns
the slots, or raises Unbound when this office has nothing that fits."""

from __future__ import annotations

import random
from typing import Any

from agentune.tasks.environments.blueprints import (
    Day,
    Recipe,
    Text,
    Unbound,
    call,
    choose,
    group_by,
    person,
)

TITLES = (("项目同步会", "Project sync"), ("季度规划", "Quarterly planning"),
          ("面试", "Interview"), ("午餐会", "Lunch meeting"), ("方案讨论", "Proposal review"))


def minutes(hhmm: str) -> int:
    hours, mins = hhmm.split(":")
    return int(hours) * 60 + int(mins)


def clock(value: int) -> str:
    return f"{value // 60:02d}:{value % 60:02d}"


def free(world: dict[str, Any], room: dict[str, Any], day: str, start: int, length: int) -> bool:
    return not any(e["room_id"] == room["room_id"] and e["date"] == day
                   and minutes(e["start"]) < start + length and start < minutes(e["end"])
                   for e in world["events"])


def people(rng: random.Random, count: int) -> dict[str, Any]:
    names: list[str] = []
    for _ in range(count):
        names.append(person(rng, besides=names))
    return {"attendees": names, "who": Text("、".join(names), ", ".join(names))}


def a_slot(rng: random.Random) -> dict[str, Any]:
    title = Text(*rng.choice(TITLES))
    return {"title": title, "day": Day(f"2025-06-{rng.randint(3, 13):02d}"),
            "start": clock(rng.randrange(9 * 60, 17 * 60, 30)),
            "length": rng.choice((30, 45, 60, 90))}


def day_with_events(world: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    days = list(group_by(world["events"], "date").items())
    (day,), events = choose(rng, days, "no events")
    return {"day": Day(day), "title": sorted(events, key=lambda e: e["start"])[0]["title"]}


def two_days(world: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    days = list(group_by(world["events"], "date").items())
    if len(days) < 2:
        raise Unbound("fewer than two days with events")
    ((a,), in_a), ((b,), in_b) = sorted(rng.sample(days, 2))
    return {"day_a": Day(a), "day_b": Day(b), "title_a": in_a[0]["title"],
            "title_b": in_b[0]["title"]}


def rooms_for(world: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    room = choose(rng, world["rooms"], "no rooms")
    return {"seats": rng.randint(2, room["capacity"]), "room": room["room_id"]}


def free_room_slot(world: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """A slot (on a day with meetings) where some room that seats the group is free."""
    event = choose(rng, world["events"], "no events")
    slot = {**a_slot(rng), "day": Day(event["date"]), "start": event["start"]}
    seats = rng.randint(2, 8)
    rooms = [r for r in world["rooms"] if r["capacity"] >= seats and free(
        world, r, event["date"], minutes(event["start"]), slot["length"])]
    return {**slot, "seats": seats, "room": choose(rng, rooms, "no free room fits")["room_id"]}


def one_free_room(world: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """A meeting whose slot and size leave exactly one free room (so the booking is one)."""
    for _ in range(20):
        slot = a_slot(rng)
        group = people(rng, rng.randint(2, 6))
        fits = [r for r in world["rooms"] if r["capacity"] >= len(group["attendees"])
                and free(world, r, slot["day"].iso, minutes(slot["start"]), slot["length"])]
        if len(fits) == 1:
            return {**slot, **group, "seats": len(group["attendees"]), "room": fits[0]["room_id"]}
    raise Unbound("no slot with exactly one free room that fits")


def a_meeting(world: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    return {**a_slot(rng), **people(rng, rng.randint(1, 3))}


def meeting_to_cancel(world: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """A meeting whose title is the only one of its day."""
    events = [e for e in world["events"] if sum(
        o["date"] == e["date"] and o["title"] == e["title"] for o in world["events"]) == 1]
    event = choose(rng, events, "no meeting to cancel")
    return {"day": Day(event["date"]), "title": event["title"], "event": event["event_id"],
            "start": event["start"]}


CREATE = call("calendar_create_event", title="{title}", date="{day}", start="{start}",
              duration_minutes="{length}", attendees="{attendees}")

RECIPES = [
    Recipe(
        id="calendar.events_on_a_day", kind="single_call", bind=day_with_events,
        calls=[[call("calendar_list_events", date="{day}")]],
        phrasings={
            "zh": {"order": "列出我{day:zh}的日程。", "question": "我{day:zhw}有哪些会？",
                   "story": "{day:zh}想请半天假，先看看那天都排了什么会。"},
            "en": {"order": "List my meetings on {day:en}.",
                   "question": "What's on my calendar on {day:enw}?",
                   "story": "I might take {day:en} off; first tell me what I'd be missing "
                            "that day."}},
        facts=["{title}"]),
    Recipe(
        id="calendar.rooms_for_people", kind="single_call", bind=rooms_for,
        calls=[[call("list_rooms", min_capacity="{seats}")]],
        phrasings={
            "zh": {"order": "列出能坐下{seats}个人的会议室。", "question": "哪些会议室能容纳{seats}人？",
                   "story": "我们组{seats}个人要开会，看看有哪些会议室坐得下。"},
            "en": {"order": "List the rooms that seat {seats} or more.",
                   "question": "Which meeting rooms fit {seats} people?",
                   "story": "My team of {seats} needs a place to meet. Which rooms are big "
                            "enough?"}},
        facts=["{room}"]),
    Recipe(
        id="calendar.free_rooms", kind="single_call", bind=free_room_slot,
        calls=[[call("find_free_rooms", date="{day}", start="{start}",
                     duration_minutes="{length}", min_capacity="{seats}")]],
        phrasings={
            "zh": {"order": "找一间{day:zh}{start}开始、{length}分钟内空闲的会议室，要坐得下{seats}人。",
                   "question": "{day:zhw}{start}有没有能坐{seats}个人的空会议室？用{length}分钟。",
                   "story": "临时要拉{seats}个人在{day:zh}{start}碰一下，大概{length}分钟，哪间会议室空着？"},
            "en": {"order": "Find a room for {seats} that is free on {day:en} from {start} for "
                            "{length} minutes.",
                   "question": "Is any room for {seats} people free on {day:enw} at {start} for "
                               "{length} minutes?",
                   "story": "I need to pull {seats} people together on {day:en} at {start} for "
                            "about {length} minutes. Which rooms are open?"}},
        facts=["{room}"]),
    Recipe(
        id="calendar.meeting_without_room", kind="single_call", bind=a_meeting,
        calls=[[CREATE]],
        phrasings={
            "zh": {"order": "在日程上加一个会：“{title}”，{day:zh}{start}开始，{length}分钟，参加的人有{who}，不用会议室。",
                   "question": "能帮我在{day:zhw}{start}排个“{title}”吗？{length}分钟，叫上{who}，线上开就行。",
                   "form": "新建会议｜标题：{title}｜日期：{day}｜开始：{start}｜时长：{length}分钟｜参会：{who}｜会议室：无"},
            "en": {"order": "Put \"{title}\" on my calendar on {day:en} at {start} for {length} "
                            "minutes with {who}, no room.",
                   "question": "Can you schedule \"{title}\" for {day:enw} at {start}? "
                               "{length} minutes, invite {who}; it's online, so no room.",
                   "form": "New meeting - title: {title}; date: {day}; start: {start}; length: "
                           "{length} min; attendees: {who}; room: none"}},
        facts=["{start}"]),
    Recipe(
        id="calendar.meeting_in_free_room", kind="multi_step", bind=one_free_room,
        calls=[[call("find_free_rooms", date="{day}", start="{start}",
                     duration_minutes="{length}", min_capacity="{seats}")],
               [call("calendar_create_event", title="{title}", date="{day}", start="{start}",
                     duration_minutes="{length}", attendees="{attendees}", room_id="{room}")]],
        phrasings={
            "zh": {"order": "约一个会议：标题“{title}”，{day:zh}{start}，{length}分钟，参会人{who}，找一间空闲且坐得下的会议室。",
                   "question": "{day:zhw}{start}想和{who}开“{title}”，{length}分钟，有合适的空会议室就直接订上好吗？",
                   "story": "{who}和我要在{day:zh}{start}碰一下“{title}”，大概{length}分钟，麻烦找个空会议室把会约上。"},
            "en": {"order": "Book \"{title}\" on {day:en} at {start} for {length} minutes with "
                            "{who} in a free room that fits everyone.",
                   "question": "Could you find a free room for \"{title}\" with {who} on "
                               "{day:enw} at {start} ({length} min) and book it?",
                   "story": "{who} and I need to sit down for \"{title}\" on {day:en} at "
                            "{start}, about {length} minutes. Grab whatever room is free and "
                            "fits, and set it up."}},
        facts=["{room}"]),
    Recipe(
        id="calendar.cancel_meeting", kind="multi_step", bind=meeting_to_cancel,
        calls=[[call("calendar_list_events", date="{day}")],
               [call("cancel_event", event_id="{event}")]],
        phrasings={
            "zh": {"order": "把{day:zh}的“{title}”取消掉。", "question": "{day:zhw}那个“{title}”能取消吗？帮我取消。",
                   "story": "“{title}”那边人到不齐，{day:zh}的会就不开了，帮我从日程里撤掉。"},
            "en": {"order": "Cancel \"{title}\" on {day:en}.",
                   "question": "Can you cancel my \"{title}\" meeting on {day:enw}?",
                   "story": "Half the people can't make \"{title}\" on {day:en}, so let's drop "
                            "it from the calendar."}},
        facts=["{title}"]),
    Recipe(
        id="calendar.two_days", kind="parallel_calls", bind=two_days,
        calls=[[call("calendar_list_events", date="{day_a}"),
                call("calendar_list_events", date="{day_b}")]],
        phrasings={
            "zh": {"order": "帮我看看{day_a:zh}和{day_b:zh}的日程。",
                   "question": "{day_a:zh}和{day_b:zh}这两天我都有什么会？",
                   "story": "我在考虑{day_a:zh}或{day_b:zh}出差，先把这两天的会都列出来比较一下。"},
            "en": {"order": "Show my calendar for {day_a:en} and {day_b:en}.",
                   "question": "What meetings do I have on {day_a:en} and on {day_b:en}?",
                   "story": "I could travel either {day_a:en} or {day_b:en}; list both days' "
                            "meetings so I can compare."}},
        facts=["{title_a}", "{title_b}"]),
    Recipe(
        id="calendar.meeting_asked", kind="missing_info", bind=a_meeting,
        calls=[[CREATE]],
        phrasings={
            "zh": {"order": "帮我排一个会议。", "question": "能帮我安排一个会议吗？",
                   "story": "最近有件事得拉几个人聊聊，帮我把会排上。"},
            "en": {"order": "Set up a meeting for me.", "question": "Can you schedule a meeting?",
                   "story": "There's something I need to talk through with a few people; get "
                            "it on the calendar."}},
        hidden={"zh": "标题“{title}”，{day:zh}{start}开始，{length}分钟，参会人{who}，不用会议室。",
                "en": "Title \"{title}\", {day} at {start} for {length} minutes with {who}, "
                      "no room."},
        facts=["{start}"]),
    Recipe(
        id="calendar.meeting_advice", kind="no_tool", bind=a_meeting,
        phrasings={
            "zh": {"order": "给“{title}”列三个议程。", "question": "“{title}”这种会怎么开比较高效？",
                   "story": "下次的“{title}”由我主持，我有点紧张，给点建议。"},
            "en": {"order": "Suggest three agenda items for \"{title}\".",
                   "question": "How do I keep a \"{title}\" meeting efficient?",
                   "story": "I'm running \"{title}\" next time and I'm a bit nervous. Any "
                            "advice?"}}),
    Recipe(
        id="calendar.out_of_scope", kind="irrelevant", bind=a_meeting,
        phrasings={
            "zh": {"order": "给{day:zh}的“{title}”订一个生日蛋糕。",
                   "question": "能帮我把“{title}”的会议纪要翻译成英文吗？",
                   "story": "{who}{day:zh}要来开会，帮他们订好停车位。"},
            "en": {"order": "Order a birthday cake for \"{title}\" on {day:en}.",
                   "question": "Could you translate the minutes of \"{title}\" into French?",
                   "story": "{who} are coming in on {day:en}; reserve parking spots for "
                            "them."}}),
]
