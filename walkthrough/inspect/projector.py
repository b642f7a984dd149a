"""Multimodal projectors (`mmproj-*.gguf`): how many prompt tokens an image becomes.

A projector file holds the vision encoder and the layer that maps its patches
into the language model's embedding space; its `clip.*` keys say how an image
is cut. The counts follow llama.cpp's `tools/mtmd` (llama-cpp-python 0.3.36):
the keys `clip.projector_type`, `clip.vision.image_size`, `clip.vision.patch_size`,
`clip.vision.projector.scale_factor` and `clip.vision.spatial_merge_size`
(clip-impl.h), the preprocessing each type uses (mtmd.cpp `init_vision`,
mtmd-image.cpp) and `clip_n_output_tokens` (clip.cpp), plus the marker tokens
mtmd writes around an image.

Modelled types:
- fixed size (`mlp`, `mlp_norm`, `ldp`, `ldpv2`, `gemma3`): every image is resized to
  image_size x image_size; patches = (image_size / patch)^2, divided by 4 for
  ldp/ldpv2 and by merge^2 for gemma3 (merge 4 unless the file says otherwise).
  Example: gemma3, 896 / 14 = 64 patches a side, 64^2 / 4^2 = 256 tokens.
- dynamic size (`qwen2vl_merger`, `qwen2.5vl_merger`, `qwen3vl_merger`): the image keeps
  its aspect ratio, rounded to multiples of patch x merge and held between 8 and 4096
  merged patches ("smart resize"); tokens = (W / (2 x patch)) x (H / (2 x patch)).
  Example: Qwen2.5-VL (patch 14), 1024x768 -> 1036x756 -> 37 x 27 = 999 tokens.
Not modelled (an error names the type): tiled types (idefics3, internvl, llama4,
minicpmv, llava with grid pinpoints), pixtral, audio encoders, and the rest.
The vision encoder's own compute is not counted here, only the tokens it adds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from walkthrough.errors import WalkthroughError
from walkthrough.inspect.gguf import GGUFFile

FIXED = {"mlp": 1, "mlp_norm": 1, "ldp": 2, "ldpv2": 2, "gemma3": 4}  # type -> default merge per side
DYNAMIC = ("qwen2vl_merger", "qwen2.5vl_merger", "qwen3vl_merger")
MARKERS = {"gemma3": 2, "qwen2vl_merger": 2, "qwen2.5vl_merger": 2, "qwen3vl_merger": 2}  # begin/end tokens
DYNAMIC_MIN_TOKENS, DYNAMIC_MAX_TOKENS = 8, 4096  # set_limit_image_tokens(8, 4096) for the Qwen-VL family
DEFAULT_IMAGE = (1024, 768)
MAX_SIDE = 1 << 16  # pixels: a bound on what a user may ask for


class ProjectorError(WalkthroughError):
    """The projector cannot be modelled, or an image size is not usable."""


@dataclass(frozen=True)
class Projector:
    """What a projector file says about cutting an image into tokens."""

    projector_type: str
    image_size: int  # pixels a side the encoder was trained at
    patch_size: int  # pixels a side of one patch
    merge: int  # patches merged per side into one token (llama.cpp's n_merge)


@dataclass(frozen=True)
class ImageTokens:
    """One image's prompt tokens and how they were counted."""

    width: int  # the image as given
    height: int
    resized: tuple[int, int]  # as the encoder sees it
    patches: int  # embeddings the projector outputs
    markers: int  # begin/end tokens mtmd writes around them
    formula: str

    @property
    def tokens(self) -> int:
        return self.patches + self.markers


def _positive(f: GGUFFile, key: str, default: int | None = None) -> int:
    value = f.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_SIDE:
        raise ProjectorError(f"{key} is {value!r} in this projector file; it must be a positive pixel count")
    return value


def read_projector(f: GGUFFile) -> Projector | None:
    """The projector of an `mmproj` file, or None when the file is not one (no `clip.projector_type`)."""
    kind = f.get("clip.projector_type")
    if kind is None:
        kind = f.get("clip.vision.projector_type")
    if not isinstance(kind, str):
        return None
    if kind in FIXED:
        merge = _positive(f, "clip.vision.projector.scale_factor", FIXED[kind]) if kind == "gemma3" else FIXED[kind]
    elif kind in DYNAMIC:
        merge = _positive(f, "clip.vision.spatial_merge_size", 2)
    else:
        merge = 1
    return Projector(kind, _positive(f, "clip.vision.image_size"), _positive(f, "clip.vision.patch_size"), merge)


def _smart_resize(width: int, height: int, align: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """Aspect ratio kept, sides rounded to `align`, area held between the bounds (mtmd's calc_size_preserved_ratio)."""
    w = max(align, round(width / align) * align)
    h = max(align, round(height / align) * align)
    if w * h > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h = max(align, math.floor(height / beta / align) * align)
        w = max(align, math.floor(width / beta / align) * align)
    elif w * h < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h = math.ceil(height * beta / align) * align
        w = math.ceil(width * beta / align) * align
    return w, h


def image_tokens(p: Projector, width: int, height: int) -> ImageTokens:
    """The prompt tokens one width x height image becomes with this projector."""
    if not (0 < width <= MAX_SIDE and 0 < height <= MAX_SIDE):
        raise ProjectorError(f"an image of {width}x{height} pixels: each side must be 1 to {MAX_SIDE}")
    markers = MARKERS.get(p.projector_type, 0)
    if p.projector_type in FIXED:
        side = p.image_size // p.patch_size
        divide = 4 if p.projector_type in ("ldp", "ldpv2") else p.merge * p.merge
        patches = side * side // divide
        formula = (f"resized to {p.image_size}x{p.image_size}: ({p.image_size} / {p.patch_size})^2"
                   + (f" / {divide}" if divide > 1 else "") + f" = {patches}")
        return ImageTokens(width, height, (p.image_size, p.image_size), patches, markers, formula)
    if p.projector_type in DYNAMIC:
        align = p.patch_size * p.merge
        area = align * align
        w, h = _smart_resize(width, height, align, DYNAMIC_MIN_TOKENS * area, DYNAMIC_MAX_TOKENS * area)
        step = 2 * p.patch_size
        patches = (w // step) * (h // step)
        formula = (f"resized to {w}x{h} (multiples of {align}, {DYNAMIC_MIN_TOKENS} to {DYNAMIC_MAX_TOKENS} "
                   f"merged patches): ({w} / {step}) x ({h} / {step}) = {patches}")
        return ImageTokens(width, height, (w, h), patches, markers, formula)
    raise ProjectorError(f"projector type {p.projector_type!r} is not modelled (tiled, audio or other "
                         f"preprocessing); modelled: {', '.join(list(FIXED) + list(DYNAMIC))}")


def parse_images(spec: str) -> tuple[int, int, int]:
    """`N` or `NxWxH` -> (count, width, height); the default size is 1024x768.

    Example: "3x1920x1080" -> (3, 1920, 1080); "2" -> (2, 1024, 768).
    """
    parts = spec.lower().split("x")
    try:
        numbers = [int(part) for part in parts]
    except ValueError:
        numbers = []
    if len(numbers) not in (1, 3) or numbers[0] < 0:
        raise ProjectorError(f"--images {spec!r}: write N or NxWxH, e.g. 2 or 2x1024x768")
    count, width, height = numbers if len(numbers) == 3 else (numbers[0], *DEFAULT_IMAGE)
    return count, width, height
