"""How a run-config field enters the version ids of the stages that read it.

A stage declares what it reads of the run config once, in ``READS`` beside its config section.
That one declaration is both the stage's deployment form (``deployment_forms``) and its version
id: the store hashes the part of the config the stage reads (``agentune.tasks.store.inputs``),
so no setting a stage reads can be left out of its id, and none it does not read can move it.

Most fields enter by their value. A field whose annotation carries one of the markers below
enters another way (``Annotated[str, FILE]``); a marker on a section covers everything in it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class VersionInput:
    """How a marked field enters a version id (the docstrings of the markers below)."""

    kind: str

    def __repr__(self) -> str:
        return self.kind.upper()


FILE = VersionInput("file")
"""A file or folder (or a list of them): by its contents' sha256, not its path, so moving an
input keeps the id and editing it moves the id. ``None`` stays ``None``; a folder that does not
exist enters as ``None`` too (an optional collection, e.g. ``environments.tools.documents``)."""

ARTIFACT = VersionInput("artifact")
"""A store reference (``queries@latest``): the version it resolves to is a parent of the output,
so it is in the id through the parents, not through the alias it was named by."""

UNTRACKED = VersionInput("untracked")
"""Decides where or how fast, not what comes out (work folders, concurrency, caches, limits on
spending): left out of the id, so changing it reuses the outputs."""

RESOLVED = VersionInput("resolved")
"""Enters as what the stage resolves it to, which the stage passes by the field's dotted path: a
model name as the model's identity (its files' hashes, or the published version), the tool catalog
as the environments' code and data, the reward section as its functions' lineage. A stage that
reads such a field and does not resolve it fails, so none is forgotten."""

ROLE = VersionInput("role")
"""An LLM role (``llm.teacher``): by what decides its answers, the provider and the model
(``LLMConfig.identities``), not by its endpoint, limits or prices."""
