"""Helpers of the Prefect console tests: a free loopback port, a small run config, and the live
members of a process group."""

from __future__ import annotations

import socket
from pathlib import Path

import yaml


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def process_group_members(pgid: int) -> list[int]:
    """Live processes in a process group (zombies count as gone)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        state, pgrp = fields[0], int(fields[2])
        if pgrp == pgid and state != "Z":
            members.append(int(entry.name))
    return members


def write_config(path: Path, store: Path, inputs: Path) -> Path:
    path.write_text(yaml.safe_dump({
        "seed": 0,
        "store": {"root": str(store)},
        "llm": {"cache_dir": str(path.parent / "cache")},
        "queries": {"seed_queries": str(inputs / "queries.jsonl"), "expand": False},
        "environments": {"catalog": str(inputs / "tools.yaml")},
    }), encoding="utf-8")
    return path
