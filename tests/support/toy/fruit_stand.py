"""The toy environment of the GRPO tests: one read-only tool."""

from __future__ import annotations

from typing import Any

from agentune.tasks.environments.base import Environment


class FruitStand(Environment):
    name = "fruit_stand"
    description = {"en": "A fruit stand's price list.", "zh": "水果摊的价目表。"}

    def reset(self, **state: Any) -> None:
        self.prices = dict(state.get("prices", {"apple": 3, "pear": 4}))

    def state(self) -> dict[str, Any]:
        return {"prices": dict(self.prices)}

    def price_list(self) -> str:
        """Today's fruit prices."""
        return ", ".join(f"{k} {v} yuan" for k, v in sorted(self.prices.items()))
