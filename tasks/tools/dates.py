"""Date tools: calendar arithmetic (``date_calculate``) and the current time
(``get_current_datetime``).

Months and years are added with ``dateutil.relativedelta`` (Jan 31 + 1 month = Feb 28/29);
business days are Monday to Friday, counted with numpy's business-day functions; public holidays
are not known to these tools and the answers say so. Time zones are IANA names via ``zoneinfo``.
"""

from __future__ import annotations

import datetime as dt
import functools
from typing import Any
from zoneinfo import ZoneInfo, available_timezones

import numpy as np
from dateutil.relativedelta import relativedelta

from agentune.tasks.tools.observation import ToolContext, ToolFailure, ToolKind

WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
BUSINESS_DAYS_NOTE = "Monday to Friday; public holidays are not excluded"


def reference_now(context: ToolContext, pinned: dt.datetime | None) -> dt.datetime:
    """The clock a call reads: the context's, else the configured one, else the real clock."""
    return context.now or pinned or dt.datetime.now(dt.UTC)


def _day(value: Any, field: str) -> dt.date:
    try:
        return dt.date.fromisoformat(str(value))
    except ValueError:
        raise ToolFailure(
            "execution", f"{value!r} is not a date (YYYY-MM-DD)", details={"field": field}
        ) from None


def _describe(day: dt.date) -> dict[str, Any]:
    return {"date": day.isoformat(), "weekday": WEEKDAYS[day.weekday()]}


def shift(start: dt.date, amount: int, unit: str) -> dt.date:
    """``start`` moved by ``amount`` (negative: backwards) ``unit``s."""
    if unit == "business_days":
        roll = "forward" if amount >= 0 else "backward"
        moved = np.busday_offset(np.datetime64(start, "D"), amount, roll=roll)
        return dt.date.fromisoformat(str(moved))
    if unit == "days":
        return start + dt.timedelta(days=amount)
    if unit == "weeks":
        return start + dt.timedelta(weeks=amount)
    if unit == "months":
        return start + relativedelta(months=amount)
    if unit == "years":
        return start + relativedelta(years=amount)
    raise ToolFailure("execution", f"unknown unit {unit!r}", details={"field": "unit"})


def business_days_between(start: dt.date, end: dt.date) -> int:
    """Monday-to-Friday dates from ``start`` to ``end``, both included (negative if reversed)."""
    first, last = sorted((start, end))
    count = int(np.busday_count(np.datetime64(first, "D"), np.datetime64(last, "D") + 1))
    return count if start <= end else -count


def date_calculate(arguments: dict[str, Any]) -> dict[str, Any]:
    operation = arguments["operation"]
    start = _day(arguments["start_date"], "start_date")
    if operation in ("add", "subtract"):
        if "amount" not in arguments:
            raise ToolFailure(
                "execution", f"operation {operation!r} needs `amount`", details={"field": "amount"}
            )
        amount = int(arguments["amount"]) * (1 if operation == "add" else -1)
        unit = arguments.get("unit", "days")
        try:
            result = shift(start, amount, unit)
        except (OverflowError, ValueError):
            raise ToolFailure(
                "execution",
                "the result falls outside the years 1 to 9999",
                details={"field": "amount"},
            ) from None
        return {
            "operation": operation,
            "start": _describe(start),
            "amount": abs(amount),
            "unit": unit,
            "result": _describe(result),
            **({"note": BUSINESS_DAYS_NOTE} if unit == "business_days" else {}),
        }
    if operation == "weekday":
        return {
            **_describe(start),
            "iso_week": start.isocalendar().week,
            "day_of_year": start.timetuple().tm_yday,
            "is_leap_year": start.year % 4 == 0
            and (start.year % 100 != 0 or start.year % 400 == 0),
        }
    if "end_date" not in arguments:
        raise ToolFailure(
            "execution", f"operation {operation!r} needs `end_date`", details={"field": "end_date"}
        )
    end = _day(arguments["end_date"], "end_date")
    if operation == "difference":
        days = (end - start).days
        return {
            "start": _describe(start),
            "end": _describe(end),
            "days": days,
            "weeks": round(days / 7, 2),
            "calendar": _calendar_span(start, end),
        }
    if operation == "business_days":
        return {
            "start": _describe(start),
            "end": _describe(end),
            "business_days": business_days_between(start, end),
            "counted": f"{BUSINESS_DAYS_NOTE}; both dates included",
        }
    raise ToolFailure(
        "execution", f"unknown operation {operation!r}", details={"field": "operation"}
    )


def _calendar_span(start: dt.date, end: dt.date) -> str:
    first, last = sorted((start, end))
    span = relativedelta(last, first)
    text = f"{span.years} years, {span.months} months, {span.days} days"
    return text if start <= end else f"{text} (the end date is before the start date)"


@functools.cache
def _known_zones() -> frozenset[str]:
    return frozenset(available_timezones())


def current_datetime(now: dt.datetime, timezone: str) -> dict[str, Any]:
    # Only names the zone database lists: ZoneInfo itself reads any path-like key, and a folder
    # ("US"), a package file ("__init__/UTC") or a deep path fails with OSError, TypeError or
    # RecursionError rather than "not found".
    if timezone not in _known_zones():
        shown = timezone if len(timezone) <= 60 else f"{timezone[:57]}..."
        raise ToolFailure(
            "execution",
            f"unknown time zone {shown!r}; use an IANA name such as Asia/Shanghai",
            details={"field": "timezone"},
        )
    zone = ZoneInfo(timezone)
    local = now.astimezone(zone)
    offset = local.strftime("%z")
    return {
        "timezone": timezone,
        "datetime": local.isoformat(timespec="seconds"),
        "date": local.date().isoformat(),
        "time": local.strftime("%H:%M:%S"),
        "weekday": WEEKDAYS[local.weekday()],
        "utc_offset": f"{offset[:3]}:{offset[3:]}",
    }


class DateCalculator:
    kind: ToolKind = "real"
    required: tuple[str, ...] = ("operation", "start_date")

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        return date_calculate(arguments)


class Clock:
    kind: ToolKind = "real"
    required: tuple[str, ...] = ()

    def __init__(self, pinned: dt.datetime | None = None) -> None:
        self.pinned = pinned

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        now = reference_now(context, self.pinned)
        return current_datetime(now, str(arguments.get("timezone", "UTC")))
