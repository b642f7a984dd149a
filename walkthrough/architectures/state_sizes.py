"""How many values one recurrent layer keeps, from the metadata its layer kind reads.

Each function takes `read` (a metadata key after `{arch}.` -> its value as a count, None when absent or
not a count) and the model width, and returns the values of one layer's fixed state (conv or shift state
+ recurrent state), or None when the file does not say enough. They follow llama.cpp's `n_embd_r()` +
`n_embd_s()` (src/llama-hparams.cpp). A layer kind names its function in its declaration
(`LayerKind.state_values`), so the card sizes a kind's state without knowing the kind; the card also uses
them for recurrent architectures the engine does not run (`inspect.hparams.recurrent_state_values`).
"""

from __future__ import annotations

from collections.abc import Callable

Read = Callable[[str], "int | None"]  # a metadata key (after `{arch}.`) -> a count, or None
RWKV_DEFAULT_TOKEN_SHIFT = 2  # llama_hparams::token_shift_count default (src/llama-hparams.h)


def ssm_state_values(read: Read, n_embd: int | None) -> int | None:
    """Mamba-style SSMs and Gated DeltaNet: (d_conv - 1) x (d_inner + 2 x n_group x d_state) + d_state x
    d_inner.

    Example (the qwen35moe reference: conv 4, inner 64, state 16, groups 2): 3 x (64 + 64) + 16 x 64 = 1408.
    """
    d_conv, d_inner, d_state, n_group = (read(k) for k in ("ssm.conv_kernel", "ssm.inner_size",
                                                           "ssm.state_size", "ssm.group_count"))
    if d_inner is None or d_state is None:
        return None
    return max((d_conv or 0) - 1, 0) * (d_inner + 2 * (n_group or 0) * d_state) + d_state * d_inner


def shortconv_state_values(read: Read, n_embd: int | None) -> int | None:
    """A short convolution (lfm2): its last l_cache - 1 inputs, n_embd x (l_cache - 1).

    Example: l_cache 3, n_embd 64 -> 128.
    """
    l_cache = read("shortconv.l_cache")
    if not l_cache or n_embd is None:
        return None
    return n_embd * max(l_cache - 1, 0)


def rwkv_state_values(read: Read, n_embd: int | None) -> int | None:
    """RWKV: token_shift_count x n_embd + n_embd x head_size.

    Example: head size 64, n_embd 128, the default shift of 2 -> 2 x 128 + 128 x 64 = 8448.
    """
    head_size = read("wkv.head_size")
    if not head_size or n_embd is None:
        return None
    shift = read("token_shift_count")
    return (shift if shift is not None else RWKV_DEFAULT_TOKEN_SHIFT) * n_embd + n_embd * head_size
