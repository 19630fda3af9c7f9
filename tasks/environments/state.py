"""Comparing end states: generated values left out, list order ignored.

Two runs that make the same changes in a different order (independent calls) end in the same state
up to the order of list items and the values the tools made up (an order id from a counter, a
timestamp): :func:`comparable` removes the declared generated paths and sorts every list by its
items' canonical JSON, so equal states compare equal. :func:`state_diff` says where two states
differ, for a verdict's detail.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _drop(value: Any, path: Sequence[str]) -> Any:
    """``value`` without what ``path`` names (``*`` = every key or item)."""
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        names = list(value) if head == "*" else [head] if head in value else []
    elif isinstance(value, list):
        names = list(range(len(value))) if head == "*" else (
            [int(head)] if head.isdigit() and int(head) < len(value) else [])
    else:
        return value
    out = dict(value) if isinstance(value, dict) else list(value)
    for name in names:
        out[name] = _drop(out[name], rest) if rest else _GONE  # type: ignore[index]
    if isinstance(out, dict):
        return {k: v for k, v in out.items() if v is not _GONE}
    return [v for v in out if v is not _GONE]


_GONE = object()


def _sorted_lists(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _sorted_lists(v) for k, v in value.items()}
    if isinstance(value, list):
        return sorted((_sorted_lists(v) for v in value), key=_canonical)
    return value


def comparable(state: Any, generated: Iterable[str] = ()) -> Any:
    """``state`` without the ``generated`` paths (``a.*.id``), every list sorted."""
    for path in generated:
        state = _drop(state, path.split("."))
    return _sorted_lists(state)


def states_equal(a: Any, b: Any, generated: Iterable[str] = ()) -> bool:
    # The same canonical JSON is the same comparable form: most compared states (a verified
    # replay against its ground truth) are equal, and need no list sorting.
    if _canonical(a) == _canonical(b):
        return True
    paths = tuple(generated)
    return _canonical(comparable(a, paths)) == _canonical(comparable(b, paths))


def state_diff(expected: Any, actual: Any, generated: Iterable[str] = (), *,
               limit: int = 5) -> list[str]:
    """Up to ``limit`` places where ``actual`` differs from ``expected`` (comparable forms)."""
    paths = tuple(generated)
    found: list[str] = []

    def walk(e: Any, a: Any, where: str) -> None:
        if len(found) >= limit or _canonical(e) == _canonical(a):
            return
        if isinstance(e, dict) and isinstance(a, dict):
            for key in sorted(set(e) | set(a)):
                if key not in a:
                    found.append(f"{where}{key}: missing")
                elif key not in e:
                    found.append(f"{where}{key}: unexpected {_canonical(a[key])[:80]}")
                else:
                    walk(e[key], a[key], f"{where}{key}.")
            return
        if isinstance(e, list) and isinstance(a, list):
            extra = [x for x in a if _canonical(x) not in {_canonical(y) for y in e}]
            missing = [x for x in e if _canonical(x) not in {_canonical(y) for y in a}]
            for item in missing[:2]:
                found.append(f"{where.rstrip('.')}: missing item {_canonical(item)[:120]}")
            for item in extra[:2]:
                found.append(f"{where.rstrip('.')}: unexpected item {_canonical(item)[:120]}")
            return
        found.append(f"{where.rstrip('.')}: expected {_canonical(e)[:80]}, got {_canonical(a)[:80]}")

    walk(comparable(expected, paths), comparable(actual, paths), "")
    return found[:limit]
