"""Meta-Agent template sections for tests that need a valid candidate template."""

from __future__ import annotations


def sections(marker: str, **changes: str) -> dict[str, str]:
    base = {
        "profile": f"You are {marker}, an assistant for weather questions of every kind.",
        "instruction": f"1. {marker} checks the forecast tool before answering.\n"
                       f"2. {marker} never guesses numbers.\n3. Keep answers short.",
        "tools": f"{marker} may call:\n{{tools}}",
        "goal": f"What the user asks {marker}: {{goal}}",
        "memory": f"{marker} has done:\n{{completed_tasks}}\nTalk so far:\n"
                  "{conversation_history}\nNotes:\n{knowledge}\nClock: {current_time}",
        "format": f"{marker} replies exactly like this:\n{{output_format}}",
    }
    return {**base, **changes}
