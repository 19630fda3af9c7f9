"""Task recipes of the travel environment (tools.yaml: `recipes:`): what build_scenarios generates
in sampled travel worlds when `scenarios.generate.enabled` is on. README "Scenarios at scale"
walks through the first one. Each `bind` reads the world (the Travel state) and returns the slots;
it raises Unbound when this world has nothing that fits."""

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

EN = {"北京": "Beijing", "上海": "Shanghai", "广州": "Guangzhou", "深圳": "Shenzhen",
      "成都": "Chengdu", "杭州": "Hangzhou", "西安": "Xi'an", "重庆": "Chongqing", "南京": "Nanjing",
      "武汉": "Wuhan", "厦门": "Xiamen", "青岛": "Qingdao", "昆明": "Kunming", "长沙": "Changsha",
      "天津": "Tianjin", "苏州": "Suzhou", "大连": "Dalian", "三亚": "Sanya"}


def city(name: str) -> Text:
    """A city as a request says it: 北京 in Chinese, Beijing in English."""
    return Text(name, EN.get(name, name))


def route_slots(trips: list[dict[str, Any]]) -> dict[str, Any]:
    first = trips[0]
    return {"origin": city(first["origin"]), "destination": city(first["destination"]),
            "day": Day(first["date"])}


def flights_on_a_day(world: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """A route and day with flights; the first of them (by departure) must be in the answer."""
    groups = list(group_by(world["flights"], "origin", "destination", "date").values())
    trips = sorted(choose(rng, groups, "no flights"), key=lambda f: f["depart"])
    return {**route_slots(trips), "flight": trips[0]["flight_id"]}


def trains_on_a_day(world: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    groups = list(group_by(world["trains"], "origin", "destination", "date").values())
    trips = sorted(choose(rng, groups, "no trains"), key=lambda t: t["depart"])
    return {**route_slots(trips), "train": trips[0]["train_id"]}


def cheapest_flight(world: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """A route and day with two or more flights whose cheapest still has a seat."""
    groups = [sorted(g, key=lambda f: f["price"]) for g in
              group_by(world["flights"], "origin", "destination", "date").values() if len(g) > 1]
    groups = [g for g in groups if g[0]["seats"] > 0 and g[0]["price"] < g[1]["price"]]
    trips = choose(rng, groups, "no route with a cheapest flight that has seats")
    return {**route_slots(trips), "flight": trips[0]["flight_id"], "price": trips[0]["price"],
            "passenger": person(rng)}


def flight_to_book(world: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """A flight with a seat whose departure time tells it apart on its route and day."""
    groups = group_by(world["flights"], "origin", "destination", "date")
    free = [f for g in groups.values() for f in g if f["seats"] > 0
            and sum(o["depart"] == f["depart"] for o in g) == 1]
    flight = choose(rng, free, "no flight with a free seat")
    return {**route_slots([flight]), "flight": flight["flight_id"], "depart": flight["depart"],
            "passenger": person(rng)}


def cheapest_hotel(world: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    groups = [sorted(g, key=lambda h: h["price_per_night"])
              for g in group_by(world["hotels"], "city").values()]
    groups = [g for g in groups if g[0]["rooms"] > 0
              and (len(g) == 1 or g[0]["price_per_night"] < g[1]["price_per_night"])]
    hotels = choose(rng, groups, "no city whose cheapest hotel has a room")
    nights = rng.randint(1, 4)
    return {"city": city(hotels[0]["city"]), "hotel": hotels[0]["hotel_id"], "nights": nights,
            "check_in": Day(f"2025-06-{rng.randint(3, 13):02d}"), "guest": person(rng),
            "total": hotels[0]["price_per_night"] * nights}


def hotels_under(world: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """A city and a price cap (a round hundred) that some of its hotels are under."""
    hotel = choose(rng, world["hotels"], "no hotels")
    cap = (hotel["price_per_night"] // 100 + 1) * 100
    return {"city": city(hotel["city"]), "cap": cap, "hotel_name": hotel["name"]}


def flights_and_trains(world: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    trains = group_by(world["trains"], "origin", "destination", "date")
    flights = group_by(world["flights"], "origin", "destination", "date")
    both = sorted(set(trains) & set(flights))
    key = choose(rng, both, "no route with both flights and trains on one day")
    return {**route_slots(flights[key]), "flight": flights[key][0]["flight_id"],
            "train": trains[key][0]["train_id"]}


def two_hotel_cities(world: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    cities = list(group_by(world["hotels"], "city").items())
    if len(cities) < 2:
        raise Unbound("fewer than two cities with hotels")
    (a, in_a), (b, in_b) = rng.sample(cities, 2)
    return {"city_a": city(a[0]), "city_b": city(b[0]), "hotel_a": in_a[0]["name"],
            "hotel_b": in_b[0]["name"]}


def booking_to_cancel(world: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """A confirmed flight booking, the only one on its day (so "my flight on <day>" is one)."""
    confirmed = [b for b in world["bookings"] if b["status"] == "confirmed"]
    alone = [b for b in confirmed if sum(o["date"] == b["date"] for o in confirmed) == 1]
    booking = choose(rng, alone, "no booking to cancel")
    return {"booking": booking["booking_id"], "day": Day(booking["date"]),
            "refund": booking["price"]}


def any_city(world: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    return {"city": city(choose(rng, sorted({h["city"] for h in world["hotels"]}), "no city")),
            "days": rng.randint(2, 6)}


def any_flight(world: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    flight = choose(rng, world["flights"], "no flights")
    return {**route_slots([flight]), "flight": flight["flight_id"]}


SEARCH_FLIGHTS = call("search_flights", origin="{origin}", destination="{destination}",
                      departure_date="{day}")
SEARCH_TRAINS = call("search_trains", origin="{origin}", destination="{destination}",
                     date="{day}")

RECIPES = [
    Recipe(
        id="travel.flights_on_a_day", kind="single_call", bind=flights_on_a_day,
        calls=[[SEARCH_FLIGHTS]],
        phrasings={
            "zh": {"order": "帮我查一下{day:zh}从{origin}飞{destination}的航班。",
                   "question": "{day:zhw}{origin}到{destination}都有哪些航班？",
                   "story": "我{day:zh}要从{origin}去{destination}办事，看看那天有什么航班可以坐。",
                   "form": "航班查询｜出发：{origin}｜到达：{destination}｜日期：{day}"},
            "en": {"order": "Look up flights from {origin} to {destination} on {day:en}.",
                   "question": "Which flights go from {origin} to {destination} on {day:enw}?",
                   "story": "I have to be in {destination} on {day:en}, leaving from {origin}. "
                            "What flights can I take that day?",
                   "form": "Flight search - from: {origin}; to: {destination}; date: {day}"}},
        facts=["{flight}"]),
    Recipe(
        id="travel.trains_on_a_day", kind="single_call", bind=trains_on_a_day,
        calls=[[SEARCH_TRAINS]],
        phrasings={
            "zh": {"order": "查一下{day:zh}{origin}到{destination}的高铁。",
                   "question": "{day:zhw}从{origin}坐高铁去{destination}，有哪些车次？",
                   "story": "我想{day:zh}坐火车从{origin}去{destination}，帮我看看有哪些车。"},
            "en": {"order": "Show me the trains from {origin} to {destination} on {day:en}.",
                   "question": "Are there high-speed trains from {origin} to {destination} on "
                               "{day:enw}?",
                   "story": "I'd rather take the train to {destination} on {day:en}; I'm in "
                            "{origin}. What runs that day?"}},
        facts=["{train}"]),
    Recipe(
        id="travel.hotels_under", kind="single_call", bind=hotels_under,
        calls=[[call("search_hotels", location="{city}", max_price_per_night="{cap}")]],
        phrasings={
            "zh": {"order": "找一下{city}每晚{cap}元以内的酒店。",
                   "question": "{city}有没有一晚不超过{cap}块的酒店？",
                   "story": "预算有限，去{city}住宿每晚最多花{cap}元，帮我看看有哪些酒店。"},
            "en": {"order": "Find hotels in {city} under {cap} CNY a night.",
                   "question": "Which hotels in {city} cost at most {cap} CNY per night?",
                   "story": "My budget for {city} is {cap} CNY a night at most. What hotels fit?"}},
        facts=["{hotel_name}"]),
    Recipe(
        id="travel.book_cheapest_flight", kind="multi_step", bind=cheapest_flight,
        calls=[[SEARCH_FLIGHTS], [call("book_flight", flight_id="{flight}",
                                       passenger="{passenger}")]],
        phrasings={
            "zh": {"order": "帮{passenger}订一张{day:zh}{origin}到{destination}最便宜的机票。",
                   "question": "{day:zhw}{origin}飞{destination}哪班最便宜？直接帮{passenger}订上。",
                   "story": "{passenger}{day:zh}要从{origin}去{destination}，公司要求订最便宜的航班，"
                            "麻烦帮忙订一下。",
                   "form": "订票｜乘客：{passenger}｜{origin}→{destination}｜{day}｜要求：最低价"},
            "en": {"order": "Book the cheapest flight from {origin} to {destination} on "
                            "{day:en} for {passenger}.",
                   "question": "What's the cheapest {origin} to {destination} flight on "
                               "{day:enw}? Please book it for {passenger}.",
                   "story": "{passenger} needs to get from {origin} to {destination} on "
                            "{day:en} and we're on a tight budget, so put them on the lowest fare.",
                   "form": "Booking request - passenger: {passenger}; route: {origin} to "
                           "{destination}; date: {day}; fare: cheapest"}},
        facts=["{flight}", "{results[1][0][booking_id]}"]),
    Recipe(
        id="travel.book_cheapest_hotel", kind="multi_step", bind=cheapest_hotel,
        calls=[[call("search_hotels", location="{city}")],
               [call("book_hotel", hotel_id="{hotel}", check_in="{check_in}", nights="{nights}",
                     guest_name="{guest}")]],
        phrasings={
            "zh": {"order": "给{guest}订{city}最便宜的酒店，{check_in:zh}入住，住{nights}晚。",
                   "question": "{city}哪家酒店最便宜？帮{guest}订{nights}晚，{check_in:zh}入住。",
                   "story": "{guest}{check_in:zh}到{city}，要待{nights}晚，住哪都行，越便宜越好，帮忙订一下。"},
            "en": {"order": "Book the cheapest hotel in {city} for {guest}: check in "
                            "{check_in:en}, {nights} night(s).",
                   "question": "Which hotel in {city} is cheapest? Reserve it for {guest} from "
                               "{check_in:en} for {nights} night(s).",
                   "story": "{guest} arrives in {city} on {check_in:en} and stays {nights} "
                            "night(s). Any hotel is fine as long as it's the cheapest - book it."}},
        facts=["{total}", "{results[1][0][booking_id]}"]),
    Recipe(
        id="travel.flights_and_trains", kind="parallel_calls", bind=flights_and_trains,
        calls=[[SEARCH_FLIGHTS, SEARCH_TRAINS]],
        phrasings={
            "zh": {"order": "同时帮我查一下{day:zh}{origin}到{destination}的航班和高铁。",
                   "question": "{day:zhw}从{origin}去{destination}，飞机和高铁各有哪些选择？",
                   "story": "我还没想好{day:zh}去{destination}是坐飞机还是坐高铁，从{origin}出发，两种都帮我看看。"},
            "en": {"order": "Check both flights and trains from {origin} to {destination} on "
                            "{day:en}.",
                   "question": "On {day:enw}, what are my flight and train options from "
                               "{origin} to {destination}?",
                   "story": "I can't decide between flying and taking the train from {origin} "
                            "to {destination} on {day:en}. Show me both."}},
        facts=["{flight}", "{train}"]),
    Recipe(
        id="travel.hotels_two_cities", kind="parallel_calls", bind=two_hotel_cities,
        calls=[[call("search_hotels", location="{city_a}"),
                call("search_hotels", location="{city_b}")]],
        phrasings={
            "zh": {"order": "分别查一下{city_a}和{city_b}的酒店。",
                   "question": "{city_a}和{city_b}各有哪些酒店？",
                   "story": "这趟要先去{city_a}再去{city_b}，两个地方的酒店都帮我看看。"},
            "en": {"order": "List the hotels in {city_a} and in {city_b}.",
                   "question": "What hotels do you have in {city_a}, and in {city_b}?",
                   "story": "My trip goes through {city_a} and then {city_b}; I need a place to "
                            "stay in both. What's available?"}},
        facts=["{hotel_a}", "{hotel_b}"]),
    Recipe(
        id="travel.cancel_my_flight", kind="multi_step", bind=booking_to_cancel,
        calls=[[call("list_bookings")], [call("cancel_booking", booking_id="{booking}")]],
        phrasings={
            "zh": {"order": "把我{day:zh}的那张机票退掉。",
                   "question": "我{day:zhw}订的航班能取消吗？帮我取消。",
                   "story": "计划有变，{day:zh}不出门了，把那天订的机票取消吧。"},
            "en": {"order": "Cancel my flight booking for {day:en}.",
                   "question": "Can you cancel the flight I booked for {day:enw}?",
                   "story": "Plans changed and I'm not travelling on {day:en} anymore - please "
                            "drop that flight booking."}},
        facts=["{refund}"]),
    Recipe(
        id="travel.book_flight_asked", kind="missing_info", bind=flight_to_book,
        calls=[[SEARCH_FLIGHTS], [call("book_flight", flight_id="{flight}",
                                       passenger="{passenger}")]],
        phrasings={
            "zh": {"order": "给我订张飞{destination}的票。",
                   "question": "能帮我订个去{destination}的航班吗？",
                   "story": "过几天要去{destination}一趟，机票你帮我搞定吧。"},
            "en": {"order": "Book me a flight to {destination}.",
                   "question": "Could you get me on a flight to {destination}?",
                   "story": "I'm heading to {destination} soon and need a plane ticket sorted."}},
        hidden={"zh": "从{origin}出发，{day:zh}，坐{depart}起飞的那班，乘客是{passenger}。",
                "en": "From {origin} on {day}, the {depart} departure; the passenger is "
                      "{passenger}."},
        facts=["{flight}"]),
    Recipe(
        id="travel.trip_advice", kind="no_tool", bind=any_city,
        phrasings={
            "zh": {"order": "去{city}玩{days}天，行李一般要带些什么？",
                   "question": "第一次去{city}，有什么需要注意的吗？",
                   "story": "我要去{city}出差{days}天，顺便想逛逛，给点建议吧。"},
            "en": {"order": "Give me a packing list for {days} days in {city}.",
                   "question": "Any tips for a first visit to {city}?",
                   "story": "I'll spend {days} days in {city} for work and want to see a bit "
                            "of it too. Suggestions?"}}),
    Recipe(
        id="travel.out_of_scope", kind="irrelevant", bind=any_flight,
        phrasings={
            "zh": {"order": "帮我给航班{flight}办一下网上值机。",
                   "question": "{destination}机场现在能帮我叫辆出租车吗？",
                   "story": "我{day:zh}飞{destination}，护照快过期了，帮我在网上续签一下。"},
            "en": {"order": "Check me in online for flight {flight}.",
                   "question": "Can you call me a taxi to {origin} airport right now?",
                   "story": "I fly to {destination} on {day:en} and my passport is about to "
                            "expire - renew it online for me."}}),
]
