"""The BFCL side of agentune's BFCL evaluation: a script run by the bfcl-eval virtual environment's
Python (``.venv-bfcl``), never imported by agentune, so it imports only the standard library and
``bfcl_eval``. bfcl-eval pins numpy and pulls ~30 SDKs, which is why it lives in its own venv.

Three commands, each a fresh process (BFCL keeps environment instances in module globals):

``entries``  (stdin: ``{"ids": {category: [id, ...] | null}, "mode": "prompt" | "fc"}``) prints
    one JSON object: for a category with ``null`` its ids (agentune samples from them), else each
    listed entry as the model is to be asked: its turns of messages (prompt mode: BFCL's own
    system prompt listing the functions, exactly as its prompting handlers build it), the
    functions as OpenAI tools (fc mode: BFCL's own conversion, dots in names become ``_``),
    for multi-turn entries what the environments start from, and the result folder BFCL reads.
``serve``    a long-lived process for multi-turn generation: reads one JSON request a line, writes
    one JSON answer a line. ``{"op": "step", "session", "id", "initial_config",
    "involved_classes", "mode", "response"}`` decodes the model's response as BFCL's handler does
    (prompt: ``default_decode_execute_prompting``; fc: ``convert_to_function_call``) and, when it
    holds calls, executes them in BFCL's own environment classes
    (``execute_multi_turn_func_call``, state kept per session and entry across turns); the
    answer has the results and (prompt mode) the user message BFCL feeds them back as.
``evaluate`` (argv: a JSON spec) registers the model names at run time, then runs BFCL's own
    ``bfcl evaluate --partial-eval`` command in this process. ``BFCL_PROJECT_ROOT`` must be set
    by the caller (bfcl-eval reads it on import).
"""

from __future__ import annotations

import contextlib
import json
import sys

PROMPT, FC = "prompt", "fc"


def _entries(request: dict) -> dict:
    from bfcl_eval.constants.enums import ModelStyle
    from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI
    from bfcl_eval.model_handler.utils import (
        convert_to_tool,
        system_prompt_pre_processing_chat_model,
    )
    from bfcl_eval.utils import (
        get_directory_structure_by_category,
        is_multi_turn,
        load_dataset_entry,
    )

    out: dict = {}
    for category, ids in request["ids"].items():
        entries = load_dataset_entry(category, include_prereq=False)
        if ids is None:
            out[category] = {"ids": [e["id"] for e in entries],
                             "folder": get_directory_structure_by_category(category)}
            continue
        wanted = set(ids)
        chosen = []
        for entry in entries:
            if entry["id"] not in wanted:
                continue
            if entry.get("missed_function"):
                raise ValueError(f"{entry['id']}: categories with held-out functions are not "
                                 "supported")
            turns = [list(turn) for turn in entry["question"]]
            if request["mode"] == PROMPT:
                turns[0] = system_prompt_pre_processing_chat_model(
                    turns[0], entry["function"], entry["id"])
                tools = []
            else:
                tools = convert_to_tool(entry["function"], GORILLA_TO_OPENAPI,
                                        ModelStyle.OPENAI_COMPLETIONS)
            multi = is_multi_turn(category)
            chosen.append({
                "id": entry["id"], "category": category, "turns": turns, "tools": tools,
                "multi_turn": multi,
                "initial_config": entry.get("initial_config", {}) if multi else None,
                "involved_classes": entry.get("involved_classes", []) if multi else None,
                "long_context": multi and ("long_context" in category
                                           or "composite" in category)})
        out[category] = {"entries": chosen,
                         "folder": get_directory_structure_by_category(category)}
    return out


def _step(request: dict) -> dict:
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import (
        execute_multi_turn_func_call,
        is_empty_execute_response,
    )
    from bfcl_eval.model_handler.utils import (
        convert_to_function_call,
        default_decode_execute_prompting,
        format_execution_results_prompting,
    )

    response = request["response"]
    try:
        if request["mode"] == PROMPT:
            calls = default_decode_execute_prompting(response)
        else:
            if isinstance(response, str):
                raise ValueError("a text answer, no function call")
            calls = convert_to_function_call(response)
    except Exception as exc:  # BFCL's own loop ends the turn on any decoding failure
        return {"calls": None, "error": f"{type(exc).__name__}: {exc}", "results": []}
    if is_empty_execute_response(calls):
        return {"calls": [], "error": None, "results": []}
    results, _ = execute_multi_turn_func_call(
        calls, request["initial_config"], request["involved_classes"], request["session"],
        request["id"], long_context=bool(request.get("long_context")), is_evaL_run=False)
    results = [str(r) for r in results]
    # Prompt mode: the results go back as one user message, as BFCL's prompting handlers send it.
    feedback = format_execution_results_prompting({}, results,
                                                  {"model_responses_decoded": calls})
    return {"calls": calls, "error": None, "results": results, "feedback": feedback}


def _serve(out) -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            answer = _step(json.loads(line))
        except Exception as exc:
            answer = {"calls": None, "error": f"worker: {type(exc).__name__}: {exc}",
                      "results": []}
        out.write(json.dumps(answer, ensure_ascii=False) + "\n")
        out.flush()


def _evaluate(spec: dict) -> None:
    from bfcl_eval.__main__ import cli
    from bfcl_eval.constants import model_config
    from bfcl_eval.model_handler.api_inference.openai_completion import (
        OpenAICompletionsHandler,
    )

    for model in spec["models"]:
        fc = model["mode"] == FC
        model_config.MODEL_CONFIG_MAPPING[model["name"]] = model_config.ModelConfig(
            model_name=model["name"], display_name=f"{model['name']} ({'FC' if fc else 'Prompt'})",
            url="", org="agentune", license="", model_handler=OpenAICompletionsHandler,
            is_fc_model=fc, underscore_to_dot=fc)
    args = ["evaluate", "--model", ",".join(m["name"] for m in spec["models"]),
            "--test-category", ",".join(spec["categories"]), "--partial-eval"]
    cli(args, standalone_mode=False)


def main() -> None:
    command = sys.argv[1]
    # bfcl-eval prints progress to stdout: the protocol gets the real stdout, the rest stderr.
    out = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):
        if command == "entries":
            answer = _entries(json.load(sys.stdin))
            out.write(json.dumps(answer, ensure_ascii=False))
        elif command == "serve":
            out.write(json.dumps({"ready": True}) + "\n")
            out.flush()
            _serve(out)
        elif command == "evaluate":
            _evaluate(json.loads(sys.argv[2]))
        else:
            raise SystemExit(f"unknown command {command!r}")


if __name__ == "__main__":
    main()
