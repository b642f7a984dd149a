"""Sliding-window defaults per architecture: which layers slide when the file gives no pattern.

The card reads these for any file it inspects (runnable by the engine or not); the numbers are llama.cpp's.
"""

from __future__ import annotations

# Default sliding-window period and whether the dense layer comes first, for architectures
# that use one when the file gives no pattern: the `load_swa_pattern(ml, N[, dense_first])`
# calls in llama.cpp's src/models/{gemma2,gemma3,gemma3n,gemma-embedding,cohere2,cohere2moe,
# exaone4,olmo2,openai-moe}.cpp (vendored 0.3.36).
SWA_DEFAULTS: dict[str, tuple[int, bool]] = {
    "gemma2": (2, False),
    "gemma3": (6, False),
    "gemma3n": (5, False),
    "gemma-embedding": (6, False),
    "cohere2": (4, False),
    "cohere2moe": (4, True),
    "exaone4": (4, False),
    "olmo2": (4, False),
    "gpt-oss": (2, False),
}
# Architectures whose declared window llama.cpp does not apply: every layer attends to all positions
# (src/models/phi3.cpp: "Phi SWA is currently disabled", swa_type NONE).
SWA_DISABLED = frozenset({"phi3"})
