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

Video (`media_tokens` with `Media("video", frames, w, h)`): mtmd reads no video file;
frames go in as images, so F frames are F images, except where the projector merges
frames in time (`clip_model_n_temporal_merge`: 2 for the Qwen-VL mergers, which pair
consecutive same-size frames into one image's tokens): ceil(F / 2) x one frame's tokens.
Example: 16 frames of 640x360 with Qwen2.5-VL: 644x364 -> 23 x 13 = 299 + 2 markers,
x 8 pairs = 2,408 tokens.

The file is read as hostile: sizes must be pixel counts up to 65,536, the patch no larger
than the image, the merge at most `MAX_MERGE`, the type's text at most `MAX_TYPE_CHARS`.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from walkthrough.errors import WalkthroughError
from walkthrough.inspect.gguf import GGUFFile, open_gguf

FIXED = {"mlp": 1, "mlp_norm": 1, "ldp": 2, "ldpv2": 2, "gemma3": 4}  # type -> default merge per side
DYNAMIC = ("qwen2vl_merger", "qwen2.5vl_merger", "qwen3vl_merger")
MARKERS = {"gemma3": 2, "qwen2vl_merger": 2, "qwen2.5vl_merger": 2, "qwen3vl_merger": 2}  # begin/end tokens
DYNAMIC_MIN_TOKENS, DYNAMIC_MAX_TOKENS = 8, 4096  # set_limit_image_tokens(8, 4096) for the Qwen-VL family
DEFAULT_IMAGE = (1024, 768)
MAX_SIDE = 1 << 16  # pixels: a bound on what a user may ask for
MAX_MERGE = 64  # patches merged per side: real projectors merge 2 to 4
MAX_TYPE_CHARS = 64  # a projector type longer than this is not one llama.cpp knows
MAX_MEDIA = 100_000  # images or frames one request may ask for
TEMPORAL_MERGE = {"qwen2vl_merger": 2, "qwen2.5vl_merger": 2, "qwen3vl_merger": 2}  # frames per video chunk


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
    if len(kind) > MAX_TYPE_CHARS:
        raise ProjectorError(f"clip.projector_type is {len(kind):,} characters long in this projector file; "
                             f"llama.cpp's types are short names like gemma3 or qwen2.5vl_merger")
    if kind in FIXED:
        merge = _positive(f, "clip.vision.projector.scale_factor", FIXED[kind]) if kind == "gemma3" else FIXED[kind]
    elif kind in DYNAMIC:
        merge = _positive(f, "clip.vision.spatial_merge_size", 2)
    else:
        merge = 1
    image, patch = _positive(f, "clip.vision.image_size"), _positive(f, "clip.vision.patch_size")
    if patch > image:
        raise ProjectorError(f"clip.vision.patch_size {patch} is larger than clip.vision.image_size {image} in this "
                             "projector file; a patch is a piece of the image")
    if merge > MAX_MERGE:
        raise ProjectorError(f"this projector file merges {merge} patches a side; at most {MAX_MERGE} is modelled "
                             "(real projectors merge 2 to 4)")
    return Projector(kind, image, patch, merge)


def open_projector(path: str | os.PathLike, option: str = "--mmproj") -> Projector:
    """The projector of the file at `path` (read once, header only).

    Raises:
        WalkthroughError: the file cannot be read, is not a GGUF, is not a projector, or its keys are unusable;
            one line naming `option`.
    """
    try:
        with open_gguf(path) as f:
            projector = read_projector(f)
    except OSError as exc:
        raise ProjectorError(f"{option} {path}: cannot be read ({exc.strerror or exc}); check the path") from None
    if projector is None:
        raise ProjectorError(f"{option} {Path(path).name}: not a multimodal projector (no clip.projector_type); "
                             "name the mmproj-*.gguf file that comes with the model")
    return projector


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


@dataclass(frozen=True)
class Media:
    """What the user adds to the prompt: `count` images, or a video of `count` frames, each width x height."""

    kind: str  # "image" or "video"
    count: int
    width: int
    height: int

    def describe(self) -> str:
        """ "2 images of 1024x768", "a 16-frame video of 640x360"."""
        if self.kind == "video":
            return f"a {self.count:,}-frame video of {self.width}x{self.height}"
        return f"{self.count:,} image{'' if self.count == 1 else 's'} of {self.width}x{self.height}"


@dataclass(frozen=True)
class MediaTokens:
    """The prompt tokens some media become with one projector."""

    media: Media
    per_chunk: ImageTokens  # one image, or one chunk of a video (a frame, or a merged pair of frames)
    chunks: int  # images, or video chunks after the temporal merge
    merge: int  # frames per video chunk (1 for images)

    @property
    def tokens(self) -> int:
        return self.chunks * self.per_chunk.tokens

    def to_json(self, projector: Projector) -> dict[str, object]:
        """The count as `estimate --json`'s `images` and `inspect --json`'s `mmproj.media` give it."""
        one = self.per_chunk
        return {"kind": self.media.kind, "count": self.media.count, "width": one.width, "height": one.height,
                "chunks": self.chunks, "per_image": one.tokens, "tokens": self.tokens, "resized": list(one.resized),
                "projector": projector.projector_type, "explain": self.explain(),
                "formula": one.formula + (f" + {one.markers} markers" if one.markers else "")}

    def explain(self) -> str:
        """ "8 chunks (16 frames, 2 merged in time) x 301 tokens = 2,408"."""
        if self.media.kind == "video" and self.merge > 1:
            what = f"{self.chunks:,} chunks ({self.media.count:,} frames, {self.merge} merged in time)"
        elif self.media.kind == "video":
            what = f"{self.chunks:,} frames (each one image)"
        else:
            what = f"{self.chunks:,} image{'' if self.chunks == 1 else 's'}"
        return f"{what} x {self.per_chunk.tokens:,} tokens = {self.tokens:,}"


def parse_media(spec: str) -> Media:
    """`N`, `NxWxH` (images) or `vF`, `vFxWxH` (a video of F frames) -> Media; the default size is 1024x768.

    Example: "2x640x480" -> 2 images of 640x480; "v16x640x360" -> a 16-frame video of 640x360; "0" -> none.
    """
    text = spec.strip().lower()
    kind = "video" if text.startswith("v") else "image"
    try:
        count, width, height = parse_images(text[1:] if kind == "video" else text)
    except ProjectorError:
        raise ProjectorError(f"{spec[:40]!r}: write N or NxWxH for images, vF or vFxWxH for a video of F "
                             "frames, e.g. 2x1024x768 or v16x640x360") from None
    if count > MAX_MEDIA or (kind == "video" and count < 1):
        raise ProjectorError(f"{spec[:40]!r}: {'frames' if kind == 'video' else 'images'} must be "
                             f"{1 if kind == 'video' else 0} to {MAX_MEDIA:,}")
    if not (0 < width <= MAX_SIDE and 0 < height <= MAX_SIDE):
        raise ProjectorError(f"{spec[:40]!r}: each side must be 1 to {MAX_SIDE} pixels")
    return Media(kind, count, width, height)


def media_tokens(p: Projector, media: Media) -> MediaTokens:
    """The prompt tokens `media` becomes with this projector (see the module docstring for video)."""
    one = image_tokens(p, media.width, media.height)
    merge = TEMPORAL_MERGE.get(p.projector_type, 1) if media.kind == "video" else 1
    return MediaTokens(media, one, -(-media.count // merge), merge)
