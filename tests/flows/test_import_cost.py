"""Importing the flows (as a Prefect worker, the CLI or ``prefect deploy`` does) loads no torch:
the stages that run a model import it when they run one, so an openai-only run and a deployment's
registration never pay its ~2.5 s import or its memory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

FLOWS = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "flows").glob("*.py")
               if p.stem != "__init__")


def test_importing_the_flows_loads_no_torch() -> None:
    probe = ("import importlib, sys\n"
             f"for flow in {FLOWS!r}:\n"
             "    importlib.import_module('agentune.flows.' + flow)\n"
             "    if 'torch' in sys.modules:\n"
             "        print('torch after', flow)\n"
             "        break\n"
             "else:\n"
             "    print('no torch')\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, timeout=300)
    assert out.stdout.strip().splitlines()[-1] == "no torch"
