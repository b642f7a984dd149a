"""Default knobs: the sampler's, as llama.cpp ships them, and the app's answer cap; numpy-free for cheap `--help`.

Source: `common_params_sampling` in llama.cpp's common/common.h (temp 0.80,
top_k 40, top_p 0.95, min_p 0.05).
"""

LLAMA_CPP_DEFAULTS = {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05}

DEFAULT_DRAFT_MAX = 3  # llama.cpp's common_params_speculative_draft::n_max (common/common.h)
MAX_NEW_TOKENS = 120  # tokens the app lets a run pick before it stops the answer (`walkthrough --max-tokens`)
