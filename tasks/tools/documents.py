"""The local document collection and the three real tools over it: web search, encyclopedia
lookup and page reading, all offline.

The collection is a folder of Markdown files (data/demo/docs/ for the demo), each with YAML front
matter::

    ---
    id: enc-everest-en          # unique
    title: Mount Everest
    lang: en                    # zh or en
    category: encyclopedia      # encyclopedia, travel, policy, product, tech, ...
    url: https://encyclopedia.example.org/en/mount-everest   # unique; what read_webpage fetches
    aliases: [Qomolangma, 珠穆朗玛峰]                           # optional, searchable
    ---
    Summary paragraph(s) ...

    ## History
    Optional sections, each returned alone by encyclopedia_lookup's `section`.

Ranking is BM25 (``bm25s``) over title (counted twice), aliases and body. Text is tokenised for
both languages at once: Latin-script words lower-cased with English stop words removed, and runs
of CJK characters split into overlapping character bigrams (the usual choice for Chinese without
a word segmenter).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from bm25s.stopwords import STOPWORDS_EN

from agentune.tasks.common.input_files import InputError
from agentune.tasks.tools.bm25 import BM25
from agentune.tasks.tools.observation import ToolContext, ToolFailure, ToolKind

LANGUAGES = ("zh", "en")
SNIPPET_CHARS = 240
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_TOKEN = re.compile(rf"([{_CJK}]+)|([^\W_{_CJK}]+)")
_FRONT_MATTER = re.compile(r"\A---\s*\n(.*?)\n---\s*\n(.*)\Z", re.S)
_SECTION = re.compile(r"^##\s+(.+?)\s*$", re.M)
_STOPWORDS = frozenset(STOPWORDS_EN)


def search_tokens(text: str) -> list[str]:
    """Index terms of ``text``: English words and Chinese (CJK) character bigrams."""
    tokens: list[str] = []
    for cjk, word in _TOKEN.findall(unicodedata.normalize("NFKC", text).lower()):
        if cjk:
            tokens.extend([cjk] if len(cjk) == 1 else [cjk[i : i + 2] for i in range(len(cjk) - 1)])
        elif word not in _STOPWORDS:
            tokens.append(word)
    return tokens


@dataclass(frozen=True)
class Document:
    id: str
    title: str
    lang: str
    category: str
    url: str
    summary: str
    sections: dict[str, str] = field(default_factory=dict)
    aliases: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        parts = [self.summary] + [f"## {name}\n{body}" for name, body in self.sections.items()]
        return "\n\n".join(p for p in parts if p)

    def snippet(self, query_terms: set[str]) -> str:
        """The paragraph sharing most terms with the query, cut to a snippet's length."""
        paragraphs = [p.strip() for p in re.split(r"\n\s*\n", self.text) if p.strip()]
        paragraphs = [p for p in paragraphs if not p.startswith("## ")] or paragraphs
        best = max(paragraphs, key=lambda p: len(query_terms & set(search_tokens(p))))
        best = " ".join(best.split())
        return best if len(best) <= SNIPPET_CHARS else best[: SNIPPET_CHARS - 1] + "…"


def _normalise_url(url: str) -> str:
    url = url.strip().split("#", 1)[0]
    url = re.sub(r"^https?://", "", url, flags=re.I)
    return url.rstrip("/").lower()


def parse_document(path: Path, text: str) -> Document:
    """One collection file; errors name the file and the field."""
    match = _FRONT_MATTER.match(text.replace("\r\n", "\n"))
    if match is None:
        raise InputError(path, None, None, "no YAML front matter (a --- block at the top)")
    try:
        meta = yaml.safe_load(match.group(1))
    except yaml.YAMLError as exc:
        raise InputError(path, None, None, f"front matter is not valid YAML: {exc}") from None
    if not isinstance(meta, dict):
        raise InputError(path, None, None, "front matter must be a mapping")
    for key in ("id", "title", "lang", "category", "url"):
        if not isinstance(meta.get(key), str) or not meta[key].strip():
            raise InputError(path, None, key, "missing or not a non-empty string")
    if meta["lang"] not in LANGUAGES:
        raise InputError(path, None, "lang", f"must be one of {LANGUAGES}, got {meta['lang']!r}")
    if not re.match(r"^https?://", meta["url"]):
        raise InputError(path, None, "url", f"must be an http(s) URL, got {meta['url']!r}")
    aliases = meta.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise InputError(path, None, "aliases", "must be a list of strings")
    unknown = set(meta) - {"id", "title", "lang", "category", "url", "aliases"}
    if unknown:
        raise InputError(path, None, sorted(unknown)[0], "unknown front matter key")
    body = match.group(2).strip()
    headings = list(_SECTION.finditer(body))
    summary = body[: headings[0].start()].strip() if headings else body
    if not summary:
        raise InputError(path, None, "body", "the document has no text before its first section")
    sections = {
        h.group(1): body[
            h.end() : headings[i + 1].start() if i + 1 < len(headings) else None
        ].strip()
        for i, h in enumerate(headings)
    }
    return Document(
        id=meta["id"].strip(),
        title=meta["title"].strip(),
        lang=meta["lang"],
        category=meta["category"].strip(),
        url=meta["url"].strip(),
        summary=summary,
        sections=sections,
        aliases=tuple(aliases),
    )


def load_documents(folder: str | Path) -> list[Document]:
    """Every ``*.md`` file under ``folder`` (sorted by path), with unique ids and URLs."""
    root = Path(folder)
    if not root.is_dir():
        raise InputError(root, None, None, "document folder not found")
    documents: list[Document] = []
    seen: dict[str, Path] = {}
    for path in sorted(root.rglob("*.md")):
        doc = parse_document(path, path.read_text(encoding="utf-8-sig"))
        for key in (f"id {doc.id}", f"url {_normalise_url(doc.url)}"):
            if key in seen:
                field_name = key.split(" ", 1)[0]
                raise InputError(path, None, field_name, f"duplicate {key} (first in {seen[key]})")
            seen[key] = path
        documents.append(doc)
    if not documents:
        raise InputError(root, None, None, "no *.md documents in the folder")
    return documents


@dataclass(frozen=True)
class Hit:
    document: Document
    score: float


class DocumentIndex:
    """BM25 over a document collection, with language and category filters."""

    def __init__(self, documents: Sequence[Document]) -> None:
        self.documents = list(documents)
        self._by_url = {_normalise_url(d.url): d for d in self.documents}
        self._bm25 = BM25()
        self._bm25.index(
            [search_tokens(self._indexed_text(d)) for d in self.documents], show_progress=False
        )
        self._vocab = set(self._bm25.vocab_dict)

    @classmethod
    def from_folder(cls, folder: str | Path) -> DocumentIndex:
        return cls(load_documents(folder))

    @staticmethod
    def _indexed_text(doc: Document) -> str:
        return "\n".join([doc.title, doc.title, *doc.aliases, doc.text])

    def search(
        self,
        query: str,
        k: int,
        *,
        languages: Iterable[str] | None = None,
        categories: Iterable[str] | None = None,
    ) -> list[Hit]:
        """Up to ``k`` documents sharing at least one term with ``query``, best first."""
        terms = [t for t in search_tokens(query) if t in self._vocab]
        if not terms or k < 1:
            return []
        scores = np.asarray(self._bm25.get_scores(terms), dtype=float)
        langs = set(languages) if languages is not None else None
        cats = set(categories) if categories is not None else None
        hits = [
            Hit(doc, float(score))
            for doc, score in zip(self.documents, scores, strict=True)
            if score > 0
            and (langs is None or doc.lang in langs)
            and (cats is None or doc.category in cats)
        ]
        hits.sort(key=lambda h: (-h.score, h.document.id))
        return hits[:k]

    def page(self, url: str) -> Document | None:
        return self._by_url.get(_normalise_url(url))


class DocumentSearch:
    """``web_search`` over the collection: title, URL and snippet of the best matches.

    The collection is a fixed snapshot: ``recency`` cannot be honoured and is reported back as
    ignored; ``language`` ranks documents in that language first.
    """

    kind: ToolKind = "real"
    required: tuple[str, ...] = ("query",)

    def __init__(self, index: DocumentIndex) -> None:
        self.index = index

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        query = str(arguments["query"])
        k = int(arguments.get("num_results", 5))
        language = arguments.get("language")
        hits = self.index.search(query, k, languages=[language]) if language else []
        if len(hits) < k:
            seen = {h.document.id for h in hits}
            hits += [h for h in self.index.search(query, k) if h.document.id not in seen]
        terms = set(search_tokens(query))
        answer: dict[str, Any] = {
            "query": query,
            "results": [
                {
                    "title": h.document.title,
                    "url": h.document.url,
                    "snippet": h.document.snippet(terms),
                }
                for h in hits[:k]
            ],
        }
        if arguments.get("recency", "any") != "any":
            answer["note"] = "recency filter not available for this index; results are unfiltered"
        return answer


class Encyclopedia:
    """``encyclopedia_lookup`` over the collection's ``encyclopedia`` documents."""

    kind: ToolKind = "real"
    required: tuple[str, ...] = ("topic",)
    category = "encyclopedia"

    def __init__(self, index: DocumentIndex) -> None:
        self.index = index

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        topic = str(arguments["topic"])
        language = arguments.get("language", "en")
        hits = self.index.search(topic, 1, languages=[language], categories=[self.category])
        hits = hits or self.index.search(topic, 1, categories=[self.category])
        if not hits:
            raise ToolFailure("not_found", f"no encyclopedia article matches {topic!r}")
        doc = hits[0].document
        answer: dict[str, Any] = {"title": doc.title, "language": doc.lang, "url": doc.url}
        section = arguments.get("section")
        if section:
            wanted = section.strip().lower()
            match = next((name for name in doc.sections if name.lower() == wanted), None)
            if match is None:
                raise ToolFailure(
                    "not_found",
                    f"the article {doc.title!r} has no section {section!r}",
                    details={"sections": ["Summary", *doc.sections]},
                )
            answer.update(section=match, text=doc.sections[match])
        else:
            answer["summary"] = doc.summary
            if doc.sections:
                answer["sections"] = list(doc.sections)
        return answer


class DocumentPages:
    """``read_webpage`` for the collection's URLs; any other URL answers 404, as a site would."""

    kind: ToolKind = "real"
    required: tuple[str, ...] = ("url",)

    def __init__(self, index: DocumentIndex) -> None:
        self.index = index

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        url = str(arguments["url"])
        doc = self.index.page(url)
        if doc is None:
            raise ToolFailure("not_found", f"HTTP 404: no page at {url}", details={"status": 404})
        limit = int(arguments.get("max_chars", 8000))
        text = doc.text if len(doc.text) <= limit else doc.text[:limit] + "…"
        return {"url": doc.url, "title": doc.title, "text": text}
