"""Find the GGUF file(s) a user means: a path, a folder, `ollama:NAME[:TAG]` or `hf:ORG/REPO[/FILE]`.

`resolve_model(spec)` returns the model's files, first shard first (a single
path for an ordinary model, every shard for a split one); pass `paths[0]` to
`open_gguf`, which opens the other shards itself. `model_path(spec)` is that
first path, with None meaning the bundled tiny model (`bundled_model()`).
Anything that cannot be found raises `ModelNotFoundError`, a `WalkthroughError`
whose one-line message says what was looked for, where, and what is there instead.

The bundled files (the tiny model and the default request) are made in the
repository's `assets/` and shipped from `walkthrough/assets/`: in a checkout
that folder holds links to them, in an installed wheel copies (package data).

What each spec means:

- `path/to/model.gguf`: that file (`~` expanded). Any shard of a split model
  (`NAME-00002-of-00003.gguf`) stands for all of them; a missing shard is named.
- `path/to/folder`: the one GGUF model in that folder (not its subfolders; a
  split set counts as one model). With several, the error lists them so the
  user can name one: guessing (the biggest? the newest? not the `mmproj-`
  projector?) would show the wrong numbers for a model the user did not pick.
- `ollama:NAME[:TAG]`: the model layer of an Ollama manifest. NAME may carry a
  namespace (`user/name`) or a registry (`hf.co/org/name`); TAG defaults to
  `latest`. Stores searched: `$OLLAMA_MODELS` if set, else `~/.ollama/models`
  and the Linux service's `/usr/share/ollama/.ollama/models`. A missing model
  lists what is installed.
- `hf:ORG/REPO/FILE`: FILE (which may sit in a subfolder) in the Hugging Face
  cache's snapshot of REPO that `refs/main` names (any cached snapshot if there
  is no `refs/main`). `hf:ORG/REPO` alone means the one GGUF model in that
  snapshot, subfolders included. The cache is `$HF_HUB_CACHE`, else
  `$HF_HOME/hub`, else `$XDG_CACHE_HOME/huggingface/hub`, else
  `~/.cache/huggingface/hub`.

Nothing is downloaded: only what is already on disk is found.

Example:
    >>> resolve_model("ollama:qwen3:0.6b")
    [PosixPath('/home/me/.ollama/models/blobs/sha256-7f4030143c1c...')]
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from walkthrough.errors import WalkthroughError
from walkthrough.inspect.gguf import shard_name, shard_paths, split_name_parts

OLLAMA_PREFIX = "ollama:"
HF_PREFIX = "hf:"
# Where Ollama keeps models (its FAQ, "Where are models stored?", docs/faq.md in
# github.com/ollama/ollama): ~/.ollama/models on macOS and for a user-run server,
# /usr/share/ollama/.ollama/models for the Linux install script's service.
OLLAMA_SYSTEM_STORE = Path("/usr/share/ollama/.ollama/models")
OLLAMA_REGISTRY = "registry.ollama.ai"
OLLAMA_NAMESPACE = "library"
OLLAMA_DEFAULT_TAG = "latest"
OLLAMA_MODEL_MEDIA_TYPE = "application/vnd.ollama.image.model"
OLLAMA_DIGEST = re.compile(r"^sha256:(?P<hex>[0-9a-f]{64})$")
HF_MAIN_REF = "main"
HF_REF_NAME = re.compile(r"(?!\.\.?$)[0-9A-Za-z._-]{1,128}")  # one folder name (a commit hash), never . or ..
MAX_LISTED = 20  # names shown in an error before "and N more"
BUNDLED_DIR = Path(__file__).resolve().parents[1] / "assets"
BUNDLED_MODEL = BUNDLED_DIR / "tiny-clinical-moe.gguf"
DEFAULT_REQUEST = BUNDLED_DIR / "default_request.json"


class ModelNotFoundError(WalkthroughError):
    """The spec names no model on disk; the message says where we looked and what is there."""


def resolve_model(spec: str | os.PathLike) -> list[Path]:
    """The GGUF file(s) of the model `spec` names, first shard first.

    Args:
        spec: a path to a .gguf file or a folder, `ollama:NAME[:TAG]`, or `hf:ORG/REPO[/FILE]`.

    Returns:
        One path, or every shard of a split model in order.

    Raises:
        ModelNotFoundError: nothing matching on disk (the message lists what is there).
        GGUFError: a split model with a missing shard.
    """
    text = os.fspath(spec)
    if text.startswith(OLLAMA_PREFIX):
        return [ollama_blob(text[len(OLLAMA_PREFIX) :])]
    if text.startswith(HF_PREFIX):
        return hf_cached_model(text[len(HF_PREFIX) :])
    path = Path(text).expanduser()
    if path.is_dir():
        return model_in_folder(path)
    if path.is_file():
        return shard_paths(path)
    if path.exists():
        raise ModelNotFoundError(f"{path} is neither a file nor a folder; name a .gguf file")
    hint = ""
    if ":" in text and "/" not in text:
        hint = f"; for an Ollama model write {OLLAMA_PREFIX}{text}"
    raise ModelNotFoundError(f"no such file or folder: {path}{hint}")


def model_path(spec: str | os.PathLike | None) -> Path:
    """The file to pass to `open_gguf` for MODEL: the bundled tiny model for None, else the first shard.

    Raises:
        ModelNotFoundError: as `resolve_model`, or the bundled model is missing.
    """
    return bundled_model() if spec is None else resolve_model(spec)[0]


def bundled_model() -> Path:
    """The bundled tiny model (`assets/tiny-clinical-moe.gguf`, shipped in the package).

    Raises:
        ModelNotFoundError: the file is not there (a checkout where it is not built yet).
    """
    if not BUNDLED_MODEL.is_file():
        raise ModelNotFoundError(
            f"the bundled model {BUNDLED_MODEL} is missing; name a MODEL, or build it in a checkout "
            "with assets/build_tiny_model.py"
        )
    return BUNDLED_MODEL


# ---- folders -------------------------------------------------------------------------------


def gguf_models_in(folder: Path, recursive: bool = False) -> list[Path]:
    """The GGUF models in `folder`, sorted: single files, and each split set by its first shard's path.

    A split set is listed even if its first shard is missing, so that opening it
    names the missing shard instead of pretending the folder is empty.
    """
    pattern = "**/*.gguf" if recursive else "*.gguf"
    models = set()
    for path in folder.glob(pattern):
        parts = split_name_parts(path.name)
        if parts is not None:
            prefix, _, count = parts
            models.add(path.with_name(shard_name(prefix, 1, count)))
        elif path.is_file():
            models.add(path)
    return sorted(models)


def model_in_folder(folder: Path, recursive: bool = False, label: str | None = None) -> list[Path]:
    """The files of the one GGUF model in `folder`; an error listing them if there are several or none."""
    label = label or str(folder)
    models = gguf_models_in(folder, recursive)
    if not models:
        raise ModelNotFoundError(f"no .gguf file in {label}; name a .gguf file or another folder")
    if len(models) > 1:
        names = [str(m.relative_to(folder)) for m in models]
        raise ModelNotFoundError(
            f"{label} holds {len(models)} GGUF models ({_listing(names)}); "
            f"name one of them, e.g. {label}/{names[0]}"
        )
    return shard_paths(models[0])


def _listing(names: list[str]) -> str:
    shown = ", ".join(names[:MAX_LISTED])
    return shown + (f" and {len(names) - MAX_LISTED} more" if len(names) > MAX_LISTED else "")


# ---- Ollama --------------------------------------------------------------------------------


def ollama_stores() -> list[Path]:
    """The Ollama model stores to search, most specific first."""
    env = os.environ.get("OLLAMA_MODELS")
    if env:
        return [Path(env).expanduser()]
    return [Path.home() / ".ollama" / "models", OLLAMA_SYSTEM_STORE]


def parse_ollama_name(name: str) -> tuple[str, str, str, str]:
    """`[registry/][namespace/]model[:tag]` -> (registry, namespace, model, tag).

    Example: `qwen3:0.6b` -> ("registry.ollama.ai", "library", "qwen3", "0.6b").
    """
    base, tag = name, OLLAMA_DEFAULT_TAG
    if ":" in name.rsplit("/", 1)[-1]:
        base, tag = name.rsplit(":", 1)
    parts = base.split("/")
    if len(parts) == 1:
        parts = [OLLAMA_REGISTRY, OLLAMA_NAMESPACE, *parts]
    elif len(parts) == 2:
        parts = [OLLAMA_REGISTRY, *parts]
    if len(parts) != 3 or any(p in ("", ".", "..") for p in [*parts, tag]):
        raise ModelNotFoundError(
            f"{OLLAMA_PREFIX}{name} is not an Ollama model name; write {OLLAMA_PREFIX}NAME[:TAG], "
            f"e.g. {OLLAMA_PREFIX}qwen3:0.6b"
        )
    registry, namespace, model = parts
    return registry, namespace, model, tag


def _ollama_display(registry: str, namespace: str, model: str, tag: str) -> str:
    """How `ollama list` would name it: the default registry and namespace left out."""
    if registry == OLLAMA_REGISTRY:
        prefix = "" if namespace == OLLAMA_NAMESPACE else f"{namespace}/"
    else:
        prefix = f"{registry}/{namespace}/"
    return f"{prefix}{model}:{tag}"


def list_ollama_models(store: Path) -> list[str]:
    """Names of the models installed in one Ollama store, as `ollama list` shows them."""
    manifests = store / "manifests"
    names = [
        _ollama_display(*p.relative_to(manifests).parts)
        for p in manifests.glob("*/*/*/*")
        if p.is_file()
    ]
    return sorted(names)


def ollama_blob(name: str) -> Path:
    """The GGUF blob of an installed Ollama model.

    Raises:
        ModelNotFoundError: no such model in any store (lists the installed ones),
            a manifest without a model layer, or a missing blob.
    """
    registry, namespace, model, tag = parse_ollama_name(name)
    wanted = _ollama_display(registry, namespace, model, tag)
    stores = ollama_stores()
    for store in stores:
        manifest = store / "manifests" / registry / namespace / model / tag
        if manifest.is_file():
            return _model_layer_blob(store, manifest, wanted)
    installed = sorted({n for store in stores if store.is_dir() for n in list_ollama_models(store)})
    where = " or ".join(str(s) for s in stores)
    there = f"installed: {_listing(installed)}" if installed else "no models are installed there"
    raise ModelNotFoundError(
        f"no Ollama model {wanted} in {where} ({there}); pull it with `ollama pull {wanted}` "
        "or set OLLAMA_MODELS to the store that has it"
    )


def _model_layer_blob(store: Path, manifest: Path, wanted: str) -> Path:
    try:
        layers = json.loads(manifest.read_text(encoding="utf-8")).get("layers", [])
        digests = [
            layer["digest"] for layer in layers if layer.get("mediaType") == OLLAMA_MODEL_MEDIA_TYPE
        ]
    except RecursionError:
        raise ModelNotFoundError(
            f"the Ollama manifest {manifest} is JSON nested too deeply; pull the model again with `ollama pull {wanted}`"
        ) from None
    except (OSError, ValueError, AttributeError, TypeError, KeyError) as exc:
        raise ModelNotFoundError(
            f"the Ollama manifest {manifest} is not readable JSON with layers ({exc}); "
            f"pull the model again with `ollama pull {wanted}`"
        ) from None
    if not digests:
        raise ModelNotFoundError(
            f"the Ollama manifest {manifest} has no {OLLAMA_MODEL_MEDIA_TYPE} layer; "
            f"{wanted} is not a GGUF model"
        )
    match = OLLAMA_DIGEST.match(str(digests[0]))
    if match is None:
        raise ModelNotFoundError(
            f"the Ollama manifest {manifest} has a malformed digest {digests[0]!r}"
        )
    blob = store / "blobs" / f"sha256-{match['hex']}"
    if not blob.is_file():
        raise ModelNotFoundError(
            f"Ollama model {wanted}: its manifest names {blob.name}, which is missing from "
            f"{blob.parent}; pull it again with `ollama pull {wanted}`"
        )
    return blob


# ---- Hugging Face cache ----------------------------------------------------------------------


def hf_hub_cache() -> Path:
    """The Hugging Face hub cache folder, as huggingface_hub resolves it.

    Source: huggingface_hub's environment variable reference
    (huggingface.co/docs/huggingface_hub/package_reference/environment_variables):
    HF_HUB_CACHE defaults to $HF_HOME/hub; HF_HOME to ~/.cache/huggingface unless
    XDG_CACHE_HOME is set.
    """
    env = os.environ.get("HF_HUB_CACHE")
    if env:
        return Path(env).expanduser()
    home = os.environ.get("HF_HOME")
    if home:
        return Path(home).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "huggingface" / "hub"


def list_hf_repos(cache: Path) -> list[str]:
    """`ORG/REPO` of every model repository in the cache (`models--ORG--REPO` folders)."""
    return sorted(
        p.name[len("models--") :].replace("--", "/") for p in cache.glob("models--*") if p.is_dir()
    )


def _snapshots(repo_dir: Path) -> list[Path]:
    """Snapshots to search: the one `refs/main` names, else every cached one, newest first."""
    ref = repo_dir / "refs" / HF_MAIN_REF
    if ref.is_file():
        # A commit hash names one folder in snapshots/; anything else (not text, "../..", a path) is ignored.
        name = ref.read_bytes()[:256].decode("ascii", "replace").strip()
        snapshot = repo_dir / "snapshots" / name
        if HF_REF_NAME.fullmatch(name) and snapshot.is_dir():
            return [snapshot]
    found = [p for p in (repo_dir / "snapshots").glob("*") if p.is_dir()]
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)


def hf_cached_model(spec: str) -> list[Path]:
    """The files of `ORG/REPO[/FILE]` in the Hugging Face cache.

    Raises:
        ModelNotFoundError: the repository, a snapshot or the file is not cached
            (the message lists cached repositories or the GGUF files of the snapshot).
    """
    parts = spec.split("/")
    if len(parts) < 2 or not all(parts) or any(p in (".", "..") for p in parts):
        raise ModelNotFoundError(
            f"{HF_PREFIX}{spec} is not a Hugging Face file; write {HF_PREFIX}ORG/REPO/FILE.gguf"
        )
    repo, file = "/".join(parts[:2]), "/".join(parts[2:])
    cache = hf_hub_cache()
    repo_dir = cache / f"models--{parts[0]}--{parts[1]}"
    if not repo_dir.is_dir():
        cached = list_hf_repos(cache) if cache.is_dir() else []
        there = f"cached: {_listing(cached)}" if cached else "no models are cached there"
        raise ModelNotFoundError(
            f"{repo} is not in the Hugging Face cache {cache} ({there}); download it with "
            f"`hf download {repo}` or set HF_HUB_CACHE / HF_HOME"
        )
    snapshots = _snapshots(repo_dir)
    if not snapshots:
        raise ModelNotFoundError(
            f"{repo} has no downloaded snapshot in {repo_dir}; download it again"
        )
    if not file:
        return model_in_folder(snapshots[0], recursive=True, label=f"{HF_PREFIX}{repo}")
    for snapshot in snapshots:
        path = snapshot / file
        if path.is_file():
            return shard_paths(path)
        if path.is_symlink():
            raise ModelNotFoundError(
                f"{HF_PREFIX}{spec}: the cache links {path} to a blob that is missing "
                "(an unfinished download?); download the file again"
            )
    files = [str(m.relative_to(snapshots[0])) for m in gguf_models_in(snapshots[0], recursive=True)]
    there = f"its GGUF files: {_listing(files)}" if files else "it has no GGUF files"
    raise ModelNotFoundError(
        f"{file} is not in the cached snapshot of {repo} at {snapshots[0]} ({there}); "
        f"name one of those or download it with `hf download {repo} {file}`"
    )
