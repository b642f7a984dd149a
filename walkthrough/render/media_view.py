"""The images or video a request adds, counted by the model's projector (`inspect.projector`), as Rich text.

Shared by the File stage's overview (with --mmproj) and `walkthrough inspect --mmproj`. Presentation only.
"""

from __future__ import annotations

from rich.text import Text

from walkthrough.inspect.projector import MediaTokens, Projector
from walkthrough.textsafe import safe_text


def projector_line(projector: Projector) -> Text:
    """ "projector gemma3: images 896 px a side, patches of 14 px, 4 x 4 patches merged per token"."""
    return safe_text(f"projector {projector.projector_type}: images {projector.image_size} px a side, patches of "
                     f"{projector.patch_size} px, {projector.merge} x {projector.merge} patches merged per token")


def media_lines(projector: Projector, tokens: MediaTokens | None, prompt_tokens: int | None = None) -> Text:
    """The projector, what the media become (each step of the count), and the prompt with them (when given)."""
    out = projector_line(projector)
    if tokens is None:
        out.append("\nno images: i adds some", style="dim")
        return out
    one = tokens.per_chunk
    out.append("\n")
    out.append(tokens.media.describe(), style="bold")
    out.append(f": each {one.formula}" + (f", + {one.markers} begin/end markers" if one.markers else ""))
    out.append(f"\n{tokens.explain()} tokens")
    if prompt_tokens is not None:
        out.append("; ")
        out.append(f"the prompt becomes {prompt_tokens:,} tokens", style="bold")
        out.append(" (Costs counts them)")
    return out
