"""The sampler's default knobs, as llama.cpp ships them; numpy-free so `--help` texts can show them cheaply.

Source: `common_params_sampling` in llama.cpp's common/common.h (temp 0.80,
top_k 40, top_p 0.95, min_p 0.05).
"""

LLAMA_CPP_DEFAULTS = {"temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05}
