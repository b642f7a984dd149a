"""Train the tiny model's byte-level BPE tokenizer on the synthetic corpus.

The pre-tokenizer splits text with the regex llama.cpp uses for `tokenizer.ggml.pre = "qwen2"`
(the case-insensitive contraction group spelled out there as `'[sS]|...`; the same language), then
maps bytes to the GPT-2 byte alphabet, so this tokenizer and llama.cpp cut text identically. The
three ChatML special tokens come after the learned vocabulary.
"""

from __future__ import annotations

from pathlib import Path

from corpus import SPECIAL_TOKENS
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

# The qwen2 pre-tokenizer regex (llama.cpp src/llama-vocab.cpp, LLAMA_VOCAB_PRE_TYPE_QWEN2).
QWEN2_PRE_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
PRE_NAME = "qwen2"


def new_tokenizer() -> Tokenizer:
    """An empty byte-level BPE tokenizer with the qwen2 pre-tokenizer."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PRE_REGEX), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    return tok


def train_tokenizer(texts: list[str], vocab_size: int, out_path: Path | None = None) -> Tokenizer:
    """Learn merges on `texts`; the special tokens get the last ids.

    Args:
        texts: training documents (special-token strings are removed first).
        vocab_size: total size including the 256 byte tokens and the special tokens.
        out_path: where to save `tokenizer.json`, if given.

    Returns:
        The trained tokenizer.
    """
    tok = new_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(SPECIAL_TOKENS),
        min_frequency=1,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    cleaned = []
    for text in texts:
        for special in SPECIAL_TOKENS:
            text = text.replace(special, "\n")
        cleaned.append(text)
    tok.train_from_iterator(cleaned, trainer=trainer)
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in SPECIAL_TOKENS])
    if out_path is not None:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        tok.save(str(out_path))
    return tok
