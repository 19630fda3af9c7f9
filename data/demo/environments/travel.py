"""Travel booking: flights, trains and hotels, and the user's bookings (the demo world of
"订一张周五去上海的机票")."""

from __future__ import annotations

import random
from typing import Any

from agentune.tasks.environments.base import Environment, ToolError, generates, snapshot, writes
from agentune.tasks.environments.blueprints import PEOPLE

CITY_NAMES = {"北京": "Beijing", "上海": "Shanghai", "广州": "Guangzhou", "深圳": "Shenzhen",
              "成都": "Chengdu", "杭州": "Hangzhou", "西安": "Xi'an", "重庆": "Chongqing",
              "南京": "Nanjing", "武汉": "Wuhan", "厦门": "Xiamen", "青岛": "Qingdao",
              "昆明": "Kunming", "长沙": "Changsha", "天津": "Tianjin", "苏州": "Suzhou",
              "大连": "Dalian", "三亚": "Sanya"}
"""The cities the tools know, by Chinese name, with their English names."""
CITIES = {**{zh: zh for zh in CITY_NAMES}, **{en.lower(): zh for zh, en in CITY_NAMES.items()}}

FLIGHTS = [
    {"flight_id": "CA1501", "origin": "北京", "destination": "上海", "date": "2025-06-06",
     "depart": "08:00", "arrive": "10:15", "price": 1280, "seats": 4},
    {"flight_id": "MU5102", "origin": "北京", "destination": "上海", "date": "2025-06-06",
     "depart": "13:30", "arrive": "15:40", "price": 960, "seats": 9},
    {"flight_id": "HO1254", "origin": "北京", "destination": "上海", "date": "2025-06-07",
     "depart": "09:10", "arrive": "11:20", "price": 880, "seats": 2},
    {"flight_id": "CZ3108", "origin": "北京", "destination": "广州", "date": "2025-06-06",
     "depart": "07:45", "arrive": "11:00", "price": 1460, "seats": 6},
    {"flight_id": "MU5137", "origin": "上海", "destination": "北京", "date": "2025-06-08",
     "depart": "18:00", "arrive": "20:15", "price": 1050, "seats": 7},
    {"flight_id": "3U8881", "origin": "上海", "destination": "成都", "date": "2025-06-05",
     "depart": "10:00", "arrive": "13:25", "price": 1190, "seats": 3},
    {"flight_id": "ZH9801", "origin": "深圳", "destination": "杭州", "date": "2025-06-04",
     "depart": "16:20", "arrive": "18:30", "price": 740, "seats": 0},
    {"flight_id": "MF8563", "origin": "深圳", "destination": "杭州", "date": "2025-06-04",
     "depart": "20:05", "arrive": "22:10", "price": 690, "seats": 5},
]
TRAINS = [
    {"train_id": "G1", "origin": "北京", "destination": "上海", "date": "2025-06-06",
     "depart": "09:00", "arrive": "13:28", "price": 669, "seats": 20},
    {"train_id": "G7", "origin": "北京", "destination": "上海", "date": "2025-06-06",
     "depart": "16:00", "arrive": "20:36", "price": 598, "seats": 0},
    {"train_id": "G7301", "origin": "上海", "destination": "杭州", "date": "2025-06-07",
     "depart": "08:30", "arrive": "09:28", "price": 73, "seats": 40},
]
HOTELS = [
    {"hotel_id": "H-SH-01", "city": "上海", "name": "外滩江景酒店", "price_per_night": 980,
     "rating": 4.7, "rooms": 3},
    {"hotel_id": "H-SH-02", "city": "上海", "name": "静安商务酒店", "price_per_night": 560,
     "rating": 4.3, "rooms": 5},
    {"hotel_id": "H-CD-01", "city": "成都", "name": "宽窄巷子客栈", "price_per_night": 420,
     "rating": 4.5, "rooms": 2},
    {"hotel_id": "H-HZ-01", "city": "杭州", "name": "西湖湖畔酒店", "price_per_night": 1150,
     "rating": 4.8, "rooms": 1},
]


AIRLINES = ("CA", "MU", "CZ", "HU", "ZH", "3U", "MF", "HO", "SC", "FM", "GS", "KN")
HOTEL_WORDS = ("江景", "商务", "花园", "国际", "湖畔", "假日", "精品", "雅居", "山水", "悦来")
WEEK = tuple(f"2025-06-{d:02d}" for d in range(3, 14))
"""The days sampled worlds sell travel on (the demo's clock is Monday 2025-06-02)."""


def _clock(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def _trip(rng: random.Random, prefix: str, number: str, a: str, b: str, day: str,
          minutes: int, price: int, seats: int) -> dict:
    depart = rng.randrange(6 * 60, 21 * 60, 5)
    id_key = "flight_id" if prefix != "train" else "train_id"
    return {id_key: number, "origin": a, "destination": b, "date": day, "depart": _clock(depart),
            "arrive": _clock(min(depart + minutes, 23 * 60 + 55)), "price": price, "seats": seats}


def _city(name: str) -> str:
    city = CITIES.get(name.strip().lower())
    if city is None:
        raise ToolError(f"unknown city {name!r}")
    return city


class Travel(Environment):
    name = "travel"
    description = {"en": "Flights, trains and hotels between Chinese cities, and the user's "
                   "bookings.", "zh": "国内城市间的航班、火车和酒店，以及用户的预订。"}

    def reset(self, **state: Any) -> None:
        self.flights = snapshot(state.get("flights", FLIGHTS))
        self.trains = snapshot(state.get("trains", TRAINS))
        self.hotels = snapshot(state.get("hotels", HOTELS))
        self.bookings = snapshot(state.get("bookings", []))
        self.next_booking = state.get("next_booking", 1)

    def state(self) -> dict[str, Any]:
        return snapshot({"flights": self.flights, "trains": self.trains,
                              "hotels": self.hotels, "bookings": self.bookings,
                              "next_booking": self.next_booking})

    @classmethod
    def sample_state(cls, rng: random.Random) -> dict[str, Any]:
        """A new world: 6 of the known cities, flights and trains between some of them over the
        coming days (a few sold out), their hotels, and maybe a booking or two."""
        cities = rng.sample(sorted(CITY_NAMES), 6)
        routes = rng.sample([(a, b) for a in cities for b in cities if a != b], 8)
        flights: list[dict] = []
        trains: list[dict] = []
        used: set[str] = set()
        for a, b in routes:
            for day in rng.sample(WEEK, rng.randint(1, 2)):
                for _ in range(rng.randint(1, 3)):
                    number = f"{rng.choice(AIRLINES)}{rng.randint(1000, 9899)}"
                    if number not in used:
                        used.add(number)
                        flights.append(_trip(rng, "flight", number, a, b, day,
                                             rng.randrange(80, 240, 5), rng.randrange(450, 2300, 10),
                                             rng.choice((0, 1, 2, 3, 5, 8, 9))))
                if rng.random() < 0.5:
                    for _ in range(rng.randint(1, 2)):
                        number = f"{rng.choice('GD')}{rng.randint(1, 9899)}"
                        if number not in used:
                            used.add(number)
                            trains.append(_trip(rng, "train", number, a, b, day,
                                                rng.randrange(60, 420, 5),
                                                rng.randrange(60, 900), rng.choice((0, 5, 20, 40))))
        hotels = []
        for city in cities:
            words = rng.sample(HOTEL_WORDS, rng.randint(1, 3))
            code = CITY_NAMES[city][:2].upper()
            hotels += [{"hotel_id": f"H-{code}-{len(hotels) + i + 1:02d}", "city": city,
                        "name": f"{city}{w}酒店",
                        "price_per_night": rng.randrange(280, 1600, 10),
                        "rating": round(rng.uniform(3.8, 4.9), 1), "rooms": rng.choice((0, 1, 2, 4))}
                       for i, w in enumerate(words)]
        next_booking = rng.randint(1, 80)
        bookings = []
        for flight in rng.sample(flights, rng.randint(0, 2)):
            bookings.append({"booking_id": f"TB-{next_booking:04d}", "kind": "flight",
                             "item_id": flight["flight_id"], "name": rng.choice(PEOPLE),
                             "date": flight["date"], "price": flight["price"],
                             "status": "confirmed"})
            next_booking += 1
        return {"flights": flights, "trains": trains, "hotels": hotels, "bookings": bookings,
                "next_booking": next_booking}

    def search_flights(self, origin: str, destination: str, departure_date: str) -> list[dict]:
        """Search flights between two cities on a date, with prices and free seats. 按日期查询两城之间的航班、票价和余票。

        Args:
            origin: Departure city, e.g. "北京" or "Beijing".
            destination: Arrival city.
            departure_date: Day of departure, YYYY-MM-DD.
        """
        a, b = _city(origin), _city(destination)
        return [f for f in self.flights
                if f["origin"] == a and f["destination"] == b and f["date"] == departure_date]

    def search_trains(self, origin: str, destination: str, date: str) -> list[dict]:
        """Search high-speed trains between two cities on a date. 按日期查询两城之间的高铁车次。

        Args:
            origin: Departure city.
            destination: Arrival city.
            date: Day of travel, YYYY-MM-DD.
        """
        a, b = _city(origin), _city(destination)
        return [t for t in self.trains
                if t["origin"] == a and t["destination"] == b and t["date"] == date]

    @generates("bookings.*.booking_id", "next_booking")
    def book_flight(self, flight_id: str, passenger: str) -> dict:
        """Book one seat on a flight and return the booking reference. 预订航班座位并返回订单号。

        Args:
            flight_id: The flight's id from search_flights, e.g. "CA1501".
            passenger: The passenger's full name.
        """
        flight = next((f for f in self.flights if f["flight_id"] == flight_id), None)
        if flight is None:
            raise ToolError(f"no flight {flight_id}")
        if flight["seats"] < 1:
            raise ToolError(f"flight {flight_id} is sold out")
        flight["seats"] -= 1
        return self._book("flight", flight_id, passenger, flight["price"], flight["date"])

    @generates("bookings.*.booking_id", "next_booking")
    def book_train(self, train_id: str, passenger: str) -> dict:
        """Book one seat on a train and return the booking reference. 预订火车票并返回订单号。

        Args:
            train_id: The train's id from search_trains, e.g. "G1".
            passenger: The passenger's full name.
        """
        train = next((t for t in self.trains if t["train_id"] == train_id), None)
        if train is None:
            raise ToolError(f"no train {train_id}")
        if train["seats"] < 1:
            raise ToolError(f"train {train_id} is sold out")
        train["seats"] -= 1
        return self._book("train", train_id, passenger, train["price"], train["date"])

    def search_hotels(self, location: str, max_price_per_night: int | None = None) -> list[dict]:
        """Find hotels in a city, optionally under a nightly price. 查询城市内的酒店，可限定每晚价格上限。

        Args:
            location: The city.
            max_price_per_night: Highest price per night in CNY.
        """
        city = _city(location)
        return [h for h in self.hotels if h["city"] == city
                and (max_price_per_night is None or h["price_per_night"] <= max_price_per_night)]

    @generates("bookings.*.booking_id", "next_booking")
    def book_hotel(self, hotel_id: str, check_in: str, nights: int, guest_name: str) -> dict:
        """Reserve a room at a hotel and return the booking reference. 预订酒店房间并返回订单号。

        Args:
            hotel_id: The hotel's id from search_hotels, e.g. "H-SH-02".
            check_in: Arrival day, YYYY-MM-DD.
            nights: Number of nights, at least 1.
            guest_name: The guest's full name.
        """
        hotel = next((h for h in self.hotels if h["hotel_id"] == hotel_id), None)
        if hotel is None:
            raise ToolError(f"no hotel {hotel_id}")
        if nights < 1:
            raise ToolError("nights must be at least 1")
        if hotel["rooms"] < 1:
            raise ToolError(f"{hotel['name']} has no free room")
        hotel["rooms"] -= 1
        return self._book("hotel", hotel_id, guest_name, hotel["price_per_night"] * nights,
                          check_in)

    def list_bookings(self) -> list[dict]:
        """List the user's bookings that are not cancelled. 列出用户未取消的预订。"""
        return [b for b in self.bookings if b["status"] == "confirmed"]

    @writes
    def cancel_booking(self, booking_id: str) -> dict:
        """Cancel a booking and give back its seat or room. 取消预订并释放座位或房间。

        Args:
            booking_id: The booking reference, e.g. "TB-0001".
        """
        booking = next((b for b in self.bookings if b["booking_id"] == booking_id), None)
        if booking is None or booking["status"] != "confirmed":
            raise ToolError(f"no confirmed booking {booking_id}")
        booking["status"] = "cancelled"
        for item in self.flights + self.trains:
            if item.get("flight_id", item.get("train_id")) == booking["item_id"]:
                item["seats"] += 1
        for hotel in self.hotels:
            if hotel["hotel_id"] == booking["item_id"]:
                hotel["rooms"] += 1
        return {"booking_id": booking_id, "status": "cancelled", "refund": booking["price"]}

    def _book(self, kind: str, item_id: str, name: str, price: int, date: str) -> dict:
        booking = {"booking_id": f"TB-{self.next_booking:04d}", "kind": kind, "item_id": item_id,
                   "name": name, "date": date, "price": price, "status": "confirmed"}
        self.next_booking += 1
        self.bookings.append(booking)
        return dict(booking)
