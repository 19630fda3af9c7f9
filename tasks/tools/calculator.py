"""The calculator tool: a math expression evaluated without running arbitrary code.

``simpleeval`` walks the expression's syntax tree; only the node kinds, operators, names and
functions listed here are accepted (no attributes, subscripts, strings, assignments, lambdas or
comprehensions), and powers, factorials and combinatorics are bounded so that no expression can
hang the process. Before parsing, calculator notation is translated: ``×``/``÷``/``−``, ``^`` for
power, a trailing ``%`` after a number for percent (``17.5% * 2340``; ``10 % 3`` stays modulo),
full-width characters, and thousands separators (``2,340``) when the expression calls no function.
"""

from __future__ import annotations

import ast
import math
import operator
import re
import unicodedata
from collections.abc import Callable
from typing import Any

from simpleeval import InvalidExpression, SimpleEval

from agentune.tasks.tools.observation import ToolContext, ToolFailure, ToolKind

MAX_EXPRESSION_CHARS = 2000
MAX_RESULT_BITS = 10_000  # ~3000 decimal digits: exact, and printable as JSON
MAX_FACTORIAL = 1000

_SYMBOLS = {"×": "*", "·": "*", "÷": "/", "−": "-", "–": "-", "^": "**"}
_PERCENT = re.compile(r"(\d+(?:\.\d+)?)\s*%(?=\s*(?:$|[-+*/),]))")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_CALL = re.compile(r"[A-Za-z_]\w*\s*\(")


def _power(base: Any, exponent: Any) -> Any:
    exact = isinstance(base, int) and isinstance(exponent, int)
    if (
        exact
        and exponent > 0
        and abs(base) > 1
        and exponent * math.log2(abs(base)) > MAX_RESULT_BITS
    ):
        raise ValueError(f"{base} ** {exponent} is too large to compute exactly")
    result = base**exponent
    if isinstance(result, complex):
        raise ValueError(f"{base} ** {exponent} is not a real number")
    return result


def _bounded(fn: Callable[..., int], name: str) -> Callable[..., int]:
    def call(*args: Any) -> int:
        if any(isinstance(a, int) and a > MAX_FACTORIAL for a in args):
            raise ValueError(f"{name} is limited to arguments up to {MAX_FACTORIAL}")
        return fn(*args)

    return call


def _log(x: float, base: float | None = None) -> float:
    return math.log(x) if base is None else math.log(x, base)


OPERATORS: dict[type, Callable[..., Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: _power,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}
FUNCTIONS: dict[str, Callable[..., Any]] = {
    "sqrt": math.sqrt,
    "cbrt": math.cbrt,
    "exp": math.exp,
    "ln": math.log,
    "log": _log,
    "log10": math.log10,
    "log2": math.log2,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "asin": math.asin,
    "acos": math.acos,
    "atan": math.atan,
    "atan2": math.atan2,
    "sinh": math.sinh,
    "cosh": math.cosh,
    "tanh": math.tanh,
    "degrees": math.degrees,
    "radians": math.radians,
    "hypot": math.hypot,
    "abs": abs,
    "round": round,
    "floor": math.floor,
    "ceil": math.ceil,
    "min": min,
    "max": max,
    "pow": _power,
    "gcd": math.gcd,
    "lcm": math.lcm,
    "factorial": _bounded(math.factorial, "factorial"),
    "comb": _bounded(math.comb, "comb"),
    "perm": _bounded(math.perm, "perm"),
}
NAMES: dict[str, float] = {"pi": math.pi, "e": math.e, "tau": math.tau}
_ALLOWED_NODES = (
    ast.Expr,
    ast.Name,
    ast.UnaryOp,
    ast.BinOp,
    ast.Compare,
    ast.Call,
    ast.Constant,
)


class _Evaluator(SimpleEval):  # type: ignore[misc]
    """simpleeval restricted to arithmetic: every other node kind is refused."""

    def __init__(self) -> None:
        super().__init__(operators=OPERATORS, functions=FUNCTIONS, names=NAMES)
        self.nodes = {kind: self.nodes[kind] for kind in _ALLOWED_NODES}
        self.nodes[ast.Constant] = self._number

    def _number(self, node: ast.Constant) -> Any:
        if isinstance(node.value, bool) or not isinstance(node.value, int | float):
            raise ValueError(f"only numbers are allowed, got {node.value!r}")
        return node.value


def normalise_expression(expression: str) -> str:
    """Calculator notation translated to the Python arithmetic the evaluator reads."""
    text = unicodedata.normalize("NFKC", expression).strip()
    for symbol, replacement in _SYMBOLS.items():
        text = text.replace(symbol, replacement)
    text = _PERCENT.sub(r"(\1/100)", text)
    if not _CALL.search(text):
        text = _THOUSANDS.sub("", text)
    return text


def evaluate(expression: str, precision: int = 6) -> int | float | bool:
    """The value of ``expression``; floats rounded to ``precision`` decimal places.

    Raises ``ValueError`` with a readable reason when the expression cannot be evaluated.
    """
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ValueError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters")
    text = normalise_expression(expression)
    if not text:
        raise ValueError("the expression is empty")
    try:
        value = _Evaluator().eval(text)
    except SyntaxError as exc:
        raise ValueError(f"not a valid expression ({exc.msg})") from None
    except (InvalidExpression, ArithmeticError, TypeError, ValueError) as exc:
        reason = str(exc) or type(exc).__name__
        if isinstance(exc, InvalidExpression) and "not allowed" not in reason:
            reason = f"{reason} (only arithmetic, numbers and math functions are allowed)"
        raise ValueError(reason) from None
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        if value.bit_length() > MAX_RESULT_BITS:
            raise ValueError("the result is too large to show exactly")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("the result is not a finite number")
        return round(value, precision)
    raise ValueError(f"the result is not a number ({type(value).__name__})")


class Calculator:
    """Backend of a catalog tool with ``expression`` and optional ``precision`` arguments."""

    kind: ToolKind = "real"
    required: tuple[str, ...] = ("expression",)

    async def run(self, arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
        expression = str(arguments["expression"])
        try:
            value = evaluate(expression, int(arguments.get("precision", 6)))
        except ValueError as exc:
            raise ToolFailure(
                "execution",
                f"cannot evaluate the expression: {exc}",
                details={"expression": expression},
            ) from None
        return {"expression": normalise_expression(expression), "result": value}
