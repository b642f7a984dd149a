"""A GGUF vocabulary read and checked the way llama.cpp loads it: tokens, types, scores, special ids.

`read_vocab(f)` turns the `tokenizer.ggml.*` metadata into a `Vocab` record, the
input `walkthrough.inspect.tokenizer` builds its `tokenizers.Tokenizer` from. It
follows `llama_vocab::impl::load` in llama.cpp's `src/llama-vocab.cpp`
(llama-cpp-python 0.3.36 vendor tree):

- default special ids per model (SPM: BOS 1, EOS 2, UNK 0; gpt2 BPE: BOS = EOS = 11),
  replaced by the `*_token_id` keys when those are inside the vocabulary;
- `add_bos` / `add_eos` / `add_space_prefix` defaults per model and pre-tokenizer,
  replaced by the `add_*` keys;
- token types from `tokenizer.ggml.token_type` (gguf's `TokenType`), then llama.cpp's
  text-based fixes: end-of-generation and fill-in-the-middle tokens (`<|im_end|>`,
  `<|eot_id|>`, `<|fim_prefix|>`, ...) become control tokens, the gpt-oss channel
  tokens user-defined;
- the lstrip/rstrip flags llama.cpp sets by model name (Phi-3 special tokens eat the
  whitespace after them).

Bad metadata never crashes: what llama.cpp refuses to load raises `VocabError`
(token list missing or not strings, type or score arrays shorter than the token
list or of the wrong element type, merges that are not strings); what llama.cpp
tolerates is kept with a line in `Vocab.warnings` (empty or duplicate tokens,
special ids outside the vocabulary, longer type/score arrays, keys of the wrong type).

Not handled: which of several fill-in-the-middle candidates llama.cpp picks (it
walks a hash map; here every candidate becomes a control token), and the
UNUSED flag it sets on control tokens named "unused" (it changes no tokenization).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from gguf.constants import GGUFValueType, Keys, TokenType

from walkthrough.errors import WalkthroughError
from walkthrough.inspect.gguf import EAGER_STRING_BYTES, GGUFFile
from walkthrough.inspect.pretokenizers import PreTokenizerSpec, resolve

T = Keys.Tokenizer
SPM, BPE, GEMMA4 = "llama", "gpt2", "gemma4"
SUPPORTED_MODELS = (SPM, BPE, GEMMA4)  # gemma4: BPE on UTF-8 text, its pre-tokenizer fixed
PRE_WITHOUT_BOS = frozenset({"chatglm-bpe", "glm4", "glm5"})  # load(): special_bos_id = NULL

# Token texts llama.cpp turns into control tokens whatever their stored type
# (llama_vocab::impl::load): the end-of-generation list, always ...
CONTROL_BY_TEXT = frozenset({
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
    "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<｜end▁of▁sentence｜>", "<end_of_utterance>", "<|eom_id|>",
    "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "</s>", "<eos>", "<turn|>",
    "<|tool_response>", "[e~[",
})
# ... and the fill-in-the-middle candidates, looked up only when the matching key is absent.
FIM_BY_TEXT: dict[str, tuple[str, ...]] = {
    T.FIM_PRE_ID: ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>",
                   "▁<PRE>", "<|code_prefix|>", "<|prefix|>"),
    T.FIM_SUF_ID: ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>",
                   "▁<SUF>", "<|code_suffix|>", "<|suffix|>"),
    T.FIM_MID_ID: ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>",
                   "▁<MID>", "<|code_middle|>", "<|middle|>"),
    T.FIM_PAD_ID: ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"),
    T.FIM_REP_ID: ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    T.FIM_SEP_ID: ("<|file_sep|>",),
}
# The EOT candidates in the order we try them when tokenizer.ggml.eot_token_id is absent.
EOT_BY_TEXT = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
               "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>",
               "<end_of_utterance>")
# gpt-oss: "always render these tokens" (set to USER_DEFINED).
USER_DEFINED_BY_TEXT = ("<|channel|>", "<|message|>", "<|start|>", "<|constrain|>")
SPECIAL_TYPES = (TokenType.CONTROL, TokenType.USER_DEFINED, TokenType.UNKNOWN)


class VocabError(WalkthroughError):
    """The file's tokenizer metadata cannot be used (llama.cpp would refuse it too)."""


@dataclass
class Vocab:
    """The tokenizer metadata of one file, checked, with llama.cpp's defaults and fixes applied."""

    model: str  # tokenizer.ggml.model: "gpt2", "gemma4" or "llama"
    pre: PreTokenizerSpec | None  # BPE models (gpt2, gemma4) only
    tokens: list[str]  # text per id (empty ones renamed "[EMPTY_<id>]" as llama.cpp does)
    types: np.ndarray  # int32 [n_tokens], TokenType values after llama.cpp's fixes
    scores: np.ndarray | None  # float32 [n_tokens] (SPM merge priority), None when absent
    merges: list[str] | None  # BPE models only: "left right" strings, rank = index
    text_to_id: dict[str, int]  # last id wins for duplicated texts, as llama.cpp's token_to_id
    bos_id: int | None = None
    eos_id: int | None = None
    eot_id: int | None = None
    pad_id: int | None = None
    unk_id: int | None = None
    add_bos: bool = False
    add_eos: bool = False
    add_space_prefix: bool = False  # SPM: a space before the text and after each special token
    lstrip: frozenset[int] = frozenset()  # special tokens that eat whitespace before them
    rstrip: frozenset[int] = frozenset()  # ... and after them
    warnings: list[str] = field(default_factory=list)

    @property
    def special_ids(self) -> frozenset[int]:
        """Control and user-defined tokens."""
        return frozenset(np.flatnonzero(np.isin(self.types, (TokenType.CONTROL, TokenType.USER_DEFINED))).tolist())


def _array(f: GGUFFile, key: str, element_types: tuple[GGUFValueType, ...], what: str):
    """The decoded array at `key`, None when absent; VocabError when it is not an array of `element_types`."""
    fld = f.fields.get(key)
    if fld is None:
        return None
    if not fld.is_array or fld.element_type not in element_types:
        names = " or ".join(f"array[{t.name.lower()}]" for t in element_types)
        raise VocabError(f"{f.path.name}: {key} is {fld.type_name}, not {names}; {what}")
    return f.get(key)


def _tokens(f: GGUFFile, warnings: list[str]) -> list[str]:
    tokens = _array(f, T.LIST, (GGUFValueType.STRING,), "the vocabulary cannot be read")
    if tokens is None:
        raise VocabError(f"{f.path.name}: no {T.LIST} in the file, so it has no vocabulary to tokenize with")
    if not tokens:
        raise VocabError(f"{f.path.name}: {T.LIST} is empty")
    empty = [i for i, t in enumerate(tokens) if not t] if "" in tokens else []
    if empty:
        tokens = list(tokens)
        for i in empty:
            tokens[i] = f"[EMPTY_{i}]"  # llama.cpp's replacement text
        warnings.append(f"{len(empty)} empty token(s) (first id {empty[0]}) renamed [EMPTY_<id>] as llama.cpp does")
    return tokens


def _per_token(f: GGUFFile, key: str, n: int, types: tuple[GGUFValueType, ...], warnings: list[str]):
    """A per-token array (types or scores): VocabError when shorter than the vocabulary, warning when longer."""
    values = _array(f, key, types, "llama.cpp refuses to load this vocabulary")
    if values is None:
        return None
    if len(values) < n:
        raise VocabError(
            f"{f.path.name}: {key} has {len(values)} entries for {n} tokens; "
            "llama.cpp refuses this vocabulary too (re-convert the model)")
    if len(values) > n:
        warnings.append(f"{key} has {len(values)} entries for {n} tokens; the extra ones are ignored")
    return values[:n]


def _duplicates(tokens: list[str], text_to_id: dict[str, int], warnings: list[str]) -> None:
    if len(text_to_id) == len(tokens):
        return
    shadowed = [i for i, t in enumerate(tokens) if text_to_id[t] != i]
    first = shadowed[0]
    warnings.append(
        f"{len(shadowed)} token text(s) appear more than once (first: id {first} {tokens[first]!r}, "
        f"also id {text_to_id[tokens[first]]}); text maps to the last id, as in llama.cpp "
        "(which stops with an assertion on such a file)")


def _flag(f: GGUFFile, key: str, default: bool, warnings: list[str]) -> bool:
    fld = f.fields.get(key)
    if fld is None:
        return default
    if fld.type != GGUFValueType.BOOL:
        warnings.append(f"{key} is {fld.type_name}, not bool; using the default ({default})")
        return default
    return bool(fld.scalar)


_INT_TYPES = (GGUFValueType.UINT8, GGUFValueType.INT8, GGUFValueType.UINT16, GGUFValueType.INT16,
              GGUFValueType.UINT32, GGUFValueType.INT32, GGUFValueType.UINT64, GGUFValueType.INT64)


def _special_id(f: GGUFFile, key: str, default: int | None, n: int, warnings: list[str]) -> int | None:
    """A `*_token_id` key as llama.cpp reads it: absent or outside the vocabulary -> the default."""
    if default is not None and default >= n:
        default = None  # "default special token ... out of vocab range, disabling"
    fld = f.fields.get(key)
    if fld is None:
        return default
    if fld.type not in _INT_TYPES:
        warnings.append(f"{key} is {fld.type_name}, not an integer; using {default}")
        return default
    value = int(fld.scalar)
    if not 0 <= value < n:
        warnings.append(f"{key} = {value} is outside the vocabulary (0..{n - 1}); using {default}")
        return default
    return value


def _fix_types(f: GGUFFile, types: np.ndarray, text_to_id: dict[str, int], eos_text: str | None) -> None:
    """llama.cpp's text-based type fixes (control-looking tokens, gpt-oss channel tokens), in place."""
    texts = set(CONTROL_BY_TEXT)
    for key, candidates in FIM_BY_TEXT.items():
        if key not in f.fields:
            texts.update(candidates)
    for text in texts:
        if text in text_to_id:
            types[text_to_id[text]] = TokenType.CONTROL
    for text in USER_DEFINED_BY_TEXT:
        if text in text_to_id:
            types[text_to_id[text]] = TokenType.USER_DEFINED
    # o200k_harmony / solar-open: "<|end|>" is not end-of-generation there, and becomes user-defined.
    present = text_to_id.keys()
    if "<|end|>" in present and (
        {"<|return|>", "<|call|>"} <= present or {"<|calls|>", "<|flush|>"} <= present
    ):
        types[text_to_id["<|end|>"]] = TokenType.USER_DEFINED
    # Gemma 4 and PLaMo-2 have an ordinary "</s>" token.
    if "</s>" in present and ("<|tool_response>" in present or eos_text == "<|plamo:eos|>"):
        types[text_to_id["</s>"]] = TokenType.NORMAL


def _strip_flags(f: GGUFFile, types: np.ndarray, text_to_id: dict[str, int]):
    """The lstrip/rstrip attributes llama.cpp sets by model, pre-tokenizer or architecture name."""
    name = (f.short_text(Keys.General.NAME, EAGER_STRING_BYTES) or "").lower()  # a longer name: its head
    pre = str(f.get(T.PRE, "") or "")
    arch = str(f.get(Keys.General.ARCHITECTURE, "") or "")
    lstrip: set[int] = set()
    rstrip: set[int] = set()
    if any(s in pre for s in ("jina-v2-de", "jina-v2-es", "jina-v2-code")) or any(
        s in arch for s in ("nomic-bert-moe", "jina-bert-v3")
    ):
        if "<mask>" in text_to_id:
            lstrip.add(text_to_id["<mask>"])
    elif "phi-3" in name or "phi3" in name:
        rstrip.update(np.flatnonzero(np.isin(types, SPECIAL_TYPES)).tolist())
        if "</s>" in text_to_id:
            rstrip.add(text_to_id["</s>"])
        for text in ("<unk>", "<s>", "<|endoftext|>"):
            rstrip.discard(text_to_id.get(text, -1))
    elif "modern-bert" in name and "[MASK]" in text_to_id:
        lstrip.add(text_to_id["[MASK]"])
    return frozenset(lstrip), frozenset(rstrip)


def read_vocab(f: GGUFFile) -> Vocab:
    """Read and check the vocabulary of an opened GGUF file.

    Raises:
        VocabError: the metadata is missing, of the wrong type, or inconsistent in a
            way llama.cpp refuses too; the message names the key.
    """
    warnings: list[str] = []
    model_field = f.fields.get(T.MODEL)
    if model_field is None:
        raise VocabError(f"{f.path.name}: no {T.MODEL} key, so the file has no tokenizer")
    if model_field.type != GGUFValueType.STRING:
        raise VocabError(f"{f.path.name}: {T.MODEL} is {model_field.type_name}, not a string")
    model = f.get(T.MODEL)
    if model not in SUPPORTED_MODELS:
        raise VocabError(
            f"{f.path.name}: tokenizer model {model!r} is not supported "
            f"(only {', '.join(map(repr, SUPPORTED_MODELS))}); the rest of the file can still be inspected")
    tokens = _tokens(f, warnings)
    n = len(tokens)
    raw_types = _per_token(f, T.TOKEN_TYPE, n, (GGUFValueType.INT32,), warnings)
    types = np.ones(n, np.int32) if raw_types is None else np.array(raw_types, np.int32)
    scores = _per_token(f, T.SCORES, n, (GGUFValueType.FLOAT32, GGUFValueType.INT32), warnings)
    if scores is not None:
        scores = np.asarray(scores, np.float32)
        if not np.isfinite(scores).all():
            bad = int(np.count_nonzero(~np.isfinite(scores)))
            scores = np.nan_to_num(scores, nan=-np.inf)
            warnings.append(f"{bad} score(s) in {T.SCORES} are NaN or infinite; NaN counts as the lowest score")
    text_to_id = dict(zip(tokens, range(n)))
    _duplicates(tokens, text_to_id, warnings)

    pre = None
    merges = None
    if model in (BPE, GEMMA4):
        pre_value = "gemma4" if model == GEMMA4 else f.get(T.PRE)  # load() forces "gemma4"
        if pre_value is not None and not isinstance(pre_value, str):
            warnings.append(f"{T.PRE} is {f.fields[T.PRE].type_name}, not a string; ignored")
            pre_value = None
        pre = resolve(pre_value)
        if pre.warning:
            warnings.append(pre.warning)
        merges = _array(f, T.MERGES, (GGUFValueType.STRING,), "llama.cpp refuses this vocabulary")
        if merges is None:
            raise VocabError(f"{f.path.name}: a {model} (BPE) vocabulary needs {T.MERGES}, and the file has none")
    elif scores is None:
        warnings.append(f"no {T.SCORES}: every merge has score 0, as in llama.cpp")

    spm, gpt2 = model == SPM, model == BPE
    default_bos = 1 if spm else (11 if gpt2 and pre.name not in PRE_WITHOUT_BOS else None)
    default_eos = 2 if spm else (11 if gpt2 else None)
    eos_id = _special_id(f, T.EOS_ID, default_eos, n, warnings)
    _fix_types(f, types, text_to_id, tokens[eos_id] if eos_id is not None else None)
    lstrip, rstrip = _strip_flags(f, types, text_to_id)
    vocab = Vocab(
        model=model, pre=pre, tokens=tokens, types=types, scores=scores, merges=merges,
        text_to_id=text_to_id,
        bos_id=_special_id(f, T.BOS_ID, default_bos, n, warnings),
        eos_id=eos_id,
        eot_id=_special_id(f, T.EOT_ID, None, n, warnings),
        pad_id=_special_id(f, T.PAD_ID, None, n, warnings),
        unk_id=_special_id(f, T.UNK_ID, 0 if spm else None, n, warnings),
        add_bos=_flag(f, T.ADD_BOS, spm or bool(pre and pre.add_bos), warnings)
        or bool(pre and pre.gemma4),  # load() forces add_bos for Gemma 4
        add_eos=_flag(f, T.ADD_EOS, False, warnings),
        add_space_prefix=_flag(f, T.ADD_PREFIX, spm, warnings),
        lstrip=lstrip, rstrip=rstrip, warnings=warnings,
    )
    if vocab.eot_id is None:
        vocab.eot_id = next((text_to_id[t] for t in EOT_BY_TEXT if t in text_to_id), None)
    return vocab
