"""Python environments: a class named ``module:Class`` or ``path/to/file.py:Class``, its tools read
from its methods.

Each tool's schema comes from transformers' ``get_json_schema`` (type hints + Google docstring),
tidied into plain JSON Schema (``nullable`` becomes a ``null`` type; the ``return`` entry goes).
A method whose schema cannot be made (a parameter without a type hint, a docstring without an
``Args:`` entry for it) is an :class:`InputError` naming the file, the line and the parameter.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import re
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers.utils import get_json_schema
from transformers.utils.chat_template_utils import (
    DocstringParsingException,
    TypeHintParsingException,
)

from agentune.tasks.common.input_files import InputError
from agentune.tasks.environments.base import (
    Environment,
    generated_paths,
    tool_methods,
    writing_tools,
)
from agentune.tasks.tools.catalog import ToolSpec, validate_tool

_PARAM_IN_MESSAGE = re.compile(r"(?:Argument|argument) '?(\w+)'?")


@dataclass(frozen=True)
class PythonEnvironmentClass:
    """A loaded environment class and what it offers."""

    cls: type[Environment]
    source: str
    """Where it was loaded from, as written in the environments file."""
    tools: tuple[ToolSpec, ...]
    generated: tuple[str, ...]
    writes: frozenset[str]

    def new(self) -> Environment:
        return self.cls()


def load_class(ref: str, *, base_dir: Path, file: str | Path, where: str) -> type[Environment]:
    """``module:Class`` (importable) or ``file.py:Class`` (relative to ``base_dir``)."""
    cls = load_object(ref, base_dir=base_dir, file=file, where=where, field="class")
    if not (inspect.isclass(cls) and issubclass(cls, Environment)):
        raise InputError(file, where, "class",
                         f"{ref!r}: not a subclass of agentune's Environment")
    return cls


def load_object(ref: str, *, base_dir: Path, file: str | Path, where: str, field: str) -> Any:
    """What ``module:NAME`` or ``file.py:NAME`` (relative to ``base_dir``) names; errors name
    the catalog file, the entry and ``field``."""
    module_ref, sep, class_name = ref.rpartition(":")
    if not sep or not module_ref or not class_name:
        raise InputError(file, where, field, f"{ref!r}: write module:NAME or path/file.py:NAME")
    if module_ref.endswith(".py"):
        path = (base_dir / module_ref).resolve()
        if not path.is_file():
            raise InputError(file, where, field, f"{ref!r}: {path} not found")
        # A stable module name per file, so a class loaded twice is the same class.
        name = "agentune_env_" + hashlib.sha1(str(path).encode()).hexdigest()[:12]
        module = sys.modules.get(name)
        if module is None:
            spec = importlib.util.spec_from_file_location(name, path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            try:
                spec.loader.exec_module(module)
            except Exception as exc:
                del sys.modules[name]
                raise InputError(file, where, field,
                                 f"{ref!r}: importing {path} failed: {exc!r}") from None
    else:
        try:
            module = importlib.import_module(module_ref)
        except ImportError as exc:
            raise InputError(file, where, field, f"{ref!r}: cannot import: {exc}") from None
    if not hasattr(module, class_name):
        raise InputError(file, where, field, f"{ref!r}: {module_ref} has no {class_name}")
    return getattr(module, class_name)


def source_file(ref: str, *, base_dir: Path) -> str:
    """The file a ``file.py:NAME`` or ``module:NAME`` reference (already loaded) lives in."""
    module_ref = ref.rpartition(":")[0]
    if module_ref.endswith(".py"):
        return str((base_dir / module_ref).resolve())
    spec = importlib.util.find_spec(module_ref)
    return str(spec.origin) if spec is not None and spec.origin else ref


def _plain_schema(schema: Any) -> Any:
    """get_json_schema's output as standard JSON Schema: ``nullable: true`` -> a null type."""
    if isinstance(schema, list):
        return [_plain_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: _plain_schema(v) for k, v in schema.items() if k != "nullable"}
    if schema.get("nullable") and "type" in out:
        kinds = out["type"] if isinstance(out["type"], list) else [out["type"]]
        out["type"] = [*kinds, "null"] if "null" not in kinds else kinds
    return out


def tool_schema(method: Callable[..., Any], *, owner: str) -> ToolSpec:
    """One method's tool schema; an unusable signature or docstring names file, line, parameter."""
    file = inspect.getsourcefile(method) or owner
    line = f"line {method.__code__.co_firstlineno}"
    try:
        # Bound (to any object) so that ``self`` is not read as a parameter.
        schema = get_json_schema(types.MethodType(method, object()))
    except (TypeHintParsingException, DocstringParsingException) as exc:
        found = _PARAM_IN_MESSAGE.search(str(exc))
        field = f"{method.__name__}.{found.group(1)}" if found else method.__name__
        raise InputError(file, line, field, f"{owner}: {exc}") from None
    function = dict(schema["function"])
    function.pop("return", None)
    if not function.get("description"):
        raise InputError(file, line, method.__name__,
                         f"{owner}: the docstring has no description of the tool")
    parameters = _plain_schema(function.get("parameters", {"type": "object"}))
    # get_json_schema leaves the signature's defaults out; the executor fills them in from here.
    for name, param in inspect.signature(method).parameters.items():
        prop = parameters.get("properties", {}).get(name)
        if prop is not None and param.default is not inspect.Parameter.empty \
                and param.default is not None:
            prop["default"] = param.default
    function["parameters"] = parameters
    return validate_tool({"type": "function", "function": function}, source=file, where=line)


def inspect_class(cls: type[Environment], *, source: str) -> PythonEnvironmentClass:
    """The class's tools (schemas checked) and generated state paths."""
    methods = tool_methods(cls)
    if not methods:
        raise InputError(inspect.getsourcefile(cls) or source, None, cls.__name__,
                         "an environment class needs at least one public method (a tool)")
    tools = tuple(tool_schema(m, owner=f"{cls.__name__}.{name}") for name, m in methods.items())
    return PythonEnvironmentClass(cls, source, tools, generated_paths(cls), writing_tools(cls))
