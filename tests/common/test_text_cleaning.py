"""Text cleaning: normalisation, PII scrubbing (Chinese and English), language tag, dedup key."""

from __future__ import annotations

import random

import pytest

from agentune.tasks.common.rejects import KEEP
from agentune.tasks.common.text_cleaning import (
    _PII_RULES,
    CleaningRules,
    cn_id_checksum_ok,
    dedup_key,
    detect_language,
    luhn_ok,
    normalize_text,
    placeholder,
    scrub_pii,
)


def test_normalize_folds_width_keeps_chinese_punctuation_and_cleans_whitespace() -> None:
    assert normalize_text("求２的４０次方。") == "求2的40次方。"
    assert normalize_text("你好，世界！　再见？") == "你好，世界！ 再见？"
    assert normalize_text("  a\u200bb \t\n c\x07d\ufeff ") == "ab c d"
    assert normalize_text("ｆｉｌｅ") == "file"
    assert normalize_text("ｆｉｌｅ", "NFC") == "ｆｉｌｅ"
    assert normalize_text("e\u0301") == "é"


# --------------------------------------------------------------------------- PII, Chinese

ZH_PII = [
    ("请联系我 13912345678 谢谢", "请联系我 [PHONE] 谢谢", ["PHONE"]),
    ("手机：139 1234 5678", "手机：[PHONE]", ["PHONE"]),
    ("拨打+86 13800138000或0086-15912345678", "拨打[PHONE]或[PHONE]", ["PHONE", "PHONE"]),
    ("座机 010-62345678，分机请转前台", "座机 [PHONE]，分机请转前台", ["PHONE"]),
    ("身份证号 51010719901112107X 已核验", "身份证号 [ID_NUMBER] 已核验", ["ID_NUMBER"]),
    ("乘机人证件110105198806140328，", "乘机人证件[ID_NUMBER]，", ["ID_NUMBER"]),
    ("身份证号码：110105198806140329", "身份证号码：[ID_NUMBER]", ["ID_NUMBER"]),  # bad checksum
    ("护照号E12345678", "护照号[ID_NUMBER]", ["ID_NUMBER"]),
    ("信用卡 6225 8812 3456 7898 还款", "信用卡 [CARD_NUMBER] 还款", ["CARD_NUMBER"]),
    ("卡号6222021003124578132", "卡号[CARD_NUMBER]", ["CARD_NUMBER"]),
    (
        "把纪要发给zhang.wei@example.com，电话13912345678",
        "把纪要发给[EMAIL]，电话[PHONE]",
        ["EMAIL", "PHONE"],
    ),
]

EN_PII = [
    ("Mail anna.keller@example.com today", "Mail [EMAIL] today", ["EMAIL"]),
    ("cc: a.b+tag@sub.example.co.uk.", "cc: [EMAIL].", ["EMAIL"]),
    ("Call +44 20 7946 0321 now", "Call [PHONE] now", ["PHONE"]),
    ("my line is +1 415 555 0132.", "my line is [PHONE].", ["PHONE"]),
    ("ring (415) 555-0132 or 415.555.0199", "ring [PHONE] or [PHONE]", ["PHONE", "PHONE"]),
    ("SSN 123-45-6789 on file", "SSN [ID_NUMBER] on file", ["ID_NUMBER"]),
    ("passport number: X1234567", "passport number: [ID_NUMBER]", ["ID_NUMBER"]),
    ("ID number is 98765432101", "ID number is [ID_NUMBER]", ["ID_NUMBER"]),
    ("card 4532-9876-1204-5531 exp 12/27", "card [CARD_NUMBER] exp 12/27", ["CARD_NUMBER"]),
    ("pay with 4532987612045531", "pay with [CARD_NUMBER]", ["CARD_NUMBER"]),
    (
        "Invite bob.lin@example.org and +44 20 7946 0321 with card 4532 9876 1204 5531",
        "Invite [EMAIL] and [PHONE] with card [CARD_NUMBER]",
        ["EMAIL", "PHONE", "CARD_NUMBER"],
    ),
]


@pytest.mark.parametrize(("text", "expected", "kinds"), ZH_PII + EN_PII)
def test_pii_is_replaced_by_typed_placeholders(text: str, expected: str, kinds: list[str]) -> None:
    result = scrub_pii(normalize_text(text))
    assert result.text == expected
    assert list(result.found) == kinds  # in order of appearance
    assert sum(result.counts.values()) == len(kinds)


@pytest.mark.parametrize(
    "text",
    [
        "3.75 乘以 128 再减去 96 等于多少？",
        "本金 20 万，年化收益率 3.2%，五年后是多少？",
        "计算 123456789 * 987654321",
        "What is 13 * 17 + 2024 - 1969?",
        "What day of the week was 1969-07-20?",
        "Add a dentist appointment on April 9 at 8:30.",
        "价格 1,234,567.89 元",
        "The order 1234567890123456 shipped",  # 16 digits, not Luhn-valid
        "编号 110105198806140329 的快递",  # ID-shaped, bad checksum, no keyword
        "Check whether ^[a-z]+-[0-9]{3}$ matches build-042",
        "Email the finance team that the report is late.",
        "version 3.10.12 and pi 3.1415926535",
        "Split a 237.60 bill among 6 people.",
    ],
)
def test_ordinary_numbers_and_words_are_not_pii(text: str) -> None:
    result = scrub_pii(normalize_text(text))
    assert result.found == ()
    assert result.text == normalize_text(text)


def _every_rule_over_the_whole_text(text: str) -> list[tuple[int, int, str]]:
    """scrub_pii's spans the slow way: every rule over all of the text, no cue, no number runs."""
    spans: list[tuple[int, int, str]] = []
    for rule in _PII_RULES:
        for m in rule.pattern.finditer(text):
            start, end = m.span(rule.group)
            if rule.valid(m.group(rule.group)) and not any(
                    start < e and s < end for s, e, _ in spans):
                spans.append((start, end, rule.kind))
    return sorted(spans)


def test_the_cues_and_number_runs_find_what_every_rule_over_the_whole_text_finds() -> None:
    pieces = ["身份证号 ", "ID number: ", "passport ", "SSN ", "\u017f\u017fn ", "\u0130d no ",
              "id card ", "Tel ", "+86 ", "0086-", "(415) ", "010-", "(0755) ", "@",
              "a.b@example.com ", "x", "X", " ", "-", ".", "(", ")", "+", "\n", "\u3000", "电话",
              "_id", "4111 1111 1111 1111", "110101199003074578", "13812345678",
              "138-1234-5678", "123-45-6789", "415.555.0132", "8888-1234", "+44 20 7946 0958",
              "2025-06-06 09:30", "O-1001", "１２３４５"]
    rng = random.Random(0)
    for _ in range(5000):
        text = "".join(rng.choice([*pieces, str(rng.randrange(10 ** rng.randint(1, 12)))])
                       for _ in range(rng.randint(1, 14)))
        expected = _every_rule_over_the_whole_text(text)
        result = scrub_pii(text)
        assert [kind for _, _, kind in expected] == list(result.found), text
        assert result.text == _replaced(text, expected), text


def _replaced(text: str, spans: list[tuple[int, int, str]]) -> str:
    for start, end, kind in reversed(spans):
        text = text[:start] + placeholder(kind) + text[end:]  # type: ignore[arg-type]
    return text


def test_checksums() -> None:
    assert cn_id_checksum_ok("51010719901112107X")
    assert cn_id_checksum_ok("51010719901112107x")
    assert cn_id_checksum_ok("110105198806140328")
    assert not cn_id_checksum_ok("110105198806140329")
    assert not cn_id_checksum_ok("11010519880614032")
    assert luhn_ok("4532987612045531") and luhn_ok("6225881234567898")
    assert not luhn_ok("4532987612045532") and not luhn_ok("12a4")


# --------------------------------------------------------------------------- language, keys


@pytest.mark.parametrize(
    ("text", "lang"),
    [
        ("明天北京会下雨吗？", "zh"),
        ("帮我用 Python 计算一下", "zh"),
        ("这句法语是什么意思：“Le rendez-vous est reporté à jeudi”？", "zh"),
        ("What does 你好 mean?", "en"),
        ("Will it snow in Denver tomorrow?", "en"),
        ("Send it to [EMAIL] 谢谢", "zh"),
        ("明日の大阪の天気を教えてください。", "ja"),
        ("서울 날씨 어때?", "ko"),
        ("Le rendez-vous est reporté à jeudi", "und"),
        ("Привет мир", "und"),
        ("12345 + 678", "und"),
    ],
)
def test_language_tag(text: str, lang: str) -> None:
    assert detect_language(text) == lang


def test_dedup_key_ignores_form_but_not_meaning() -> None:
    assert dedup_key("求 2 的 40 次方。") == dedup_key(normalize_text("求２的４０次方。"))
    assert dedup_key("What is the  weather?") == dedup_key("what is the weather")
    assert dedup_key("你好，世界") == dedup_key("你好,世界!")
    assert dedup_key("What is 17.5% of 2,340?") != dedup_key("What is 175% of 2340?")
    assert dedup_key("13 * 17") != dedup_key("1317")
    assert dedup_key("1/3 + 2/7") != dedup_key("13 + 27")


# --------------------------------------------------------------------------- rules


def test_cleaning_rules_verdicts() -> None:
    rules = CleaningRules(min_chars=4, max_chars=40, languages=frozenset({"zh", "en"}))
    cleaned = rules.clean("  发邮件给 a@example.com  ")
    assert cleaned.text == "发邮件给 [EMAIL]" and cleaned.pii == ("EMAIL",) and cleaned.lang == "zh"
    assert rules.check(cleaned) == (KEEP, "")
    assert rules.check(rules.clean("天气"))[0] == (False, "too_short")
    verdict, detail = rules.check(rules.clean("x" * 41))
    assert verdict == (False, "too_long") and "41 chars" in detail
    verdict, detail = rules.check(rules.clean("明日の大阪の天気を教えて"))
    assert verdict == (False, "language") and "'ja'" in detail
    strict = CleaningRules(pii_action="drop")
    verdict, detail = strict.check(strict.clean("call me at 13912345678 please"))
    assert verdict == (False, "pii") and "PHONE" in detail
    assert (
        CleaningRules(languages=frozenset()).check(rules.clean("Привет мир, как дела"))[0] is KEEP
    )
