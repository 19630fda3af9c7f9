"""The Prefect console: a local server, the work pool, deployments from prefect.yaml, a worker.

``console_up`` starts everything and records the PIDs in a state file; ``console_down`` ends
exactly those processes (each was started in a session of its own, so its whole process group,
flow-run children included, goes with it). ``deploy`` fills prefect.yaml's deployments with the
parameters of a run config file and deploys them to the API it is given.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx
import yaml

from agentune.config import load_config
from agentune.tasks.orchestration import deployment_forms
from agentune.tasks.orchestration.limits import limit_name

DEFAULT_PORT = 4200
DEFAULT_POOL = "agentune"
STATE_FILE = "agentune-ui.json"
ROLES = ("teacher", "judge", "student")


class ConsoleError(RuntimeError):
    """The console could not be brought up or down; the message says which step failed."""


@dataclass
class ConsoleState:
    port: int
    api_url: str
    ui_url: str
    pool: str
    server_pid: int
    worker_pid: int | None
    logs: str


def prefect_home() -> Path:
    return Path(os.environ.get("PREFECT_HOME", Path.cwd() / ".prefect")).resolve()


def state_path() -> Path:
    return prefect_home() / STATE_FILE


def offline_env(api_url: str) -> dict[str, str]:
    """The environment of every child: this server's API, no telemetry (FACTS: Prefect offline)."""
    return {
        **os.environ,
        "PREFECT_HOME": str(prefect_home()),
        "PREFECT_API_URL": api_url,
        "PREFECT_SERVER_UI_API_URL": api_url,  # the UI calls the API on the non-default port too
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",
    }


def _prefect(*args: str) -> list[str]:
    # The prefect CLI of this interpreter's environment, whatever is first on PATH.
    return [sys.executable, "-m", "prefect", *args]


def _run(cmd: Sequence[str], env: Mapping[str, str], what: str, cwd: Path | None = None) -> str:
    done = subprocess.run(list(cmd), env=dict(env), cwd=cwd, capture_output=True, text=True,
                          check=False)  # the exit status is turned into a ConsoleError below
    if done.returncode != 0:
        raise ConsoleError(f"{what} failed (exit {done.returncode}): "
                           f"{(done.stderr or done.stdout).strip()[-2000:]}")
    return done.stdout


def _spawn(cmd: Sequence[str], env: Mapping[str, str], log: Path, cwd: Path) -> int:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        proc = subprocess.Popen(list(cmd), env=dict(env), cwd=cwd, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    return proc.pid


def wait_healthy(api_url: str, timeout_s: float, pid: int | None = None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pid is not None and not _alive(pid):
            raise ConsoleError(f"the Prefect server (pid {pid}) exited before it was healthy")
        try:
            if httpx.get(f"{api_url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise ConsoleError(f"no healthy Prefect API at {api_url}/health after {timeout_s:g} s")


def flow_name(deployment: Mapping[str, object]) -> str:
    """The flow a prefect.yaml deployment runs (each flow is named as its function)."""
    return str(deployment["entrypoint"]).rsplit(":", 1)[1]


def deployment_spec(prefect_file: Path, config_path: str | Path, pool: str) -> dict:
    """prefect.yaml with every deployment's ``config`` parameter taken from the run config
    (validated first, so a bad config fails here naming file and field): the whole config for
    the pipeline, the fields its form shows for a stage (``deployment_forms``); the work pool set
    and the parameter schema enforced (the server refuses what the UI form would refuse); a
    deployment's own parameters (train_dpo's ``method``) stay beside it. Each LLM role of a stage
    form keeps its provider's fields only (those of the other provider do not apply to it)."""
    loaded = load_config(config_path)
    # The pipeline's form holds the whole config as declared, so an entry of `models:` edited
    # there reaches every role that names it; a stage's form shows its fields resolved (it may
    # not show the registry or the student its defaults come from).
    config, declared = loaded.model_dump(mode="json"), loaded.declared()
    for role in ROLES:  # the fields of the role's provider: its form's branch (deployment_forms)
        config["llm"][role] = getattr(loaded.llm, role).provider_dump()
        declared["llm"][role] = {k: v for k, v in declared["llm"][role].items()
                                 if k in config["llm"][role]}
    spec = yaml.safe_load(prefect_file.read_text(encoding="utf-8"))
    for deployment in spec["deployments"]:
        paths = deployment_forms.form_paths(flow_name(deployment))
        values = declared if paths is None else deployment_forms.prune_values(config, paths)
        deployment["parameters"] = {**(deployment.get("parameters") or {}), "config": values}
        deployment["work_pool"] = {**deployment.get("work_pool", {}), "name": pool}
        deployment["enforce_parameter_schema"] = True
    return spec


def deployment_schema(flow_schema: Mapping[str, object], flow: str) -> dict:
    """The parameter schema a deployment of ``flow`` gets: the flow's, cut to its form's fields,
    limits and empty values described."""
    paths = deployment_forms.form_paths(flow)
    if paths is None:
        return deployment_forms.prune_schema(flow_schema, None)
    return deployment_forms.prune_schema(
        flow_schema, paths, title=f"{flow} settings",
        description=f"The {flow} stage's settings, the fields of other sections it reads, and "
        "the shared ones (name, seed, store, its LLM roles). Everything else keeps its default; "
        "the pipeline deployment's form holds the whole run config.")


def _api(http: httpx.Client, method: str, url: str, what: str, **kwargs) -> httpx.Response:
    """One API call; a busy server's 5xx (SQLite locked on a loaded machine) is retried."""
    for attempt in range(6):
        try:
            response = http.request(method, url, **kwargs)
        except httpx.TransportError as exc:
            response, error = None, str(exc)
        if response is not None and response.status_code < 500:
            return response
        if response is not None:
            error = f"{response.status_code} {response.text[:300]}"
        time.sleep(min(2 ** attempt, 10))
    raise ConsoleError(f"{what}: the Prefect API kept failing: {error}")


def apply_forms(spec: Mapping[str, object], api_url: str) -> None:
    """Give each deployed deployment its form's schema (``prefect deploy`` always writes the
    flow's full one). The server checks the default parameters against it: a default the form
    would refuse fails here, naming the field."""
    with httpx.Client(base_url=api_url, timeout=30) as http:
        for deployment in spec["deployments"]:
            name = f"{flow_name(deployment)}/{deployment['name']}"
            got = _api(http, "GET", f"/deployments/name/{name}", f"reading deployment {name}")
            if got.status_code != 200:
                raise ConsoleError(f"reading deployment {name}: {got.status_code} "
                                   f"{got.text[:500]}")
            schema = deployment_schema(got.json()["parameter_openapi_schema"],
                                       flow_name(deployment))
            done = _api(http, "PATCH", f"/deployments/{got.json()['id']}",
                        f"updating deployment {name}", json={
                            "parameter_openapi_schema": schema,
                            "parameters": deployment["parameters"],
                            "enforce_parameter_schema": True})
            if done.status_code >= 300:
                raise ConsoleError(f"deployment {name}: the default parameters do not fit its "
                                   f"form: {done.text[:1000]}")


def deploy(config_path: str | Path, *, api_url: str, pool: str = DEFAULT_POOL,
           root: Path | None = None) -> list[str]:
    """Deploy every deployment of ``root``/prefect.yaml with the run config's parameters;
    returns the deployment names ("flow/deployment")."""
    root = (root or Path.cwd()).resolve()
    spec = deployment_spec(root / "prefect.yaml", config_path, pool)
    generated = prefect_home() / "agentune-deployments.yaml"
    generated.parent.mkdir(parents=True, exist_ok=True)
    generated.write_text(yaml.safe_dump(spec, sort_keys=False, allow_unicode=True),
                         encoding="utf-8")
    env = {**offline_env(api_url), "AGENTUNE_ROOT": str(root)}
    _run(_prefect("--no-prompt", "deploy", "--all", "--prefect-file", str(generated)), env,
         "prefect deploy", cwd=root)
    apply_forms(spec, api_url)
    return [f"{flow_name(d)}/{d['name']}" for d in spec["deployments"]]


def ensure_pool(pool: str, api_url: str) -> None:
    env = offline_env(api_url)
    _run(_prefect("work-pool", "create", pool, "--type", "process", "--overwrite"), env,
         f"creating work pool {pool!r}")


def ensure_llm_limits(config_path: str | Path, api_url: str) -> dict[str, int]:
    """A global concurrency limit per role, sized by the role's max_concurrency in the config."""
    config = load_config(config_path)
    env = offline_env(api_url)
    limits = {limit_name(role): getattr(config.llm, role).max_concurrency for role in ROLES}
    existing = _run(_prefect("global-concurrency-limit", "ls"), env, "listing limits")
    for name, limit in limits.items():
        verb = "update" if name in existing else "create"
        _run(_prefect("global-concurrency-limit", verb, name, "--limit", str(limit)), env,
             f"{verb} global concurrency limit {name}")
    return limits


def console_up(config_path: str | Path, *, port: int = DEFAULT_PORT, pool: str = DEFAULT_POOL,
               root: Path | None = None, start_timeout_s: float = 120.0) -> ConsoleState:
    """Server, work pool, limits, deployments and a worker; the PIDs go to the state file."""
    root = (root or Path.cwd()).resolve()
    if state_path().exists():
        raise ConsoleError(f"a console is already recorded in {state_path()}: run "
                           "`agentune ui --stop` first")
    api_url = f"http://127.0.0.1:{port}/api"
    env = offline_env(api_url)
    logs = prefect_home() / "logs"
    server_pid = _spawn(_prefect("server", "start", "--host", "127.0.0.1", "--port", str(port)),
                        env, logs / "server.log", root)
    state = ConsoleState(port=port, api_url=api_url, ui_url=f"http://127.0.0.1:{port}",
                         pool=pool, server_pid=server_pid, worker_pid=None, logs=str(logs))
    _save(state)  # from here on `--stop` can end what was started, whatever fails next
    wait_healthy(api_url, start_timeout_s, server_pid)
    ensure_pool(pool, api_url)
    ensure_llm_limits(config_path, api_url)
    deploy(config_path, api_url=api_url, pool=pool, root=root)
    state.worker_pid = _spawn(_prefect("worker", "start", "--pool", pool, "--type", "process"),
                              env, logs / "worker.log", root)
    _save(state)
    return state


def console_down(grace_s: float = 20.0) -> list[int]:
    """End the processes the state file records (their process groups: SIGTERM, SIGKILL after
    ``grace_s``) and wait until they are gone; returns their PIDs."""
    path = state_path()
    if not path.exists():
        return []
    state = ConsoleState(**json.loads(path.read_text(encoding="utf-8")))
    pids = [p for p in (state.worker_pid, state.server_pid) if p is not None]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            if sig is signal.SIGTERM or _alive(pid):  # SIGKILL only what outlived its grace
                _signal_group(pid, sig)
        # SIGTERM: their grace to stop; SIGKILL: a killed process takes a moment to go (longer
        # on a busy machine), so return once it has.
        deadline = time.monotonic() + grace_s
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
    path.unlink()
    return pids


def _save(state: ConsoleState) -> None:
    path = state_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(state), indent=2), encoding="utf-8")


def _signal_group(pid: int, sig: signal.Signals) -> None:
    # Each child leads its own session (start_new_session), so its group id is its pid.
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def _alive(pid: int) -> bool:
    try:
        # Reap it if it is our own exited child, so it does not linger as a zombie.
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
