"""The unit conversion tool, on pint's unit registry.

pint reads English names and symbols (``km``, ``mile``, ``°F``, ``m^2``, ``km/h``); the common
Chinese unit names a Chinese query leads the agent to write (公里, 斤, 摄氏度 ...) are mapped to
them first, with the two Chinese market units pint lacks (斤 = 0.5 kg, 亩 = 666.67 m²) defined.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import pint

from agentune.tasks.tools.observation import ToolContext, ToolFailure, ToolKind

CHINESE_UNITS = {
    "公里": "km",
    "千米": "km",
    "米": "m",
    "厘米": "cm",
    "毫米": "mm",
    "英里": "mile",
    "海里": "nautical_mile",
    "英尺": "ft",
    "英寸": "inch",
    "码": "yard",
    "千克": "kg",
    "公斤": "kg",
    "克": "g",
    "斤": "jin",
    "吨": "metric_ton",
    "磅": "lb",
    "盎司": "oz",
    "升": "L",
    "毫升": "mL",
    "加仑": "gallon",
    "摄氏度": "degC",
    "华氏度": "degF",
    "开尔文": "K",
    "平方米": "m**2",
    "平方公里": "km**2",
    "平方千米": "km**2",
    "公顷": "hectare",
    "亩": "mu",
    "公里每小时": "km/h",
    "千米每小时": "km/h",
    "米每秒": "m/s",
    "英里每小时": "mph",
}


@lru_cache(maxsize=1)
def registry() -> pint.UnitRegistry:
    """The shared registry (building one takes most of a second)."""
    units = pint.UnitRegistry()
    units.define("jin = 0.5 * kilogram")
    units.define("mu = 10000 / 15 * meter ** 2")
    return units


def _unit(name: str, field: str) -> Any:
    text = CHINESE_UNITS.get(name.strip(), name.strip())
    try:
        return registry().parse_units(text)
    except (
        pint.errors.UndefinedUnitError,
        pint.errors.DefinitionSyntaxError,
        ValueError,
        AttributeError,
        TypeError,
    ):
        raise ToolFailure("execution", f"unknown unit {name!r}", details={"field": field}) from None


def convert(value: float, from_unit: str, to_unit: str) -> dict[str, Any]:
    source, target = _unit(from_unit, "from_unit"), _unit(to_unit, "to_unit")
    try:
        result = registry().Quantity(value, source).to(target)
    except pint.errors.DimensionalityError:
        raise ToolFailure(
            "execution",
            f"cannot convert {from_unit} to {to_unit}: they measure different quantities",
        ) from None
    magnitude = float(f"{result.magnitude:.10g}")  # 85.99999999999993 °F is 86 °F
    return {
        "value": value,
        "from_unit": from_unit,
        "to_unit": to_unit,
        "result": magnitude,
        "unit_symbol": f"{result.units:~P}",
    }


class UnitConverter:
    kind: ToolKind = "real"
    required: tuple[str, ...] = ("value", "from_unit", "to_unit")

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        return convert(
            float(arguments["value"]), str(arguments["from_unit"]), str(arguments["to_unit"])
        )
