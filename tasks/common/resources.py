"""A base for objects that hold connections, threads or child processes until closed."""

from __future__ import annotations

from types import TracebackType
from typing import Self


class AsyncResource:
    """Closed with ``await x.aclose()``, or at the end of ``async with x:``."""

    async def aclose(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        traceback: TracebackType | None) -> None:
        await self.aclose()
