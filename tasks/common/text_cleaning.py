"""Text cleaning for queries: unicode and whitespace normalisation, PII scrubbing with typed
placeholders, a coarse language tag, length bounds, and the key that exact dedup compares.

PII rules run over the normalised text; each match becomes ``[EMAIL]``, ``[PHONE]``,
``[ID_NUMBER]`` or ``[CARD_NUMBER]``. Rules are tried in priority order and a later rule never
touches text an earlier one claimed, so an 18-digit ID is not also reported as a card or phone.
Number-shaped rules are validated (ID checksum, Luhn, E.164 length) to keep ordinary numbers in
calculation queries intact.

Query text is data, never code: prompts take it as a Jinja *variable*, so ``{{ }}`` / ``{% %}``
in a query stays literal when rendered, and text such as "ignore previous instructions" or
"System:" is kept as written (it is a plausible user query, and the teacher's answer to it is
judged like any other). What is rejected (``control_token``) is a chat-template special token
(``<|im_start|>``, ``[INST]``, ``<tool_call>`` ...): tokenizers turn those strings into the real
control tokens, so such a query would forge turns or tool calls inside a training sample.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from agentune.tasks.common.rejects import KEEP, Verdict, drop

PiiKind = Literal["EMAIL", "PHONE", "ID_NUMBER", "CARD_NUMBER"]
PII_KINDS: tuple[PiiKind, ...] = ("EMAIL", "PHONE", "ID_NUMBER", "CARD_NUMBER")


def placeholder(kind: PiiKind) -> str:
    return f"[{kind}]"


# --------------------------------------------------------------------------- normalisation

# Zero-width and BOM characters survive NFKC and split words invisibly.
_INVISIBLE = re.compile("[\u200b\u200c\u200d\u2060\ufeff\u00ad]")
_WHITESPACE = re.compile(r"\s+")
# Full-width punctuation (，？！：；（）…) is how Chinese is written: NFKC would turn it into ASCII.
_FULLWIDTH_PUNCT = re.compile("([\uff01-\uff0f\uff1a-\uff20\uff3b-\uff40\uff5b-\uff65]+)")


def normalize_text(text: str, form: Literal["NFC", "NFKC"] = "NFKC") -> str:
    """Unicode-normalise, drop invisible and control characters, collapse whitespace, strip.

    ``NFKC`` (the default) folds compatibility forms such as full-width digits and letters
    (``２０２５`` -> ``2025``), which PII rules and dedup rely on, but keeps full-width
    punctuation as written. ``NFC`` only composes.
    """
    if form == "NFKC":
        parts = _FULLWIDTH_PUNCT.split(text)
        # split() with one group alternates: other, punctuation, other, ...
        text = "".join(
            p if i % 2 else unicodedata.normalize("NFKC", p) for i, p in enumerate(parts)
        )
    else:
        text = unicodedata.normalize(form, text)
    text = _INVISIBLE.sub("", text)
    text = "".join(
        " " if unicodedata.category(ch) == "Cc" and not ch.isspace() else ch for ch in text
    )
    return _WHITESPACE.sub(" ", text).strip()


# Punctuation that changes what a query asks (13 * 17, 1/3, 50%), kept in the dedup key.
_MEANINGFUL_PUNCT = frozenset("%*/#&@\\")


def dedup_key(text: str) -> str:
    """The form exact dedup compares: NFKC, case-folded, without whitespace and punctuation.

    Punctuation or whitespace between two digits is kept (``17.5`` is not ``175``, ``3 4`` is not
    ``34``); symbols and operators (``+ × % * /``) are kept because they change a query's meaning.
    """
    text = unicodedata.normalize("NFKC", text).casefold()
    out: list[str] = []
    n = len(text)
    for i, ch in enumerate(text):
        if ch.isspace() or (
            unicodedata.category(ch).startswith("P") and ch not in _MEANINGFUL_PUNCT
        ):
            prev = text[i - 1] if i > 0 else ""
            nxt = text[i + 1] if i + 1 < n else ""
            if prev.isdigit() and nxt.isdigit():
                out.append(" " if ch.isspace() else ch)
            continue
        out.append(ch)
    return "".join(out)


# --------------------------------------------------------------------------- language tag

_PLACEHOLDER_RE = re.compile(r"\[(?:EMAIL|PHONE|ID_NUMBER|CARD_NUMBER)\]")
_EN_WORDS = frozenset(
    "the a an is are was were be of to in on at for with and or what how who when where which why "
    "do does did can could should would will my me i you your it this that there please".split()
)


def _is_han(cp: int) -> bool:
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2EBEF
        or 0xF900 <= cp <= 0xFAFF
    )


def detect_language(text: str) -> str:
    """A coarse, script-based language tag: ``zh``, ``ja``, ``ko``, ``en`` or ``und``.

    Han characters count about as much as a Latin word, so "帮我用 Python 画图" is ``zh`` while
    "What does 你好 mean?" is ``en``. Kana marks Japanese, Hangul Korean. Latin-script text is
    ``en`` when it has an English function word or no accented letters, else ``und``.
    """
    text = _PLACEHOLDER_RE.sub(" ", text)
    han = kana = hangul = latin = other = 0
    accented = False
    for ch in text:
        cp = ord(ch)
        if _is_han(cp):
            han += 1
        elif 0x3040 <= cp <= 0x30FF or 0x31F0 <= cp <= 0x31FF:
            kana += 1
        elif 0xAC00 <= cp <= 0xD7AF or 0x1100 <= cp <= 0x11FF or 0x3130 <= cp <= 0x318F:
            hangul += 1
        elif ch.isalpha():
            if "LATIN" in unicodedata.name(ch, ""):
                latin += 1
                accented = accented or cp > 0x7F
            else:
                other += 1
    if kana and kana * 10 >= han + kana:
        return "ja"
    if hangul and hangul * 4 >= latin and hangul >= han:
        return "ko"
    if han and han * 4 >= latin:
        return "zh"
    if latin and latin >= other:
        words = set(re.findall(r"[a-z]+", text.casefold()))
        return "en" if (words & _EN_WORDS or not accented) else "und"
    return "und"


# --------------------------------------------------------------------------- PII

_ID_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
_ID_CHECK = "10X98765432"


def cn_id_checksum_ok(number: str) -> bool:
    """ISO 7064 MOD 11-2 check of an 18-character Chinese resident ID (last char may be X)."""
    if len(number) != 18 or not number[:17].isdigit():
        return False
    total = sum(int(d) * w for d, w in zip(number[:17], _ID_WEIGHTS, strict=True))
    return _ID_CHECK[total % 11] == number[17].upper()


def luhn_ok(digits: str) -> bool:
    """The Luhn check used by payment card numbers."""
    if not digits.isdigit():
        return False
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _digits(s: str) -> str:
    return "".join(ch for ch in s if ch.isdigit())


@dataclass(frozen=True)
class _PiiRule:
    kind: PiiKind
    pattern: re.Pattern[str]
    valid: Callable[[str], bool] = lambda s: True
    group: int = 0  # which group is the PII (a keyword rule keeps its keyword)
    cue: re.Pattern[str] | None = None
    """Found in the case-folded text (:func:`_folded`) wherever the rule can match: a cheap test
    that skips the rule on most texts (none: the rule always runs)."""
    in_numbers: bool = False
    """Its matches are made of :data:`_NUMBER_RUN` characters only, start with a digit, ``(`` or
    ``+``, and hold at least 8 digits when valid: it runs over the number runs of a text only."""


_PII_RULES: tuple[_PiiRule, ...] = (
    _PiiRule(
        "EMAIL",
        re.compile(
            r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*"
            r"\.[A-Za-z]{2,}(?![A-Za-z0-9-])"
        ),
        cue=re.compile("@"),
    ),
    # A document number right after a keyword is an ID whatever its shape or checksum.
    _PiiRule(
        "ID_NUMBER",
        re.compile(
            r"(?:身份证(?:号码|号)?|证件号(?:码)?|护照(?:号码|号)?|(?<![A-Za-z])(?:passport|national\s+id|"
            r"id\s+card|ssn|id(?=\s*(?:number|no\.?|#)))(?:\s*(?:number|no\.?|#))?)\s*(?:[:：#]|是|为|is)?\s*"
            r"([A-Za-z]{0,2}[0-9][0-9A-Za-z-]{4,22})(?![0-9A-Za-z])",
            re.IGNORECASE,
        ),
        valid=lambda s: len(_digits(s)) >= 6,
        group=1,
        cue=re.compile(r"身份证|证件号|护照|passport|national|ssn|id\s*(?:number|no|#)|id\s+card"),
    ),
    _PiiRule(
        "ID_NUMBER",
        re.compile(
            r"(?<![0-9A-Za-z])[1-9]\d{5}(?:18|19|20)\d{2}(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])"
            r"\d{3}[0-9Xx](?![0-9A-Za-z])"
        ),
        valid=cn_id_checksum_ok,
        in_numbers=True,
    ),
    # US social security number, in its written form only.
    _PiiRule(
        "ID_NUMBER",
        re.compile(r"(?<![\d-])(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}(?![\d-])"),
        in_numbers=True,
    ),
    _PiiRule(
        "CARD_NUMBER",
        re.compile(
            r"(?<![\d-])(?:\d{13,19}|\d{4}(?:[ -]\d{4}){2,3}(?:[ -]\d{1,4})?"
            r"|\d{4}[ -]\d{6}[ -]\d{5})(?![\d-])"
        ),
        valid=lambda s: (
            13 <= len(_digits(s)) <= 19 and luhn_ok(_digits(s)) and set(_digits(s)) != {"0"}
        ),
        in_numbers=True,
    ),
    # Mainland mobile, optionally with +86 / 0086, written whole or as 3-4-4.
    _PiiRule(
        "PHONE",
        re.compile(r"(?<![\d+])(?:(?:\+|00)86[ -]?)?1[3-9]\d(?:[ -]?\d{4}){2}(?!\d)"),
        in_numbers=True,
    ),
    # International E.164 with a leading + (7-15 digits in all).
    _PiiRule(
        "PHONE",
        re.compile(r"(?<![\w+])\+[1-9]\d{0,2}(?:[ .-]?\(?\d{1,5}\)?){1,6}(?![\d])"),
        valid=lambda s: 8 <= len(_digits(s)) <= 15,
        in_numbers=True,
    ),
    # North American (415) 555-0132 / 415-555-0132 / 415.555.0132.
    _PiiRule(
        "PHONE",
        re.compile(r"(?<![\d-])(?:\(\d{3}\)\s?|\d{3}[ .-])\d{3}[ .-]\d{4}(?![\d-])"),
        in_numbers=True,
    ),
    # Mainland landline with area code: 010-62345678, (0755) 8888-1234.
    _PiiRule(
        "PHONE",
        re.compile(r"(?<![\d-])(?:\(0\d{2,3}\)\s?|0\d{2,3}-)\d{3,4}-?\d{4}(?![\d-])"),
        in_numbers=True,
    ),
)

# Tool results and prompts are long and full of short numbers (prices, dates): the number rules
# run only over maximal runs of digits and separators with 8 digits or more, each with the
# character after it (their lookaheads); lookbehinds still see the text before a run.
_NUMBER_RUN = re.compile(r"[\d(+][\d\s+().xX-]{7,}")
_EIGHT_DIGITS = re.compile(r"(?:\D*\d){8}")
# The 4 non-ASCII letters IGNORECASE matches to ASCII ones, so the cues can search a lowered text
# (translated only where one occurs: str.translate walks a text char by char in Python's mapping).
_ASCII_FOLDS = str.maketrans({"\u0130": "i", "\u0131": "i", "\u017f": "s", "\u212a": "k"})
_FOLDED_LETTER = re.compile("[\u0130\u0131\u017f\u212a]")


def _number_runs(text: str) -> list[tuple[int, int]]:
    return [(m.start(), min(m.end() + 1, len(text))) for m in _NUMBER_RUN.finditer(text)
            if _EIGHT_DIGITS.match(m.group())]


def _folded(text: str) -> str:
    if _FOLDED_LETTER.search(text):
        text = text.translate(_ASCII_FOLDS)
    return text.lower()


@dataclass(frozen=True)
class ScrubResult:
    text: str
    found: tuple[PiiKind, ...]
    """The kinds replaced, in order of appearance (one entry per placeholder)."""

    @property
    def counts(self) -> dict[str, int]:
        return dict(Counter(self.found))


def scrub_pii(text: str) -> ScrubResult:
    """Replace e-mail addresses, phone numbers, ID and card numbers by typed placeholders."""
    spans: list[tuple[int, int, PiiKind]] = []
    folded = _folded(text)
    runs = _number_runs(text)
    for rule in _PII_RULES:
        if rule.in_numbers:
            regions = runs
        elif rule.cue is None or rule.cue.search(folded):
            regions = [(0, len(text))]
        else:
            continue
        for m in (m for a, b in regions for m in rule.pattern.finditer(text, a, b)):
            start, end = m.span(rule.group)
            if not rule.valid(m.group(rule.group)):
                continue
            if any(start < e and s < end for s, e, _ in spans):
                continue
            spans.append((start, end, rule.kind))
    if not spans:
        return ScrubResult(text, ())
    spans.sort()
    out, pos = [], 0
    for start, end, kind in spans:
        out.append(text[pos:start])
        out.append(placeholder(kind))
        pos = end
    out.append(text[pos:])
    return ScrubResult("".join(out), tuple(kind for _, _, kind in spans))


# --------------------------------------------------------------------------- filters

# Special tokens of the common chat templates: ChatML/Qwen/Llama 3/Phi (<|...|>), DeepSeek
# (<｜...｜>, full-width bars), Llama 2 and Mistral ([INST], <<SYS>>, <s>), Gemma
# (<start_of_turn>), Hermes/Qwen tool-call tags.
_CONTROL_TOKEN = re.compile(
    r"<[|｜][^\s<>|｜]{1,60}[|｜]>|\[/?INST\]|<</?SYS>>|</?s>|<(?:start|end)_of_turn>"
    r"|</?tool_(?:call|response)>|</?tools>"
)
# Cleaning a text costs a few Python passes over it: one far over the length bound is rejected
# from its raw length, before any of them. Whitespace collapsing and PII placeholders shorten a
# text, rarely to a quarter; one padded that far is rejected as too_long too.
RAW_LENGTH_FACTOR = 4


def check_raw_length(text: str, max_chars: int) -> Verdict:
    """Drop (as ``too_long``) a raw text more than ``RAW_LENGTH_FACTOR`` times ``max_chars``."""
    return drop("too_long") if len(text) > RAW_LENGTH_FACTOR * max_chars else KEEP


def find_control_token(text: str) -> str | None:
    """The first chat-template special token written in ``text``, if any."""
    match = _CONTROL_TOKEN.search(text)
    return match.group(0) if match else None


def check_length(text: str, min_chars: int, max_chars: int) -> Verdict:
    """Keep texts whose length in characters lies within the bounds."""
    if len(text) < min_chars:
        return drop("too_short")
    if len(text) > max_chars:
        return drop("too_long")
    return KEEP


def check_language(lang: str, allowed: frozenset[str] | set[str] | list[str]) -> Verdict:
    """Keep texts whose language tag is allowed (an empty allow-list allows every language)."""
    if allowed and lang not in allowed:
        return drop("language")
    return KEEP


def check_pii(found: tuple[str, ...], action: Literal["scrub", "drop"]) -> Verdict:
    """With ``drop``, a text that had PII is dropped instead of kept with placeholders."""
    if found and action == "drop":
        return drop("pii")
    return KEEP


@dataclass(frozen=True)
class CleanedText:
    text: str
    """Normalised, PII-scrubbed text."""
    lang: str
    pii: tuple[PiiKind, ...]
    key: str
    """The exact-dedup key of ``text``."""


@dataclass(frozen=True)
class CleaningRules:
    """The cleaning settings of a stage, applied in one fixed order by :meth:`clean`."""

    unicode_form: Literal["NFC", "NFKC"] = "NFKC"
    min_chars: int = 4
    max_chars: int = 1000
    languages: frozenset[str] = frozenset({"zh", "en"})
    pii_action: Literal["scrub", "drop"] = "scrub"

    def check_raw(self, raw: str) -> tuple[Verdict, str]:
        """The verdict on a raw text before cleaning: only a length far over the bound drops."""
        verdict = check_raw_length(raw, self.max_chars)
        if verdict is not KEEP:
            return verdict, (f"{len(raw)} chars before cleaning, over {RAW_LENGTH_FACTOR}x "
                             f"max_chars ({self.max_chars}); not cleaned")
        return KEEP, ""

    def clean(self, raw: str) -> CleanedText:
        """Normalise, then scrub (before anything is measured or logged), then tag the language."""
        scrubbed = scrub_pii(normalize_text(raw, self.unicode_form))
        return CleanedText(
            text=scrubbed.text,
            lang=detect_language(scrubbed.text),
            pii=scrubbed.found,
            key=dedup_key(scrubbed.text),
        )

    def check(self, cleaned: CleanedText) -> tuple[Verdict, str]:
        """The verdict on a cleaned text and, for a drop, a detail for the reject row."""
        verdict = check_pii(cleaned.pii, self.pii_action)
        if verdict is not KEEP:
            return verdict, f"contains {', '.join(sorted(set(cleaned.pii)))}"
        token = find_control_token(cleaned.text)
        if token is not None:
            return drop("control_token"), f"contains the chat-template token {token!r}"
        verdict = check_length(cleaned.text, self.min_chars, self.max_chars)
        if verdict is not KEEP:
            return verdict, f"{len(cleaned.text)} chars, allowed {self.min_chars}-{self.max_chars}"
        verdict = check_language(cleaned.lang, self.languages)
        if verdict is not KEEP:
            return verdict, f"language {cleaned.lang!r} not in {sorted(self.languages)}"
        return KEEP, ""
