"""The versioned artifact store: every stage reads versions and publishes one.

Layout under the store root (default ``data/artifacts``)::

    <name>/versions/<version>/part-00000.parquet ...   the table (if the version has one)
    <name>/versions/<version>/__meta__/manifest.json   what it is and where it came from
    <name>/versions/<version>/__files__/...            any other payload: a model folder, a PNG,
                                                         a dataset card
    <name>/latest -> versions/<version>                 an alias (a symlink, swapped atomically)

The non-Parquet parts sit in ``__``-prefixed folders because both ``pd.read_parquet(<version dir>)``
(pyarrow skips ``_``/``.`` prefixes) and ``datasets.load_dataset("parquet", data_dir=...)`` (skips
``__`` folders) would otherwise try to read them as Parquet and fail.

A version is written into a hidden temporary folder and renamed into place in one step, so a
killed writer never leaves a visible partial version. Its id is a hash of its name, its parents,
the parameters that produced it and the code version, so an unchanged re-run finds it and skips
the work.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any

import datasets
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, Field

from agentune.paths import PACKAGE_DIR, PROJECT_ROOT
from agentune.tasks.store.file_hashes import read_digest, sha256_file

META_DIR = "__meta__"
FILES_DIR = "__files__"
MANIFEST = f"{META_DIR}/manifest.json"
ROWS_PER_PART = 100_000
_ALIAS_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789_-")


class StoreError(RuntimeError):
    """A version that cannot be found, read or trusted; the message names the path."""


class ChecksumError(StoreError):
    """A file of a version no longer matches the sha256 its manifest recorded."""


@dataclass(frozen=True, order=True)
class VersionRef:
    name: str
    version: str

    def __str__(self) -> str:
        return f"{self.name}@{self.version}"


class FileEntry(BaseModel):
    sha256: str
    bytes: int


class Manifest(BaseModel):
    """Everything needed to trust, reproduce and trace one version."""

    name: str
    version: str
    created_at: str
    rows: int | None = Field(description="Rows of the table; None for a version without one.")
    columns: list[str] = Field(default_factory=list)
    arrow_schema: str | None = Field(None, description="The table's Arrow schema, as text.")
    files: dict[str, FileEntry] = Field(description="Every file of the version but the manifest.")
    parents: list[dict[str, str]] = Field(default_factory=list)
    params: dict[str, Any] = Field(default_factory=dict)
    code_version: str
    git_commit: str
    stats: dict[str, Any] = Field(default_factory=dict)
    description: str = ""

    @property
    def ref(self) -> VersionRef:
        return VersionRef(self.name, self.version)

    @property
    def parent_refs(self) -> list[VersionRef]:
        return [VersionRef(p["name"], p["version"]) for p in self.parents]


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)


@lru_cache(maxsize=1)
def code_version() -> str:
    """A hash of agentune's own source (Python and templates).

    Content rather than the git commit, so a commit that touches only docs keeps every version
    id, and an uncommitted edit to the code does change them.
    """
    digest = hashlib.sha256()
    roots = [PACKAGE_DIR] + [PROJECT_ROOT / d for d in ("flows", "tasks", "templates")]
    files = sorted(
        {p.resolve() for r in roots if r.is_dir() for p in r.rglob("*") if p.suffix in {".py", ".j2"}}
    )
    for path in files:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


@lru_cache(maxsize=1)
def git_commit() -> str:
    """The checkout's commit, with ``-dirty`` when it has uncommitted changes; ``unknown`` if none."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=PROJECT_ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=PROJECT_ROOT, capture_output=True, text=True, check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit + ("-dirty" if dirty else "")


def file_fingerprint(path: str | Path) -> str:
    """sha256 of an input file or folder's files, for a stage's parameters: changed input, new id."""
    path = Path(path)
    if path.is_file():
        return sha256_file(path)
    if not path.is_dir():
        raise StoreError(f"{path}: input not found")
    digest = hashlib.sha256()
    for item in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(str(item.relative_to(path)).encode())
        digest.update(sha256_file(item).encode())
    return digest.hexdigest()


def _plain(value: Any) -> Any:
    """numpy scalars and arrays (cells of a DataFrame read back from Parquet) as Python values."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def json_text(value: Any) -> str:
    """A ``Json()`` value as the JSON text datasets would store, but with non-ASCII text kept as
    characters (datasets' encoder escapes it: ``"\\u4f60"``, unreadable in pandas) and floats
    exact. A string that already parses as JSON stands for that JSON value, as in datasets."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            pass
    try:
        return json.dumps(value, ensure_ascii=False, default=_plain, allow_nan=False)
    except ValueError:  # NaN or infinity inside: null, as datasets writes them
        return json.dumps(_finite(json.loads(json.dumps(value, default=_plain))),
                          ensure_ascii=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _encode_json(value: Any, feature: Any) -> Any:
    """Every ``Json()`` value under ``feature`` turned into its text (datasets keeps text that
    parses as JSON as it is, and decodes it on reading: the round trip stays exact)."""
    if value is None:
        return None
    if isinstance(feature, datasets.Json):
        return json_text(value)
    if isinstance(feature, (datasets.List, datasets.LargeList)):
        return [_encode_json(v, feature.feature) for v in value]
    if isinstance(feature, dict) and isinstance(value, Mapping):
        return {k: _encode_json(v, feature[k]) if k in feature else v for k, v in value.items()}
    return value


def _has_json(feature: Any) -> bool:
    if isinstance(feature, datasets.Json):
        return True
    if isinstance(feature, (datasets.List, datasets.LargeList)):
        return _has_json(feature.feature)
    return isinstance(feature, dict) and any(_has_json(f) for f in feature.values())


def _to_arrow(rows: pd.DataFrame | pa.Table | Sequence[Mapping[str, Any]],
              features: datasets.Features | None) -> pa.Table:
    """Rows to an Arrow table. With ``features``, datasets encodes them (``Json()`` columns keep
    heterogeneous dicts intact, where Arrow would merge them into one struct padded with nulls;
    their text is written here, readable in pandas: see ``json_text``)."""
    if features is not None:
        if isinstance(rows, pa.Table):
            rows = rows.to_pylist()
        json_columns = [name for name, f in features.items() if _has_json(f)]
        if isinstance(rows, pd.DataFrame):
            rows = rows.copy()
            for name in json_columns:
                if name in rows.columns:
                    rows[name] = [_encode_json(v, features[name]) for v in rows[name]]
        else:
            rows = [{k: _encode_json(v, features[k]) if k in json_columns else v
                     for k, v in row.items()} for row in rows]
        if isinstance(rows, pd.DataFrame) and len(rows):
            ds = datasets.Dataset.from_pandas(rows, features=features, preserve_index=False)
        elif len(rows) == 0:
            # datasets cannot infer columns from no rows (an empty DataFrame's object columns
            # read as doubles); the features name them.
            ds = datasets.Dataset.from_dict({name: [] for name in features}, features=features)
        else:
            ds = datasets.Dataset.from_list(list(rows), features=features)
        return ds.data.table.combine_chunks()
    if isinstance(rows, pa.Table):
        return rows
    if isinstance(rows, pd.DataFrame):
        return pa.Table.from_pandas(rows, preserve_index=False)
    return pa.Table.from_pylist(list(rows))


PublishHook = Callable[["Manifest", Path], None]
"""Called with a newly published version and its folder (the runtime announces it in Prefect)."""


class ArtifactStore:
    """Versioned, immutable, checksummed Parquet artifacts under one root folder."""

    def __init__(self, root: str | Path, *, on_publish: PublishHook | None = None) -> None:
        self.root = Path(root)
        self.on_publish = on_publish

    # ---- ids and lookup -------------------------------------------------------------------
    def version_id(self, name: str, *, parents: Iterable[VersionRef] = (),
                   params: Mapping[str, Any] | None = None, code: str | None = None) -> str:
        """The deterministic id of the version these inputs would produce."""
        blob = _canonical({
            "name": name,
            "parents": sorted([p.name, p.version] for p in parents),
            "params": params or {},
            "code": code or code_version(),
        })
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]

    def version_dir(self, ref: VersionRef) -> Path:
        return self.root / ref.name / "versions" / ref.version

    def exists(self, ref: VersionRef) -> bool:
        return (self.version_dir(ref) / MANIFEST).is_file()

    def find(self, name: str, *, parents: Iterable[VersionRef] = (),
             params: Mapping[str, Any] | None = None) -> Manifest | None:
        """The manifest of the version these inputs produce, if it was already published."""
        ref = VersionRef(name, self.version_id(name, parents=parents, params=params))
        return self.manifest(ref) if self.exists(ref) else None

    def resolve(self, spec: str | VersionRef) -> VersionRef:
        """``NAME``, ``NAME@latest`` (any alias) or ``NAME@VERSION`` to a concrete version."""
        if isinstance(spec, VersionRef):
            ref = spec
        else:
            name, _, version = spec.partition("@")
            version = version or "latest"
            alias = self.root / name / version
            if alias.is_symlink():
                ref = VersionRef(name, Path(os.readlink(alias)).name)
            else:
                ref = VersionRef(name, version)
        if not self.exists(ref):
            known = ", ".join(sorted(self.names())) or "none"
            raise StoreError(
                f"{self.version_dir(ref)}: no published version {ref} (artifacts here: {known})"
            )
        return ref

    def manifest(self, spec: str | VersionRef) -> Manifest:
        ref = spec if isinstance(spec, VersionRef) else self.resolve(spec)
        path = self.version_dir(ref) / MANIFEST
        try:
            return Manifest.model_validate_json(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise StoreError(f"{path}: manifest missing; {ref} is not a published version") from None
        except ValueError as exc:
            raise StoreError(f"{path}: unreadable manifest: {exc}") from None

    def names(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if (p / "versions").is_dir())

    def versions(self, name: str | None = None) -> list[Manifest]:
        """Every published version (of one artifact, or all), oldest first."""
        found = []
        for artifact in [name] if name else self.names():
            vdir = self.root / artifact / "versions"
            if vdir.is_dir():
                found += [self.manifest(VersionRef(artifact, d.name))
                          for d in vdir.iterdir() if (d / MANIFEST).is_file()]
        return sorted(found, key=lambda m: (m.created_at, m.name, m.version))

    def published(self) -> list[VersionRef]:
        """Every version folder holding a manifest, without reading it (``verify`` each one to
        find a broken manifest, where :meth:`versions` would stop at the first)."""
        return sorted(VersionRef(name, d.name) for name in self.names()
                      for d in (self.root / name / "versions").iterdir()
                      if (d / MANIFEST).is_file())

    def aliases(self, name: str) -> dict[str, str]:
        folder = self.root / name
        if not folder.is_dir():
            return {}
        return {p.name: Path(os.readlink(p)).name for p in folder.iterdir() if p.is_symlink()}

    # ---- writing --------------------------------------------------------------------------
    def publish(
        self,
        name: str,
        rows: pd.DataFrame | pa.Table | Sequence[Mapping[str, Any]] | None = None,
        *,
        parents: Iterable[VersionRef] = (),
        params: Mapping[str, Any] | None = None,
        stats: Mapping[str, Any] | None = None,
        features: datasets.Features | None = None,
        files: Mapping[str, Path] | None = None,
        description: str = "",
        aliases: Sequence[str] = ("latest",),
        code: str | None = None,
    ) -> Manifest:
        """Write a version atomically and point ``aliases`` at it.

        ``files`` maps a relative name under ``__files__/`` to a file or folder to copy in (a
        model folder, a PNG, a dataset card). Publishing inputs that were already published
        returns the existing version untouched.
        """
        if not name or not set(name) <= _ALIAS_CHARS:
            raise StoreError(f"artifact name {name!r}: use lowercase letters, digits, '-' and '_'")
        parents = sorted(set(parents))
        params = json.loads(_canonical(params or {}))
        version = self.version_id(name, parents=parents, params=params, code=code)
        ref = VersionRef(name, version)
        if self.exists(ref):
            self._set_aliases(ref, aliases)
            return self.manifest(ref)
        for parent in parents:
            if not self.exists(parent):
                raise StoreError(f"{name}: parent {parent} is not a published version")

        final = self.version_dir(ref)
        tmp = self.root / name / f".tmp-{version}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir(parents=True)
        try:
            table = self._write_payload(tmp, rows, features, files)
            manifest = Manifest(
                name=name,
                version=version,
                created_at=datetime.now(timezone.utc).isoformat(timespec="milliseconds"),
                rows=None if table is None else table.num_rows,
                columns=[] if table is None else table.column_names,
                arrow_schema=None if table is None else table.schema.remove_metadata().to_string(),
                files={
                    str(p.relative_to(tmp)): FileEntry(sha256=read_digest(p), bytes=p.stat().st_size)
                    for p in sorted(tmp.rglob("*")) if p.is_file()
                },
                parents=[{"name": p.name, "version": p.version} for p in parents],
                params=params,
                code_version=code or code_version(),
                git_commit=git_commit(),
                stats=json.loads(_canonical(stats or {})),
                description=description,
            )
            (tmp / META_DIR).mkdir()
            (tmp / MANIFEST).write_text(manifest.model_dump_json(indent=2), encoding="utf-8")
            manifest = self._move_into_place(tmp, ref, manifest)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self._set_aliases(ref, aliases)
        if self.on_publish is not None:
            self.on_publish(manifest, final)
        return manifest

    @staticmethod
    def _write_payload(tmp: Path, rows: pd.DataFrame | pa.Table | Sequence[Mapping[str, Any]] | None,
                       features: datasets.Features | None,
                       files: Mapping[str, Path] | None) -> pa.Table | None:
        """The table as Parquet parts and the extra files under ``__files__/``; the table back."""
        table = None if rows is None else _to_arrow(rows, features)
        if table is not None:
            for i, start in enumerate(range(0, max(table.num_rows, 1), ROWS_PER_PART)):
                pq.write_table(table.slice(start, ROWS_PER_PART), tmp / f"part-{i:05d}.parquet")
        for rel, src in (files or {}).items():
            dest = tmp / FILES_DIR / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            if Path(src).is_dir():
                shutil.copytree(src, dest)
            else:
                shutil.copy2(src, dest)
        return table

    def _move_into_place(self, tmp: Path, ref: VersionRef, manifest: Manifest) -> Manifest:
        """Rename the finished folder into place, durably; a concurrent writer of the same
        version may have won the race (same inputs, same content): then keep theirs."""
        _fsync_tree(tmp)
        final = self.version_dir(ref)
        final.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(tmp, final)
        except OSError:
            if not self.exists(ref):
                raise
            shutil.rmtree(tmp, ignore_errors=True)
            return self.manifest(ref)
        return manifest

    def set_alias(self, ref: VersionRef, alias: str) -> None:
        self._set_aliases(ref, [alias])

    def _set_aliases(self, ref: VersionRef, aliases: Sequence[str]) -> None:
        for alias in aliases:
            if not alias or not set(alias) <= _ALIAS_CHARS or alias == "versions":
                raise StoreError(f"alias {alias!r}: use lowercase letters, digits, '-' and '_'")
            link = self.root / ref.name / alias
            tmp = link.with_name(f".{alias}.{uuid.uuid4().hex[:8]}")
            os.symlink(Path("versions") / ref.version, tmp)
            os.replace(tmp, link)

    # ---- reading --------------------------------------------------------------------------
    def verify(self, spec: str | VersionRef, *, rehash: bool = False) -> Manifest:
        """Check a version against its manifest; raise ``ChecksumError`` naming each bad file.

        Large files unchanged on disk since they were last hashed are taken at their remembered
        digest unless ``rehash`` (see ``file_hashes``); ``agentune verify`` rehashes.

        Every file must have its recorded size and sha256 and no file may be added. The manifest
        itself is checked too: its name, parents, params and code version must hash to the
        version id (an edited manifest no longer describes what produced the data), and the
        Parquet parts' footers must hold its row count.
        """
        ref = spec if isinstance(spec, VersionRef) else self.resolve(spec)
        manifest = self.manifest(ref)
        vdir = self.version_dir(ref)
        problems = []
        expected = self.version_id(manifest.name, parents=manifest.parent_refs,
                                   params=manifest.params, code=manifest.code_version)
        if (manifest.name, manifest.version) != (ref.name, ref.version) or expected != ref.version:
            problems.append(f"{vdir / MANIFEST}: edited: its name, parents, params and code "
                            f"version hash to {manifest.name}@{expected}, not {ref}")
        for rel, entry in manifest.files.items():
            path = vdir / rel
            if not path.is_file():
                problems.append(f"{path}: missing")
            elif (size := path.stat().st_size) != entry.bytes:
                problems.append(f"{path}: {size} bytes, the manifest recorded {entry.bytes} "
                                "(truncated or rewritten after publishing)")
            elif sha256_file(path, rehash=rehash) != entry.sha256:
                problems.append(f"{path}: sha256 mismatch (the file changed after publishing)")
        present = {str(p.relative_to(vdir)) for p in vdir.rglob("*") if p.is_file()}
        problems += [f"{vdir / rel}: not in the manifest"
                     for rel in sorted(present - set(manifest.files) - {MANIFEST})]
        if not problems and manifest.rows is not None:
            problems += self._footer_problems(vdir, manifest)
        if problems:
            raise ChecksumError(f"{manifest.ref} failed verification: " + "; ".join(problems))
        return manifest

    @staticmethod
    def _footer_problems(vdir: Path, manifest: Manifest) -> list[str]:
        """The Parquet parts must open and hold the rows the manifest says (footers only)."""
        rows, problems = 0, []
        for part in _parts(manifest):
            try:
                rows += pq.read_metadata(vdir / part).num_rows
            except (pa.ArrowException, OSError) as exc:
                problems.append(f"{vdir / part}: not a readable Parquet file: {exc}")
        if not problems and rows != manifest.rows:
            problems.append(f"{vdir / MANIFEST}: records {manifest.rows} rows, the Parquet parts "
                            f"hold {rows}")
        return problems

    def read_arrow(self, spec: str | VersionRef, *, verify: bool = True) -> pa.Table:
        manifest = self.verify(spec) if verify else self.manifest(spec)
        if manifest.rows is None:
            raise StoreError(f"{self.version_dir(manifest.ref)}: {manifest.ref} holds no table")
        vdir = self.version_dir(manifest.ref)
        tables = []
        for part in _parts(manifest):
            try:
                tables.append(pq.read_table(vdir / part))
            except (pa.ArrowException, OSError) as exc:
                raise StoreError(f"{vdir / part}: cannot read the table: {exc}") from None
        return pa.concat_tables(tables)

    def read(self, spec: str | VersionRef, *, verify: bool = True) -> pd.DataFrame:
        """A version's table as pandas, checksums verified, ``Json()`` columns decoded."""
        table = self.read_arrow(spec, verify=verify)
        if table.schema.metadata and b"huggingface" in table.schema.metadata:
            return datasets.Dataset(table).to_pandas()
        return table.to_pandas()

    def file(self, spec: str | VersionRef, rel: str = "") -> Path:
        """The path of a payload file or folder (``__files__/<rel>``) of a version."""
        manifest = self.manifest(spec)
        path = self.version_dir(manifest.ref) / FILES_DIR / rel
        if not path.exists():
            raise StoreError(f"{path}: {manifest.ref} has no file {rel!r}")
        return path

    # ---- housekeeping ---------------------------------------------------------------------
    def unreachable(self) -> list[VersionRef]:
        """Versions no alias points at, directly or as an ancestor of an aliased version."""
        keep: set[VersionRef] = set()
        todo = [VersionRef(n, v) for n in self.names() for v in self.aliases(n).values()]
        while todo:
            ref = todo.pop()
            if ref in keep or not self.exists(ref):
                continue
            keep.add(ref)
            todo += self.manifest(ref).parent_refs
        return sorted(m.ref for m in self.versions() if m.ref not in keep)

    def gc(self, *, dry_run: bool = False) -> list[Path]:
        """Remove unreachable versions and leftovers of killed writers; returns what it removed."""
        doomed = [self.version_dir(ref) for ref in self.unreachable()]
        folders = [p for p in self.root.iterdir() if p.is_dir()] if self.root.is_dir() else []
        for folder in folders:
            doomed += [p for p in folder.iterdir() if p.name.startswith(".tmp-")]
            if (folder / "versions").is_dir():
                doomed += [p for p in (folder / "versions").iterdir()
                           if not (p / MANIFEST).is_file()]
        if not dry_run:
            for path in doomed:
                shutil.rmtree(path, ignore_errors=True)
        return doomed


def _parts(manifest: Manifest) -> list[str]:
    """The Parquet part files of a version, in order."""
    return sorted(p for p in manifest.files if p.endswith(".parquet") and "/" not in p)


def _fsync_tree(folder: Path) -> None:
    """Flush file contents before the rename makes them visible (a crash must not expose zeros)."""
    for path in folder.rglob("*"):
        if path.is_file():
            with path.open("rb") as fh:
                os.fsync(fh.fileno())
