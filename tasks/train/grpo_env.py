"""agentune's environments as TRL ``environment_factory`` environments, and the reward registry
as TRL reward functions.

TRL's GRPOTrainer turns an environment class's public methods into tools (their schemas read
from type hints and Google docstrings), calls ``reset(**row)`` with the dataset row before each
rollout, and runs the tools the model calls between its turns. Here one class is made per
agentune environment a scenario happens in (``environment`` column: TRL's multi-environment
routing), with one async method per offered tool (and ``ask_user``), whose signature mirrors the
tool's JSON schema (its top-level properties; nested objects are rendered as plain objects and
arrays, as TRL can only read Python signatures). A method answers the call as every episode of
agentune does (:class:`~agentune.tasks.rollouts.episode.Counterparts`: the tool executor in the
scenario's session; ``ask_user`` by a user stating their hidden information); seed 003's limits
apply: at most ``max_parallel_calls`` calls of a turn run (the rest answer an error), and a
result longer than ``max_tool_response_length`` tokens is cut on the configured side.

Each reward term of the registry is one TRL reward function (weights are TRL's
``reward_weights``). The rollout is the prompt and completion TRL hands over, read as the
verifier reads any :class:`~agentune.tasks.rollouts.episode.Trajectory` and replayed in a fresh
session; the verdict is computed once per rollout and shared by the terms.
"""

from __future__ import annotations

import inspect
import json
import keyword
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agentune.config.train import GRPOSettings
from agentune.config.verifier import VerifierConfig
from agentune.tasks.environments.catalog import EnvironmentCatalog
from agentune.tasks.environments.replay import Episode
from agentune.tasks.environments.scenarios import ScenarioRecord
from agentune.tasks.rollouts.episode import Counterparts, Trajectory, VerbatimUser
from agentune.tasks.tools.catalog import ToolSpec
from agentune.tasks.tools.observation import Observation
from agentune.tasks.tools.truncation import TruncateSide, truncate_observation
from agentune.tasks.verifier.rewards import RewardModel, RewardScore
from agentune.tasks.verifier.rollout import ask_user_tool
from agentune.tasks.verifier.verify import verify

_PY_TYPES: dict[str, type] = {"string": str, "integer": int, "number": float, "boolean": bool,
                              "array": list, "object": dict}


# train.grpo.tool_response_truncate_side names the part that is cut; truncate_observation's
# side names the part that is kept.
_KEPT_SIDE: dict[str, TruncateSide] = {"left": "right", "right": "left", "middle": "middle"}


def truncate(text: str, tokenizer: Any, limit: int, side: str) -> str:
    """``text`` cut to ``limit`` tokens: its ``left``, ``right`` or ``middle`` part dropped."""
    return truncate_observation(text, limit, _KEPT_SIDE[side], tokenizer).text


def tool_method(tool: ToolSpec) -> Callable[..., Any]:
    """An async method named as the tool whose signature and docstring give its schema."""
    props: Mapping[str, Any] = tool.parameters.get("properties") or {}
    required = set(tool.parameters.get("required") or [])
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    docs = []
    for name, schema in props.items():
        if not name.isidentifier() or keyword.iskeyword(name):
            raise ValueError(f"tool {tool.name!r}: parameter {name!r} is not a Python name, "
                             "which TRL's environment tools need")
        schema = schema if isinstance(schema, Mapping) else {}
        kind = schema.get("type")
        py: Any = _PY_TYPES.get(kind if isinstance(kind, str) else "string", str)
        if name not in required:
            py = py | None
        annotations[name] = py
        params.append(inspect.Parameter(
            name, inspect.Parameter.KEYWORD_ONLY, annotation=py,
            default=inspect.Parameter.empty if name in required else None))
        text = " ".join(str(schema.get("description") or name).split())
        if schema.get("enum"):
            text += f" (choices: {json.dumps(schema['enum'], ensure_ascii=False)})"
        docs.append(f"    {name}: {text}")
    annotations["return"] = str
    description = " ".join((tool.description or tool.name).split())

    async def method(self: AgentEnvironment, **arguments: Any) -> str:
        given = {k: v for k, v in arguments.items() if v is not None or k in required}
        return await self._call(tool.name, given)

    method.__name__ = method.__qualname__ = tool.name
    method.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    method.__annotations__ = annotations
    method.__doc__ = description + ("\n\nArgs:\n" + "\n".join(docs) if docs else "")
    return method


class AgentEnvironment:
    """Base of the generated environment classes: one rollout in one scenario's session."""

    environment: str = ""
    episode: Episode
    records: Mapping[str, ScenarioRecord]
    limits: GRPOSettings
    """``train.grpo``: its ``max_parallel_calls`` and tool result length and side apply."""
    tokenizer: Any = None

    def __init__(self) -> None:
        self._record: ScenarioRecord | None = None
        self._counterparts: Counterparts | None = None
        self._turn_calls = 0
        self._score: RewardScore | None = None

    def reset(self, **row: Any) -> None:
        scenario_id = row.get("scenario_id")
        if scenario_id not in self.records:
            raise KeyError(f"scenario {scenario_id!r} is not among the run's scenarios")
        self._record = self.records[str(scenario_id)]
        self._counterparts = Counterparts.of(self._record, self.episode, VerbatimUser())
        self._turn_calls = 0
        self._score = None
        return None

    def _end_turn(self) -> None:
        """The model is about to generate again: the calls of its last turn are done."""
        self._turn_calls = 0

    async def _call(self, name: str, arguments: dict[str, Any]) -> str:
        assert self._counterparts is not None, "reset() was not called"
        self._turn_calls += 1
        if self._turn_calls > self.limits.max_parallel_calls:
            return json.dumps({"error": f"not run: at most {self.limits.max_parallel_calls} "
                               "calls run per turn"})
        answer = await self._counterparts.answer(name, dict(arguments))
        text = answer.content if isinstance(answer, Observation) else answer
        return truncate(text, self.tokenizer, self.limits.max_tool_response_length,
                        self.limits.tool_response_truncate_side)

    async def _scored(self, prompt: Sequence[Mapping[str, Any]],
                      completion: Sequence[Mapping[str, Any]], finished: bool,
                      reward: RewardModel, verifier: VerifierConfig) -> RewardScore:
        """The rollout's reward (verified once, shared by every term)."""
        if self._score is None:
            assert self._record is not None
            messages = [dict(m) for m in (*prompt, *completion)]
            last = messages[-1] if messages else {}
            answered = finished and last.get("role") == "assistant" and not last.get("tool_calls")
            rollout = Trajectory(messages, answered=answered).rollout()
            record = self._record
            verdict = await verify(record.scenario, record.expected_state, rollout, self.episode,
                                   verifier, initial_state=record.start_state, now=record.now)
            self._score = reward.score(verdict, scenario=record.scenario, rollout=rollout)
        return self._score


def environment_classes(catalog: EnvironmentCatalog, records: Mapping[str, ScenarioRecord],
                        episode: Episode, limits: GRPOSettings, tokenizer: Any
                        ) -> dict[str, type[AgentEnvironment]]:
    """One environment class per environment the scenarios happen in."""
    out: dict[str, type[AgentEnvironment]] = {}
    for name in sorted({r.scenario.environment for r in records.values()}):
        tools = [*catalog.offered_tools(name), ask_user_tool()]
        namespace: dict[str, Any] = {t.name: tool_method(t) for t in tools}
        namespace |= {"environment": name, "episode": episode, "records": records,
                      "limits": limits, "tokenizer": tokenizer,
                      "__doc__": f"The {name} environment of agentune's catalog."}
        clash = [t.name for t in tools if hasattr(AgentEnvironment, t.name)]
        if clash:
            raise ValueError(f"environment {name!r}: tool names {clash} clash with the "
                             "environment's own methods")
        out[name] = type(f"Env_{name}", (AgentEnvironment,), namespace)
    return out


def reward_functions(reward: RewardModel, verifier: VerifierConfig, eos_ids: Sequence[int]
                     ) -> tuple[list[Callable[..., Any]], list[float]]:
    """One TRL reward function per registry term, and their weights."""
    funcs = []
    for term in reward.terms:
        async def one(prompts: Sequence[Any], completions: Sequence[Any],
                      completion_ids: Sequence[Sequence[int]], environments: Sequence[Any],
                      _name: str = term.name, **_: Any) -> list[float]:
            out = []
            for prompt, completion, ids, env in zip(prompts, completions, completion_ids,
                                                    environments, strict=True):
                finished = bool(ids) and ids[-1] in eos_ids
                score = await env._scored(prompt, completion, finished, reward, verifier)
                out.append(score.terms[_name])
            return out

        one.__name__ = term.name.replace(".", "_").replace(":", "__")
        funcs.append(one)
    return funcs, [t.weight for t in reward.terms]
