"""The deployments' forms without a server: every default a deployment carries validates as the
Prefect UI validates it (JSON Schema with formats, date-time included), stage forms are cut to
what the stage reads, and limits reach the descriptions the form shows."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml
from jsonschema import Draft202012Validator, FormatChecker
from prefect.utilities.callables import parameter_schema
from pydantic import BaseModel

from agentune.config import RunConfig, load_config
from agentune.config.llm import RoleConfig
from agentune.flows import RUNNABLE, STAGES
from agentune.paths import PROJECT_ROOT
from agentune.tasks.orchestration import console, deployment_forms

ROOT = PROJECT_ROOT
DEMO_CONFIG = ROOT / "configs" / "demo.yaml"
ROLES = ("teacher", "judge", "student")


def deployed(config: Path) -> list[tuple[str, dict, dict]]:
    """(flow, default parameters, parameter schema) of every deployment in prefect.yaml."""
    spec = console.deployment_spec(ROOT / "prefect.yaml", config, "agentune")
    out = []
    for d in spec["deployments"]:
        flow = console.flow_name(d)
        schema = console.deployment_schema(parameter_schema(RUNNABLE[flow]).model_dump(), flow)
        out.append((flow, d["parameters"], schema))
    return out


def errors(parameters: dict, schema: dict) -> list[str]:
    validator = Draft202012Validator(schema, format_checker=FormatChecker())
    return [f"{e.json_path}: {e.message}" for e in validator.iter_errors(parameters)]


@pytest.fixture(scope="module")
def demo_deployments() -> list[tuple[str, dict, dict]]:
    return deployed(DEMO_CONFIG)


def test_date_time_format_is_checked() -> None:
    # Without a format checker that knows date-time this whole file would prove nothing.
    assert not FormatChecker().conforms("2025-06-02T09:30:00", "date-time")
    assert FormatChecker().conforms("2025-06-02T09:30:00+08:00", "date-time")


@pytest.mark.parametrize("config", [DEMO_CONFIG, None], ids=["demo", "model-defaults"])
def test_every_default_validates_against_its_form(config: Path | None, tmp_path: Path) -> None:
    if config is None:
        config = tmp_path / "empty.yaml"
        config.write_text("{}\n", encoding="utf-8")
    found = deployed(config)
    assert {f for f, _, _ in found} == set(RUNNABLE)
    for flow, parameters, schema in found:
        assert errors(parameters, schema) == [], flow
        RunConfig.model_validate(parameters["config"])  # what the flow run does with them
        Draft202012Validator.check_schema(schema)


def role_branches(schema: dict) -> dict[str, dict]:
    """The teacher's form, by provider (where the UI looks for a choice: in the field itself)."""
    defs = schema["definitions"]
    root = defs[schema["properties"]["config"]["$ref"].rsplit("/", 1)[1]]
    llm = root["properties"]["llm"]
    if "properties" not in llm:
        llm = defs[llm["$ref"].rsplit("/", 1)[1]]
    teacher = llm["properties"]["teacher"]
    assert "$ref" not in teacher and "allOf" not in teacher and teacher["description"]
    return {b["title"]: b for b in teacher["anyOf"]}


def test_a_role_form_shows_its_provider_fields(demo_deployments) -> None:
    flow, parameters, schema = next(d for d in demo_deployments if d[0] == "pipeline")
    branches = role_branches(schema)
    assert list(branches) == ["local", "openai"]  # the default provider's form first
    assert "RoleConfig" not in schema["definitions"]
    openai, local = (set(branches[p]["properties"]) for p in ("openai", "local"))
    assert {"base_url", "api_key_env", "requests_per_minute"} <= openai - local
    assert {"batch_size", "dtype", "device", "tool_format", "chat_template"} <= local - openai
    assert {"provider", "model", "max_concurrency", "timeout_s"} <= openai & local
    assert deployment_forms.field_count({"anyOf": list(branches.values())}) == max(
        len(openai), len(local))
    # The deployment's role (as declared: it names the demo's models entry and says its
    # provider) validates under its provider's branch only.
    role = parameters["config"]["llm"]["teacher"]
    assert role["provider"] == "local" and role["model"] == "smollm2" and set(role) <= local
    assert [name for name, b in branches.items() if not errors(role, b)] == ["local"]
    # A stage form's role is resolved: exactly its provider's fields.
    _, synthesize, _ = next(d for d in demo_deployments if d[0] == "synthesize")
    assert set(synthesize["config"]["llm"]["teacher"]) == local
    # A whole role as the YAML gives it (both providers' fields) still validates, and only
    # under its provider's branch.
    whole = RoleConfig(provider="openai", model="served").model_dump(mode="json")
    assert [name for name, b in branches.items() if not errors(whole, b)] == ["openai"]


def test_a_local_role_refuses_rate_caps() -> None:
    with pytest.raises(ValueError, match="requests_per_minute: rate caps apply to openai"):
        RoleConfig(provider="local", requests_per_minute=60)
    assert RoleConfig(provider="openai", model="m", tokens_per_minute=1000).tokens_per_minute


def test_a_naive_time_is_refused_naming_the_field(demo_deployments, tmp_path: Path) -> None:
    flow, parameters, schema = next(d for d in demo_deployments if d[0] == "pipeline")
    parameters["config"]["evaluate"]["current_time"] = "2025-06-02T09:30:00"
    found = errors(parameters, schema)
    assert len(found) == 2 and all(e.startswith("$.config.evaluate.current_time: ") for e in found)
    assert any(e.endswith("is not a 'date-time'") for e in found)  # what the UI says
    # What the Prefect server runs (no format checker there): the pattern alone refuses it.
    from prefect.utilities.schema_tools.validation import ValidationError, validate
    with pytest.raises(ValidationError, match=r"config\.evaluate\.current_time"):
        validate(parameters, schema, raise_on_error=True)
    raw = yaml.safe_load(DEMO_CONFIG.read_text(encoding="utf-8"))
    raw["templates"]["current_time"] = "2025-06-02T09:30:00"
    bad = tmp_path / "naive.yaml"
    bad.write_text(yaml.safe_dump(raw), encoding="utf-8")
    with pytest.raises(ValueError, match="templates.current_time: .*timezone"):
        load_config(bad)


def test_a_stage_form_is_its_stage_not_the_whole_run(demo_deployments) -> None:
    counts = {flow: deployment_forms.field_count(schema) for flow, _, schema in demo_deployments}
    print({"form_fields": counts})
    config = demo_deployments[0][1]["config"]
    synth = next(p["config"] for f, p, _ in demo_deployments if f == "synthesize")
    assert set(synth) == {"name", "seed", "store", "llm", "synthesis", "environments", "verifier"}
    assert set(synth["llm"]) == {"teacher", "judge", "cache", "cache_dir", "budget",
                                 "global_concurrency_limit"}
    assert synth["environments"] == config["environments"]
    assert synth["synthesis"] == config["synthesis"]
    assert counts["pipeline"] > 300
    for flow, n in counts.items():
        if flow != "pipeline":
            assert n < 0.5 * counts["pipeline"], (flow, n)
    assert counts["synthesize"] <= counts["pipeline"] / 3
    # A stage run from its form builds the same settings as the whole config for what it reads.
    full = load_config(DEMO_CONFIG)
    stage = RunConfig.model_validate(synth)
    assert stage.synthesis == full.synthesis and stage.verifier == full.verifier
    assert stage.llm.teacher == full.llm.teacher and stage.llm.judge == full.llm.judge


def test_limits_and_empty_values_are_described(demo_deployments) -> None:
    schema = next(s for f, _, s in demo_deployments if f == "synthesize")
    defs = schema["definitions"]
    synthesis = defs["SynthesisConfig"]["properties"]
    assert "Limits: >= 1, <= 4096." in synthesis["concurrency"]["description"]
    openai, local = (role_branches(schema)[p]["properties"] for p in ("openai", "local"))
    assert openai["requests_per_minute"]["description"] == (
        "Request rate cap (null: no cap). Limits: >= 1.")
    assert local["batch_size"]["description"].endswith("Limits: >= 1, <= 512.")
    limits = defs["ToolLimits"]["properties"]
    assert limits["timeout_s"]["description"].endswith("Limits: > 0, <= 3600. Empty (None): not set.")
    # Every optional field of every form says what empty means.
    for flow, _, form in demo_deployments:
        for name, model in form["definitions"].items():
            for key, prop in model.get("properties", {}).items():
                if any(b.get("type") == "null" for b in prop.get("anyOf", ())):
                    assert re.search(r"null|empty|unset|default", prop.get("description", ""),
                                     re.IGNORECASE), (flow, name, key)
    assert defs["RunConfig"]["title"] == "synthesize settings"
    assert "EvaluateConfig" not in defs and "TrainConfig" not in defs


def run_config_reads(path: Path) -> set[str]:
    """What a module reads of the run config, as dotted paths: ``config.<section>.<field>`` (or
    ``runtime.config...``) is that field, a section used otherwise (passed on, dumped) the whole
    section; ``config.llm.identities("teacher")`` and an LLM role named as a call's argument
    (``gateway.chat("judge", ...)``, ``role="teacher"``) are ``llm.<role>``. Functions whose
    ``config`` is not a RunConfig (an EvaluateConfig ...) are left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    skipped = {id(node) for f in ast.walk(tree) if _config_is_not_run_config(f)
               for node in ast.walk(f)}
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            named = [*node.args, *(k.value for k in node.keywords if k.arg == "role")]
            found |= {f"llm.{a.value}" for a in named
                      if isinstance(a, ast.Constant) and a.value in ROLES}
        if id(node) in skipped or not _is_run_config_attribute(node):
            continue
        section = node.attr
        assert section in RunConfig.model_fields, f"{path}:{node.lineno}: config.{section}"
        model = RunConfig.model_fields[section].annotation
        fields = model.model_fields if isinstance(model, type) and issubclass(model, BaseModel) \
            else {}
        up = parents[node]
        if isinstance(up, ast.Attribute) and up.attr in fields:
            found.add(f"{section}.{up.attr}")
        elif not (isinstance(up, ast.Attribute) and up.attr == "identities"):
            found.add(section)
    return found


def _is_run_config_attribute(node: ast.AST) -> bool:
    """``config.X`` or ``<something>.config.X`` (``runtime.config``)."""
    if not isinstance(node, ast.Attribute):
        return False
    root = node.value
    return (isinstance(root, ast.Name) and root.id == "config"
            or isinstance(root, ast.Attribute) and root.attr == "config")


def _config_is_not_run_config(node: ast.AST) -> bool:
    return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
        a.arg == "config" and a.annotation is not None and ast.unparse(a.annotation) != "RunConfig"
        for a in (*node.args.args, *node.args.kwonlyargs))


@pytest.mark.parametrize("stage", sorted(STAGES))
def test_a_stage_declares_what_it_reads(stage: str) -> None:
    """A stage's form shows what it declares it reads (``READS``): exactly what its flow and task
    modules read of the run config, less the shared settings every form shows."""
    files = [ROOT / "flows" / f"{stage}.py", *sorted((ROOT / "tasks" / stage).rglob("*.py"))]
    for path in files:  # every RunConfig the scan must see is called `config`
        for arg in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(arg, ast.arg) and arg.annotation is not None:
                assert ast.unparse(arg.annotation) != "RunConfig" or arg.arg == "config", path
    shared = deployment_forms._tree(deployment_forms.SHARED)
    reads = {p for path in files for p in run_config_reads(path) if not _covered(shared, p)}
    reads = {p for p in reads if "." not in p or p.split(".")[0] not in reads}
    declared = deployment_forms.STAGE_FORMS[stage]
    assert sorted(declared) == sorted(reads), (
        f"{stage} reads {sorted(reads)}: set READS in agentune/config/{stage}.py to them")
    assert deployment_forms.form_paths(stage) == (*deployment_forms.SHARED, *declared)


def _covered(tree: dict, path: str) -> bool:
    """Whether ``path`` or a section above it is a whole field of ``tree``."""
    node: object = tree
    for part in path.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
        if node is True:
            return True
    return False


def test_every_stage_has_a_form() -> None:
    assert set(deployment_forms.STAGE_FORMS) == set(STAGES)
