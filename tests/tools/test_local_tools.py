"""The real local tools: calculator, unit conversion, date arithmetic, clock, and the three tools
over the bundled document collection; plus argument validation against the tool schemas."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from agentune.config.tools import ToolsConfig
from agentune.tasks.common.input_files import InputError
from agentune.tasks.tools.arguments import validate_arguments, with_defaults
from agentune.tasks.tools.calculator import evaluate, normalise_expression
from agentune.tasks.tools.catalog import load_tool_catalog
from agentune.tasks.tools.dates import business_days_between, current_datetime, date_calculate
from agentune.tasks.tools.documents import DocumentIndex, load_documents, search_tokens
from agentune.tasks.tools.executor import ToolExecutor
from agentune.tasks.tools.observation import ToolFailure
from agentune.tasks.tools.units import convert

CATALOG = {tool.name: tool for tool in load_tool_catalog("data/demo/tools.yaml")}
REAL = [
    "calculator",
    "unit_convert",
    "date_calculate",
    "get_current_datetime",
    "web_search",
    "encyclopedia_lookup",
    "read_webpage",
]
NOW = dt.datetime(2025, 6, 2, 1, 30, tzinfo=dt.UTC)


@pytest.fixture(scope="module")
def index() -> DocumentIndex:
    return DocumentIndex.from_folder("data/demo/docs")


@pytest.fixture
async def tools():
    config = ToolsConfig(now=NOW)
    async with ToolExecutor([CATALOG[name] for name in REAL], config) as executor:
        yield executor


async def call(tools: ToolExecutor, name: str, **arguments) -> dict:
    obs = await tools.execute(name, arguments)
    assert obs.kind == "real"
    return {"ok": obs.ok, "error_kind": obs.error_kind, **json.loads(obs.content)}


# --- calculator --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("(45*12)-(360/8)", 495.0),
        ("(45 × 12) − (360 ÷ 8)", 495.0),
        ("2^40", 1099511627776),
        ("２＊（３＋４）", 14),
        ("17.5% * 2,340", 409.5),
        ("2340 * 17.5%", 409.5),
        ("10 % 3", 1),
        ("sqrt(98596)", 314.0),
        ("300000*(0.045/12)/(1-(1+0.045/12)**-360)", 1520.055929),
        ("round(pi, 2) + log10(1000) + factorial(5)", 126.14),
        ("3 > 2", True),
    ],
)
def test_calculator_values(expression: str, value: object) -> None:
    assert evaluate(expression) == value


def test_calculator_precision_and_normalisation() -> None:
    assert evaluate("1/3 + 2/7", precision=4) == 0.619
    assert evaluate("2/3", precision=0) == 1.0
    assert normalise_expression("1,234 + max(1,2)") == "1,234 + max(1,2)"  # calls keep commas
    assert normalise_expression("1,234,567 * 2") == "1234567 * 2"


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("__import__('os')", "not defined"),
        ("__import__('os').system('true')", "not available"),
        ("().__class__.__bases__", "Attribute"),
        ("'a' * 10", "only numbers"),
        ("[x for x in range(10)]", "not available"),
        ("lambda: 1", "not available"),
        ("9 ** 9999999", "too large"),
        ("factorial(100000)", "limited"),
        ("(-8) ** (1/3)", "not a real number"),
        ("1 / 0", "division by zero"),
        ("sqrt(-1)", "math domain error"),
        ("1e308 * 10", "not a finite number"),
        ("2 +", "not a valid expression"),
        ("", "empty"),
        ("1+" * 2000 + "1", "longer than"),
    ],
)
def test_calculator_refuses(expression: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        evaluate(expression)


async def test_calculator_tool(tools: ToolExecutor) -> None:
    answer = await call(tools, "calculator", expression="1/3+2/7", precision=4)
    assert answer == {"ok": True, "error_kind": None, "expression": "1/3+2/7", "result": 0.619}
    bad = await call(tools, "calculator", expression="open('/etc/passwd').read()")
    assert (bad["ok"], bad["error_kind"]) == (False, "execution")
    assert bad["error"].startswith("cannot evaluate the expression")
    assert bad["expression"] == "open('/etc/passwd').read()"


# --- units -------------------------------------------------------------------------------------


def test_unit_conversion() -> None:
    assert convert(100, "°F", "°C")["result"] == pytest.approx(37.7777778)
    assert convert(30, "摄氏度", "华氏度")["result"] == 86.0
    assert convert(5, "公里", "英里")["result"] == pytest.approx(3.10685596)
    assert convert(3, "斤", "kg") == {
        "value": 3,
        "from_unit": "斤",
        "to_unit": "kg",
        "result": 1.5,
        "unit_symbol": "kg",
    }
    assert convert(100, "km/h", "m/s")["result"] == pytest.approx(27.7777778)
    with pytest.raises(ToolFailure, match="different quantities"):
        convert(1, "km", "kg")
    with pytest.raises(ToolFailure) as unknown:
        convert(1, "m", "furlongs_per_blorp")
    assert unknown.value.details == {"field": "to_unit"}


# --- dates -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("arguments", "result"),
    [
        ({"operation": "add", "start_date": "2025-03-01", "amount": 100}, "2025-06-09"),
        (
            {"operation": "add", "start_date": "2024-11-05", "amount": 18, "unit": "months"},
            "2026-05-05",
        ),
        (
            {"operation": "add", "start_date": "2025-01-31", "amount": 1, "unit": "months"},
            "2025-02-28",
        ),
        (
            {"operation": "add", "start_date": "2026-01-15", "amount": 90, "unit": "days"},
            "2026-04-15",
        ),
        (
            {"operation": "add", "start_date": "2025-06-10", "amount": 45, "unit": "business_days"},
            "2025-08-12",
        ),
        (
            {
                "operation": "subtract",
                "start_date": "2025-06-09",
                "amount": 1,
                "unit": "business_days",
            },
            "2025-06-06",
        ),
        (
            {"operation": "subtract", "start_date": "2025-05-02", "amount": 2, "unit": "weeks"},
            "2025-04-18",
        ),
        (
            {"operation": "add", "start_date": "2024-02-29", "amount": 1, "unit": "years"},
            "2025-02-28",
        ),
    ],
)
def test_date_shifts(arguments: dict, result: str) -> None:
    assert date_calculate(arguments)["result"]["date"] == result


def test_date_difference_weekday_and_business_days() -> None:
    feb = date_calculate(
        {"operation": "difference", "start_date": "2028-02-01", "end_date": "2028-03-01"}
    )
    assert feb["days"] == 29 and feb["calendar"] == "0 years, 1 months, 0 days"
    back = date_calculate(
        {"operation": "difference", "start_date": "2025-11-28", "end_date": "2025-03-03"}
    )
    assert back["days"] == -270 and "before the start date" in back["calendar"]
    moon = date_calculate({"operation": "weekday", "start_date": "1969-07-20"})
    assert moon["weekday"] == "Sunday" and moon["is_leap_year"] is False
    assert date_calculate({"operation": "weekday", "start_date": "2028-02-29"})["is_leap_year"]
    october = date_calculate(
        {"operation": "business_days", "start_date": "2025-10-01", "end_date": "2025-10-31"}
    )
    assert october["business_days"] == 23 and "both dates included" in october["counted"]
    assert business_days_between(dt.date(2025, 10, 31), dt.date(2025, 10, 1)) == -23
    assert business_days_between(dt.date(2025, 6, 7), dt.date(2025, 6, 8)) == 0  # a weekend


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"operation": "add", "start_date": "2025-01-01"}, "amount"),
        ({"operation": "difference", "start_date": "2025-01-01"}, "end_date"),
        ({"operation": "add", "start_date": "9999-12-01", "amount": 5, "unit": "years"}, "amount"),
    ],
)
def test_date_errors_name_the_field(arguments: dict, field: str) -> None:
    with pytest.raises(ToolFailure) as failure:
        date_calculate(arguments)
    assert failure.value.details["field"] == field


async def test_clock(tools: ToolExecutor) -> None:
    shanghai = await call(tools, "get_current_datetime", timezone="Asia/Shanghai")
    assert shanghai["datetime"] == "2025-06-02T09:30:00+08:00" and shanghai["weekday"] == "Monday"
    new_york = current_datetime(NOW, "America/New_York")
    assert new_york["date"] == "2025-06-01" and new_york["utc_offset"] == "-04:00"
    utc = await call(tools, "get_current_datetime")
    assert utc["timezone"] == "UTC" and utc["time"] == "01:30:00"
    # A folder of zones, a package file, a path, a deep path: the model gets the same answer.
    for zone in ("Mars/Olympus_Mons", "US", "__init__/UTC", "../etc", "/etc/passwd",
                 "A/" * 300 + "b"):
        nowhere = await call(tools, "get_current_datetime", timezone=zone)
        assert nowhere["error_kind"] == "execution" and nowhere["field"] == "timezone", zone


async def test_clock_without_a_pin_reads_the_real_clock() -> None:
    async with ToolExecutor([CATALOG["get_current_datetime"]], ToolsConfig()) as executor:
        obs = await executor.execute("get_current_datetime", {})
    stamp = dt.datetime.fromisoformat(json.loads(obs.content)["datetime"])
    assert abs((dt.datetime.now(dt.UTC) - stamp).total_seconds()) < 60


async def test_date_tool_through_the_executor(tools: ToolExecutor) -> None:
    answer = await call(
        tools,
        "date_calculate",
        operation="add",
        start_date="2025-06-10",
        amount=45,
        unit="business_days",
    )
    assert answer["result"] == {"date": "2025-08-12", "weekday": "Tuesday"}
    assert "public holidays are not excluded" in answer["note"]


# --- documents ---------------------------------------------------------------------------------


def test_search_tokens_mix_languages() -> None:
    assert search_tokens("珠穆朗玛峰的 Height of the mountain") == [
        "珠穆",
        "穆朗",
        "朗玛",
        "玛峰",
        "峰的",
        "height",
        "mountain",
    ]
    assert search_tokens("长") == ["长"]


def test_collection_covers_the_demo_and_both_languages(index: DocumentIndex) -> None:
    docs = index.documents
    assert 40 <= len(docs) <= 80
    assert {d.lang for d in docs} == {"zh", "en"}
    assert {"encyclopedia", "travel", "policy", "product"} <= {d.category for d in docs}


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("珠穆朗玛峰的海拔是多少米", "enc-everest-zh"),
        ("《红楼梦》的作者是谁", "enc-hongloumeng-zh"),
        ("How many bones are in the adult human body?", "enc-human-skeleton-en"),
        ("capital of Australia Canberra", "enc-canberra-en"),
        ("Louvre opening hours summer holidays", "travel-louvre-en"),
        ("杭州马拉松报名时间", "travel-hangzhou-marathon-zh"),
        ("个人所得税专项附加扣除", "tech-iit-deductions-zh"),
        ("EU AI Act implementation", "tech-eu-ai-act-en"),
        ("出差住宿标准每晚多少钱", "policy-travel-expense-zh"),
    ],
)
def test_search_ranks_the_right_document_first(index: DocumentIndex, query: str, expected: str):
    assert index.search(query, 3)[0].document.id == expected


async def test_web_search_tool(tools: ToolExecutor) -> None:
    answer = await call(tools, "web_search", query="Rosetta Stone", num_results=2, recency="week")
    assert answer["ok"] and answer["query"] == "Rosetta Stone"
    top = answer["results"][0]
    assert top["title"] == "Rosetta Stone" and top["url"].startswith("https://")
    assert "Ptolemy V" in top["snippet"] or "Rosetta" in top["snippet"]
    assert len(answer["results"]) <= 2 and "recency" in answer["note"]
    nothing = await call(tools, "web_search", query="xyzzy plugh")
    assert nothing["ok"] and nothing["results"] == []
    chinese_first = await call(tools, "web_search", query="Louvre", language="zh", num_results=1)
    assert chinese_first["results"][0]["title"].startswith("卢浮宫")


async def test_encyclopedia_tool(tools: ToolExecutor) -> None:
    everest = await call(tools, "encyclopedia_lookup", topic="Mount Everest")
    assert everest["title"] == "Mount Everest" and "8,848.86" in everest["summary"]
    assert everest["sections"] == ["Height", "Climbing history"]
    in_chinese = await call(
        tools, "encyclopedia_lookup", topic="Mount Everest", language="zh", section="测量"
    )
    assert in_chinese["title"] == "珠穆朗玛峰" and in_chinese["section"] == "测量"
    # No English article: the Chinese one is returned and says so.
    yangtze = await call(tools, "encyclopedia_lookup", topic="长江 Yangtze River", language="en")
    assert yangtze["language"] == "zh" and "6300" in yangtze["summary"]
    missing = await call(tools, "encyclopedia_lookup", topic="Mount Everest", section="Geology")
    assert missing["error_kind"] == "not_found" and missing["sections"][0] == "Summary"
    unknown = await call(tools, "encyclopedia_lookup", topic="Quuxian xyzzy")
    assert unknown["error_kind"] == "not_found"
    not_encyclopedic = await call(tools, "encyclopedia_lookup", topic="timesheet deadline")
    assert not_encyclopedic["error_kind"] == "not_found"


async def test_read_webpage_tool(tools: ToolExecutor) -> None:
    page = await call(tools, "read_webpage", url="http://example.com/blog/agent-tuning/#top")
    assert page["title"].startswith("Agent tuning") and "Meta-Agent Tuning" in page["text"]
    short = await call(
        tools, "read_webpage", url="https://example.com/blog/agent-tuning", max_chars=100
    )
    assert len(short["text"]) == 101 and short["text"].endswith("…")
    missing = await call(tools, "read_webpage", url="https://example.com/nothing-here")
    assert missing["error_kind"] == "not_found" and missing["status"] == 404


def test_loader_errors_name_file_and_field(tmp_path: Path) -> None:
    def write(name: str, text: str) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        (folder / "doc.md").write_text(text, encoding="utf-8")
        return folder

    good_meta = "id: a\ntitle: A\nlang: en\ncategory: x\nurl: https://a.example/a\n"
    cases = {
        "no_front": ("just text", None),
        "no_title": (
            "---\nid: a\nlang: en\ncategory: x\nurl: https://a.example\n---\nbody",
            "title",
        ),
        "bad_lang": (
            "---\nid: a\ntitle: A\nlang: fr\ncategory: x\nurl: https://a.example\n---\nbody",
            "lang",
        ),
        "bad_url": ("---\nid: a\ntitle: A\nlang: en\ncategory: x\nurl: ftp://a\n---\nbody", "url"),
        "aliases": (f"---\n{good_meta}aliases: [1, 2]\n---\nbody", "aliases"),
        "extra": (f"---\n{good_meta}author: me\n---\nbody", "author"),
        "empty": (f"---\n{good_meta}---\n## Only a section\ntext", "body"),
    }
    for name, (text, field) in cases.items():
        with pytest.raises(InputError) as failure:
            load_documents(write(name, text))
        assert failure.value.file.endswith("doc.md") and failure.value.field == field, name
    twin = write("dup", f"---\n{good_meta}---\nbody")
    (twin / "other.md").write_text(f"---\n{good_meta.replace('id: a', 'id: b')}---\nbody")
    with pytest.raises(InputError, match="duplicate url"):
        load_documents(twin)
    with pytest.raises(InputError, match="not found"):
        load_documents(tmp_path / "absent")


# --- arguments ---------------------------------------------------------------------------------


def test_each_missing_field_is_reported_once() -> None:
    schema = {"type": "object", "required": ["a", "b", "c"],
              "properties": {"a": {"type": "string"}, "b": {"type": "string"},
                             "c": {"type": "string"}}}
    problems = validate_arguments(schema, {"b": "x"})
    assert [str(p) for p in problems] == ["field 'a': is required but missing",
                                          "field 'c': is required but missing"]


# Rich schemas (nested items, formats, patterns, enums) of the kind a business catalog holds.
FLIGHT_BOOKING = {
    "type": "object", "additionalProperties": False, "required": ["flight_id", "passengers"],
    "properties": {
        "flight_id": {"type": "string", "description": "The flight identifier."},
        "passengers": {"type": "array", "minItems": 1, "description": "One entry per traveller.",
                       "items": {"type": "object", "required": ["name"], "properties": {
                           "name": {"type": "string", "description": "Full name."},
                           "document_number": {"type": "string", "description": "ID number."}}}},
        "contact_phone": {"type": "string", "description": "Phone for notifications."}}}
HOTEL_SEARCH = {
    "type": "object", "additionalProperties": False,
    "required": ["location", "check_in", "check_out"],
    "properties": {
        "location": {"type": "string", "description": "Where."},
        "check_in": {"type": "string", "format": "date", "description": "Check-in date."},
        "check_out": {"type": "string", "format": "date", "description": "Check-out date."},
        "guests": {"type": "integer", "minimum": 1, "maximum": 10, "default": 1,
                   "description": "Guests."},
        "max_price_per_night": {"type": "number", "exclusiveMinimum": 0,
                                "description": "Price limit."},
        "currency": {"type": "string", "pattern": "^[A-Z]{3}$", "default": "USD",
                     "description": "ISO 4217 code."},
        "amenities": {"type": "array", "description": "Required amenities.", "items": {
            "type": "string", "enum": ["wifi", "breakfast", "parking", "pool", "gym"]}}}}


def test_validation_names_every_field() -> None:
    flight = FLIGHT_BOOKING
    problems = validate_arguments(flight, {"passengers": [{"document_number": "X"}], "seat": "1A"})
    assert {p.field for p in problems} == {"flight_id", "passengers[0].name", "seat"}
    hotels = HOTEL_SEARCH
    problems = validate_arguments(
        hotels,
        {
            "location": "Lisbon",
            "check_in": "2025-13-01",
            "check_out": "2025-06-03",
            "currency": "usd",
            "amenities": ["sauna"],
            "guests": 0,
        },
    )
    fields = {p.field: p.message for p in problems}
    assert set(fields) == {"check_in", "currency", "amenities[0]", "guests"}
    assert "is not a 'date'" in fields["check_in"]
    email = CATALOG["send_email"].parameters
    bad_mail = validate_arguments(email, {"to": ["not-an-address"], "subject": "s", "body": "b"})
    assert [p.field for p in bad_mail] == ["to[0]"]
    assert validate_arguments(email, ["to"])[0].message.startswith(
        "arguments must be a JSON object"
    )
    assert (
        validate_arguments(
            hotels, {"location": "L", "check_in": "2025-06-01", "check_out": "2025-06-03"}
        )
        == []
    )


def test_defaults_are_filled_without_overriding() -> None:
    weather = CATALOG["get_weather"].parameters
    assert with_defaults(weather, {"location": "Oslo", "days": 3}) == {
        "location": "Oslo",
        "days": 3,
        "units": "metric",
    }
