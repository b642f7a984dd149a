"""Locating models: paths, folders, a fake Ollama store and a fake Hugging Face cache in tmp dirs."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from gguf.constants import GGUFValueType
from gguf_builder import Tensor, build_gguf

from walkthrough.errors import WalkthroughError
from walkthrough.inspect import locate
from walkthrough.inspect.gguf import GGUFError, open_gguf
from walkthrough.inspect.locate import ModelNotFoundError, resolve_model

V = GGUFValueType
ENV_VARS = ("OLLAMA_MODELS", "HF_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME")


@pytest.fixture(autouse=True)
def isolated_env(tmp_path, monkeypatch):
    """No real store leaks in: a fresh HOME, no store variables, no system Ollama store."""
    for var in ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setattr(locate, "OLLAMA_SYSTEM_STORE", tmp_path / "no-system-store")


def gguf_bytes(name: str) -> bytes:
    return build_gguf({"general.name": (V.STRING, name)}, [Tensor("w", (8,))])


def shard_bytes(index: int, count: int) -> bytes:
    """Shard `index` (0-based) of a split model, with the split keys gguf-split writes."""
    meta = {
        "split.no": (V.UINT16, index),
        "split.count": (V.UINT16, count),
        "split.tensors.count": (V.INT32, count),
    }
    return build_gguf(meta, [Tensor(f"w{index}", (8,))])


def write_model(path: Path, name: str = "m") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gguf_bytes(name))
    return path


def not_found(spec: str, *words: str) -> str:
    with pytest.raises(ModelNotFoundError) as info:
        resolve_model(spec)
    message = str(info.value)
    assert isinstance(info.value, WalkthroughError) and "\n" not in message
    for word in words:
        assert word in message, f"{word!r} not in {message!r}"
    return message


# ---- paths and folders -----------------------------------------------------------------------


def test_path_to_a_file(tmp_path):
    path = write_model(tmp_path / "a.gguf")
    assert resolve_model(str(path)) == [path]


def test_home_is_expanded(tmp_path):
    path = write_model(tmp_path / "home" / "models" / "a.gguf")
    assert resolve_model("~/models/a.gguf") == [path]


def test_any_shard_stands_for_the_set(tmp_path):
    shards = [write_model(tmp_path / f"big-0000{i}-of-00003.gguf") for i in (1, 2, 3)]
    assert resolve_model(str(shards[1])) == shards


def test_missing_shard_is_named(tmp_path):
    write_model(tmp_path / "big-00001-of-00002.gguf")
    with pytest.raises(GGUFError, match="big-00002-of-00002.gguf is missing"):
        resolve_model(str(tmp_path / "big-00001-of-00002.gguf"))


def test_missing_path(tmp_path):
    not_found(str(tmp_path / "nope.gguf"), "no such file or folder", "nope.gguf")


def test_ollama_looking_name_without_prefix_gets_a_hint():
    not_found("qwen3:0.6b", "ollama:qwen3:0.6b")


def test_folder_with_one_model(tmp_path):
    path = write_model(tmp_path / "only.gguf")
    (tmp_path / "notes.txt").write_text("not a model")
    assert resolve_model(str(tmp_path)) == [path]


def test_folder_with_one_split_set(tmp_path):
    shards = [write_model(tmp_path / f"big-0000{i}-of-00002.gguf") for i in (1, 2)]
    assert resolve_model(str(tmp_path)) == shards


def test_folder_with_split_set_missing_its_first_shard(tmp_path):
    write_model(tmp_path / "big-00002-of-00002.gguf")
    with pytest.raises(GGUFError, match="big-00001-of-00002.gguf is missing"):
        resolve_model(str(tmp_path))


def test_folder_with_several_models_lists_them(tmp_path):
    write_model(tmp_path / "a.gguf")
    write_model(tmp_path / "mmproj-a.gguf")
    write_model(tmp_path / "big-00001-of-00002.gguf")
    write_model(tmp_path / "big-00002-of-00002.gguf")
    message = not_found(str(tmp_path), "3 GGUF models", "a.gguf", "mmproj-a.gguf", "name one")
    assert "big-00001-of-00002.gguf" in message and "big-00002" not in message


def test_folder_without_models(tmp_path):
    write_model(tmp_path / "sub" / "deeper.gguf")  # subfolders are not searched
    not_found(str(tmp_path), "no .gguf file", str(tmp_path))


# ---- Ollama ------------------------------------------------------------------------------------


def install_ollama(store: Path, manifest_path: str, payload: bytes, extra_layers=()) -> Path:
    """Install `payload` as a model the way Ollama lays it out; returns the blob's path."""
    digest = hashlib.sha256(payload).hexdigest()
    blob = store / "blobs" / f"sha256-{digest}"
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(payload)
    layers = [
        *extra_layers,
        {"mediaType": locate.OLLAMA_MODEL_MEDIA_TYPE, "digest": f"sha256:{digest}"},
    ]
    manifest = store / "manifests" / manifest_path
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({"schemaVersion": 2, "layers": layers}))
    return blob


@pytest.fixture
def ollama_store(tmp_path, monkeypatch) -> Path:
    store = tmp_path / "ollama-models"
    monkeypatch.setenv("OLLAMA_MODELS", str(store))
    template = {
        "mediaType": "application/vnd.ollama.image.template",
        "digest": "sha256:" + "0" * 64,
    }
    install_ollama(
        store, "registry.ollama.ai/library/qwen3/0.6b", gguf_bytes("qwen3 0.6b"), [template]
    )
    install_ollama(store, "registry.ollama.ai/library/qwen3/latest", gguf_bytes("qwen3 latest"))
    install_ollama(store, "registry.ollama.ai/someone/tiny/q8", gguf_bytes("someone's tiny"))
    install_ollama(store, "hf.co/org/repo-GGUF/Q4_K_M", gguf_bytes("from hf.co"))
    return store


@pytest.mark.parametrize(
    ("spec", "name"),
    [
        ("ollama:qwen3:0.6b", "qwen3 0.6b"),
        ("ollama:qwen3", "qwen3 latest"),
        ("ollama:someone/tiny:q8", "someone's tiny"),
        ("ollama:hf.co/org/repo-GGUF:Q4_K_M", "from hf.co"),
    ],
)
def test_ollama_model_resolves_to_its_blob(ollama_store, spec, name):
    (path,) = resolve_model(spec)
    assert path.parent == ollama_store / "blobs"
    assert path.name == "sha256-" + hashlib.sha256(path.read_bytes()).hexdigest()
    assert open_gguf(path).get("general.name") == name


def test_missing_ollama_model_lists_installed(ollama_store):
    message = not_found("ollama:llama3:8b", "llama3:8b", str(ollama_store), "ollama pull llama3:8b")
    for installed in (
        "qwen3:0.6b",
        "qwen3:latest",
        "someone/tiny:q8",
        "hf.co/org/repo-GGUF:Q4_K_M",
    ):
        assert installed in message


def test_empty_ollama_store(tmp_path, monkeypatch):
    monkeypatch.setenv("OLLAMA_MODELS", str(tmp_path / "empty"))
    not_found("ollama:qwen3", "no models are installed", str(tmp_path / "empty"))


def test_default_ollama_stores(tmp_path):
    user_store = tmp_path / "home" / ".ollama" / "models"
    system_store = locate.OLLAMA_SYSTEM_STORE
    user_blob = install_ollama(
        user_store, "registry.ollama.ai/library/a/latest", gguf_bytes("user")
    )
    system_blob = install_ollama(
        system_store, "registry.ollama.ai/library/b/latest", gguf_bytes("system")
    )
    assert resolve_model("ollama:a") == [user_blob]
    assert resolve_model("ollama:b") == [system_blob]
    not_found("ollama:c", str(user_store), str(system_store), "a:latest", "b:latest")


def test_ollama_blob_missing(ollama_store):
    (blob,) = resolve_model("ollama:qwen3")
    blob.unlink()
    not_found("ollama:qwen3", blob.name, "missing", "ollama pull qwen3:latest")


def test_ollama_manifest_without_model_layer(ollama_store):
    manifest = ollama_store / "manifests/registry.ollama.ai/library/qwen3/latest"
    manifest.write_text(
        json.dumps({"layers": [{"mediaType": "application/vnd.ollama.image.license"}]})
    )
    not_found("ollama:qwen3", "no application/vnd.ollama.image.model layer")


@pytest.mark.parametrize(
    "text",
    ["{not json", "[1, 2]", '{"layers": [{"mediaType": "application/vnd.ollama.image.model"}]}'],
)
def test_ollama_manifest_unreadable(ollama_store, text):
    (ollama_store / "manifests/registry.ollama.ai/library/qwen3/latest").write_text(text)
    not_found("ollama:qwen3", "manifest", "ollama pull qwen3:latest")


def test_ollama_manifest_with_malformed_digest(ollama_store):
    manifest = ollama_store / "manifests/registry.ollama.ai/library/qwen3/latest"
    layer = {"mediaType": locate.OLLAMA_MODEL_MEDIA_TYPE, "digest": "sha256:../../etc/passwd"}
    manifest.write_text(json.dumps({"layers": [layer]}))
    not_found("ollama:qwen3", "malformed digest")


@pytest.mark.parametrize(
    "spec", ["ollama:", "ollama:../x", "ollama:a/b/c/d", "ollama:qwen3:", "ollama:/x"]
)
def test_invalid_ollama_names(ollama_store, spec):
    not_found(spec, "not an Ollama model name")


# ---- Hugging Face cache --------------------------------------------------------------------


def cache_repo(
    cache: Path, repo: str, files: dict[str, bytes], revision: str = "abc123", main: bool = True
) -> Path:
    """Lay `files` out as huggingface_hub does: blobs by hash, snapshot entries as relative symlinks."""
    repo_dir = cache / f"models--{repo.replace('/', '--')}"
    snapshot = repo_dir / "snapshots" / revision
    for name, data in files.items():
        blob = repo_dir / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = snapshot / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(Path("../" * (len(Path(name).parts) + 1)) / "blobs" / blob.name)
    if main:
        (repo_dir / "refs").mkdir(parents=True, exist_ok=True)
        (repo_dir / "refs" / "main").write_text(revision)
    return snapshot


@pytest.fixture
def hf_cache(tmp_path, monkeypatch) -> Path:
    cache = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    cache_repo(
        cache,
        "org/Tiny-GGUF",
        {
            "tiny-Q8_0.gguf": gguf_bytes("q8"),
            "README.md": b"# tiny",
            "Q4/tiny-Q4-00001-of-00002.gguf": shard_bytes(0, 2),
            "Q4/tiny-Q4-00002-of-00002.gguf": shard_bytes(1, 2),
        },
    )
    cache_repo(cache, "org/Single-GGUF", {"single.gguf": gguf_bytes("single")})
    return cache


def test_hf_file_resolves_to_the_snapshot_entry(hf_cache):
    (path,) = resolve_model("hf:org/Tiny-GGUF/tiny-Q8_0.gguf")
    assert path == hf_cache / "models--org--Tiny-GGUF" / "snapshots" / "abc123" / "tiny-Q8_0.gguf"
    assert open_gguf(path).get("general.name") == "q8"


def test_hf_split_file_in_a_subfolder(hf_cache):
    paths = resolve_model("hf:org/Tiny-GGUF/Q4/tiny-Q4-00002-of-00002.gguf")
    assert [p.name for p in paths] == ["tiny-Q4-00001-of-00002.gguf", "tiny-Q4-00002-of-00002.gguf"]
    assert open_gguf(paths[0]).paths == paths


def test_hf_repo_with_one_model(hf_cache):
    (path,) = resolve_model("hf:org/Single-GGUF")
    assert open_gguf(path).get("general.name") == "single"


def test_hf_repo_with_several_models_lists_them(hf_cache):
    not_found(
        "hf:org/Tiny-GGUF",
        "2 GGUF models",
        "tiny-Q8_0.gguf",
        "e.g. hf:org/Tiny-GGUF/Q4/tiny-Q4-00001-of-00002.gguf",
    )


def test_hf_refs_main_picks_the_snapshot(hf_cache):
    cache_repo(hf_cache, "org/Single-GGUF", {"single.gguf": gguf_bytes("newer")}, revision="def456")
    (path,) = resolve_model("hf:org/Single-GGUF/single.gguf")
    assert path.parent.name == "def456" and open_gguf(path).get("general.name") == "newer"


def test_hf_snapshot_without_refs_main(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    cache_repo(tmp_path / "hub", "org/NoRef", {"x.gguf": gguf_bytes("x")}, main=False)
    assert open_gguf(resolve_model("hf:org/NoRef/x.gguf")[0]).get("general.name") == "x"


def test_hf_missing_repo_lists_cached(hf_cache):
    not_found("hf:org/Other/x.gguf", "org/Other", str(hf_cache), "org/Tiny-GGUF", "org/Single-GGUF")


def test_hf_missing_file_lists_gguf_files(hf_cache):
    message = not_found(
        "hf:org/Tiny-GGUF/tiny-Q2_K.gguf",
        "tiny-Q2_K.gguf",
        "tiny-Q8_0.gguf",
        "hf download org/Tiny-GGUF tiny-Q2_K.gguf",
    )
    assert "README.md" not in message


def test_hf_missing_blob(hf_cache):
    (path,) = resolve_model("hf:org/Tiny-GGUF/tiny-Q8_0.gguf")
    path.resolve().unlink()
    not_found("hf:org/Tiny-GGUF/tiny-Q8_0.gguf", "blob that is missing")


@pytest.mark.parametrize("spec", ["hf:", "hf:org", "hf:org/", "hf:../x/y.gguf", "hf:org//x.gguf"])
def test_invalid_hf_specs(hf_cache, spec):
    not_found(spec, "is not a Hugging Face file")


@pytest.mark.parametrize(
    ("env", "relative"),
    [
        ({"HF_HUB_CACHE": "custom/hub"}, "custom/hub"),
        ({"HF_HOME": "hfhome"}, "hfhome/hub"),
        ({"XDG_CACHE_HOME": "xdg"}, "xdg/huggingface/hub"),
        ({}, "home/.cache/huggingface/hub"),
    ],
)
def test_hf_cache_location(tmp_path, monkeypatch, env, relative):
    for var, value in env.items():
        monkeypatch.setenv(var, str(tmp_path / value))
    assert locate.hf_hub_cache() == tmp_path / relative
    cache_repo(tmp_path / relative, "org/R", {"r.gguf": gguf_bytes("r")})
    assert resolve_model("hf:org/R/r.gguf")[0].parent.parent.parent.parent == tmp_path / relative


# ---- the bundled files ---------------------------------------------------------------------


def test_bundled_files_are_the_repository_assets_shipped_as_package_data():
    """In a checkout, walkthrough/assets/ links to assets/; pyproject ships what is there in the wheel."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    repo = Path(__file__).resolve().parents[1]
    patterns = tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"][
        "walkthrough"
    ]
    package = repo / "walkthrough"
    for path in (locate.BUNDLED_MODEL, locate.DEFAULT_REQUEST):
        assert path.parent == package / "assets"
        assert path.resolve() == repo / "assets" / path.name
        assert any(path.relative_to(package).match(p) for p in patterns), path


def test_model_path_none_is_the_bundled_model(tmp_path, monkeypatch):
    model = tmp_path / "tiny.gguf"
    model.write_bytes(gguf_bytes("tiny"))
    monkeypatch.setattr(locate, "BUNDLED_MODEL", model)
    assert locate.model_path(None) == model
    assert locate.model_path(str(model)) == model
    model.unlink()
    with pytest.raises(ModelNotFoundError, match="bundled model .*tiny.gguf is missing; name a MODEL"):
        locate.model_path(None)
