"""How llama.cpp cuts text into words before byte-level BPE, per `tokenizer.ggml.pre`.

The regex lists below are the facts from llama.cpp's `src/llama-vocab.cpp`
(`llm_tokenizer_bpe` constructor, `switch (vocab.get_pre_type())`; llama-cpp-python
0.3.36 vendor tree), and the name -> type table from `llama_vocab::impl::load`
(the `tokenizer_pre == "..."` chain). llama.cpp applies the regexes of one type in
order, each one splitting every piece left by the previous one, keeping both the
matches and the text between them as pieces (`unicode_regex_split` in
`src/unicode.cpp`). That is exactly a sequence of `tokenizers` `Split(...,
behavior="isolated")` pre-tokenizers, which run Oniguruma, so the regexes are used
as written, with three translations that reproduce what llama.cpp's regex engine
does with them (see `unicode_regex_split`):

- llama.cpp runs a regex that uses `\\p{..}` on a "collapsed" copy of the text in
  which every non-ASCII letter is one LETTER byte, so `\\p{Lu}`, `\\p{Ll}`,
  `\\p{Lt}`, `\\p{Lm}` and `\\p{Lo}` all mean `\\p{L}` there: we write `\\p{L}`.
- `$` in std::regex (ECMAScript, no multiline) is the end of the piece: `\\z`.
- regexes without `\\p{..}` see every non-ASCII whitespace character replaced by
  U+000B, so a literal character range never matches one (U+3000 inside
  `[　-。]`, for example): such ranges get `&&[^...]` removing them.

llama.cpp's hand-written splitters for the gpt-2, llama3, qwen2 and qwen35 regexes
(`unicode_regex_split_custom_*`) behave like the regexes themselves, so those need
nothing special. Two types are not byte-level (gemma4, sarvam-moe): their BPE
runs on the UTF-8 text itself with spaces written as U+2581, split only into
runs of newlines and runs of other characters (`byte_level=False`). Types that
llama.cpp splits with code no regex reproduces (kimi-k2, afmoe, tiny_aya,
whitespace) are listed in `UNSUPPORTED`; they fall back to the default regex
with a warning.

Example:
    >>> spec = resolve("qwen2")
    >>> spec.kind, spec.ignore_merges
    ('qwen2', False)
    >>> [w for w, _ in build_pre_tokenizer(spec).pre_tokenize_str("Hi 42!")]
    ['Hi', 'Ġ', '4', '2', '!']
"""

from __future__ import annotations

from dataclasses import dataclass

from tokenizers import Regex, pre_tokenizers

# Non-ASCII code points in llama.cpp's whitespace set (`unicode_set_whitespace`,
# src/unicode-data.cpp); the wide-regex path maps each to U+000B.
_NON_ASCII_WS = "\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"

# Building blocks shared by many rows (each is a literal regex from llama-vocab.cpp).
_CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3 = (
    _CONTRACTIONS
    + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2 = (
    _CONTRACTIONS
    + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_CJK_DEEPSEEK = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff&&[^" + _NON_ASCII_WS + "]]+"
_HAN_KANA = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
_DEEPSEEK3_MAIN = (
    r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"""
    r"""| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
# Upper-then-lower letter runs as llama.cpp writes them for std::regex (tekken, gpt-4o).
_UPPER = r"((?=[\p{L}])([^a-z]))"
_LOWER = r"((?=[\p{L}])([^A-Z]))"
_PORO = " ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+"

# LLAMA_VOCAB_PRE_TYPE_* (lower case) -> the regexes llama.cpp applies, in order.
REGEXES: dict[str, tuple[str, ...]] = {
    "default": (r"[\p{P}\$\+<=>\^~\|]+", _GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"),
    "llama3": (_LLAMA3,),
    "jais2": (
        _CONTRACTIONS
        + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
        r"|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)"
        r"|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1}",
    ),
    "dbrx": (_LLAMA3,),
    "deepseek_llm": (
        r"[\r\n]",
        ("\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293"
        "\u0295-\u02af\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c"
        "\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5"
        "\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77"
        "\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59"
        "\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc"
        "\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a-"
        "\u2113\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-"
        "\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2"
        "\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf"
        "\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-"
        "\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-"
        "\U000118df\U0001e900-\U0001e943]+"),
        "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002&&[^" + _NON_ASCII_WS + "]]+",
        r"\s+\z",
        _CJK_DEEPSEEK,
        r"\p{N}+",
    ),
    "deepseek3_llm": (r"\p{N}{1,3}", _HAN_KANA, _DEEPSEEK3_MAIN),
    "spark2_5": (
        r"\p{N}{1,3}",
        _HAN_KANA,
        (r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"""
        r"""| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+"""),
        r"\p{N}",
    ),
    "youtu": (
        "[\uac00-\ud7a3\u3131-\u318e]+"
        "|[\uff01\u2026\u201c\u201d\u2018\u2019\u2014\uff1a\uff1b\uff0c\u3001-\u303f\ufe30-\ufe4f]+"
        "|[\u3105-\u312f]+|" + _HAN_KANA,
        # \p{Lu}\p{Lt}\p{Lm}\p{Lo} and \p{Ll}\p{Lm}\p{Lo} written as \p{L} (module docstring)
        r"[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]*[\p{L}\p{M}]+" + _CONTRACTIONS + "?"
        r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+[\p{L}\p{M}]*" + _CONTRACTIONS + "?"
        r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    "deepseek_coder": (r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _CJK_DEEPSEEK, r"\p{N}"),
    "falcon": (r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, r"[0-9][0-9][0-9]"),
    "starcoder": (r"\p{N}", _GPT2),
    "gpt2": (_GPT2,),
    "qwen2": (_QWEN2,),
    "qwen35": (
        _CONTRACTIONS
        + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+"
        r"|\s+(?!\S)|\s+",
    ),
    "poro": (_PORO,),
    "chatglm4": (_LLAMA3,),
    "viking": (_PORO, r"\p{N}"),
    "tekken": (
        (rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*"
        r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
    ),
    "chameleon": (
        r"<sentinel:[0-9]+>",
        r"(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
        r"([\t\n]|    |  )",
        r"\p{N}",
        r"[\p{P}!-/:-@\[-`{-~]",
        _GPT2,
    ),
    "gpt4o": (
        (rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+{_CONTRACTIONS}?"
        rf"|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*{_CONTRACTIONS}?"
        r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
    ),
    "granite_emb_multi": (
        r"[^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))*((?=[\p{L}\p{M}])([^A-Z]))+"
        + _CONTRACTIONS
        + r"?|[^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))+((?=[\p{L}\p{M}])([^A-Z]))*"
        + _CONTRACTIONS
        + r"?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    "superbpe": (r"\p{N}+", r"(?=(\d{3})+(?!\d))"),
    "bailingmoe": (
        (r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
        r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"),
    ),
    "seed_coder": (
        _CONTRACTIONS
        + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    "ufakzeka": (
        r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    "laguna": (r"[^\n]+|[\n]+", _QWEN2),
    "exaone_moe": (
        _CONTRACTIONS
        + r"|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?"
        r"|\s*[\r\n]|\s+(?!\S)|\s+",
    ),
    # Not byte-level: only newline runs are split off (unicode_regex_split_custom_newlines).
    "gemma4": (r"[^\n]+|[\n]+",),
    "minicpm5": (
        r"\p{N}{1,3}",
        _CONTRACTIONS
        + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
}
# Types that share another type's regexes (the grouped `case` labels in llama-vocab.cpp).
for _alias, _kind in {
    "smaug": "dbrx", "hunyuan_dense": "deepseek3_llm", "joyai_llm": "deepseek3_llm",
    "hy_v4": "deepseek3_llm", "refact": "starcoder", "command_r": "starcoder",
    "smollm": "starcoder", "codeshell": "starcoder", "exaone": "starcoder",
    "minerva": "starcoder", "mellum2": "starcoder", "mpt": "gpt2", "olmo": "gpt2",
    "jais": "gpt2", "trillion": "gpt2", "granite_docling": "gpt2", "stablelm2": "qwen2",
    "hunyuan": "qwen2", "solar_open": "qwen2", "grok_2": "qwen2", "bloom": "poro",
    "gpt3_finnish": "poro", "minimax_m2": "gpt4o", "sarvam_moe": "gemma4",
}.items():
    REGEXES[_alias] = REGEXES[_kind]

# tokenizer.ggml.pre -> LLAMA_VOCAB_PRE_TYPE_* (llama_vocab::impl::load).
_NAME_GROUPS: dict[str, tuple[str, ...]] = {
    "default": ("default",),
    "minicpm5": ("minicpm5",),
    "llama3": ("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
               "lfm2", "jina-v5-nano"),
    "deepseek_llm": ("deepseek-llm",),
    "deepseek_coder": ("deepseek-coder",),
    "deepseek3_llm": ("deepseek-v3",),
    "spark2_5": ("spark2_5",),
    "youtu": ("youtu",),
    "falcon": ("falcon",),
    "mpt": ("mpt",),
    "starcoder": ("starcoder",),
    "gpt2": ("gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de",
             "a.x-4.0", "mellum", "modern-bert", "jina-v1-en", "jina-v2-code", "roberta-bpe",
             "exaone4"),
    "jais2": ("jais-2",),
    "refact": ("refact",),
    "command_r": ("command-r",),
    "qwen2": ("qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez"),
    "qwen35": ("qwen35",),
    "stablelm2": ("stablelm2",),
    "olmo": ("olmo",),
    "dbrx": ("dbrx",),
    "smaug": ("smaug-bpe",),
    "poro": ("poro-chat",),
    "chatglm4": ("chatglm-bpe", "glm4", "glm5"),
    "viking": ("viking",),
    "jais": ("jais",),
    "tekken": ("tekken",),
    "smollm": ("smollm",),
    "codeshell": ("codeshell",),
    "bloom": ("bloom",),
    "gpt3_finnish": ("gpt3-finnish",),
    "exaone": ("exaone",),
    "exaone_moe": ("exaone-moe",),
    "chameleon": ("chameleon",),
    "minerva": ("minerva-7b",),
    "gpt4o": ("gpt-4o", "llama4", "kanana2", "talkie"),
    "granite_emb_multi": ("granite-embed-multi-97m",),
    "superbpe": ("superbpe",),
    "trillion": ("trillion",),
    "granite_docling": ("granite-docling",),
    "bailingmoe": ("bailingmoe", "bailingmoe2", "llada-moe"),
    "seed_coder": ("seed-coder",),
    "hunyuan": ("hunyuan",),
    "hunyuan_dense": ("hunyuan-dense",),
    "hy_v4": ("hy_v4",),
    "joyai_llm": ("joyai-llm",),
    "ufakzeka": ("ufakzeka",),
    "grok_2": ("grok-2",),
    "laguna": ("laguna",),
    "minimax_m2": ("minimax-m2",),
    "solar_open": ("solar-open",),
    "mellum2": ("mellum2",),
    "gemma4": ("gemma4", "granite-embed-multi-311m"),
    "sarvam_moe": ("sarvam-moe",),
}
NAMES: dict[str, str] = {name: kind for kind, names in _NAME_GROUPS.items() for name in names}

# Names for which load() sets `ignore_merges = true` (a word that is a whole token is taken as is).
IGNORE_MERGES = frozenset({
    "minicpm5", "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
    "lfm2", "jina-v5-nano", "youtu", "glm4", "glm5", "tekken", "granite-embed-multi-97m",
})
# Types whose BPE runs on UTF-8 with spaces escaped to U+2581 (`byte_encode = false`).
NOT_BYTE_LEVEL = frozenset({"gemma4", "sarvam_moe"})
# Names for which load() sets `add_bos = true` before tokenizer.ggml.add_bos_token is read.
ADD_BOS = frozenset({
    "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
    "jina-v5-nano", "tekken", "chameleon",
})
# Names llama.cpp knows but splits with code this module does not reproduce.
UNSUPPORTED: dict[str, str] = {
    "kimi-k2": "llama.cpp splits it with custom code (unicode_regex_split_custom_kimi_k2)",
    "afmoe": "llama.cpp groups digits with custom code (unicode_regex_split_custom_afmoe)",
    "tiny_aya": "llama.cpp groups digits with custom code (unicode_regex_split_custom_afmoe)",
    "cohere2moe": "llama.cpp groups digits with custom code (unicode_regex_split_custom_afmoe)",
    "whitespace": "it is a whitespace tokenizer without byte-level BPE",
}


@dataclass(frozen=True)
class PreTokenizerSpec:
    """How one `tokenizer.ggml.pre` name splits text, as llama.cpp does it."""

    name: str  # the name as given (or "default")
    kind: str  # LLAMA_VOCAB_PRE_TYPE_* in lower case
    regexes: tuple[str, ...]
    ignore_merges: bool = False
    add_bos: bool = False  # llama.cpp's default before tokenizer.ggml.add_bos_token
    warning: str | None = None  # set when llama.cpp would not split it this way
    byte_level: bool = True  # False: BPE on UTF-8 text with spaces as U+2581

    @property
    def gemma4(self) -> bool:
        """llama.cpp's Gemma 4 rules: BOS always added, a run of newlines that is a token is
        taken whole (llama-vocab.cpp, "fix for gemma 4")."""
        return self.kind == "gemma4"


def resolve(name: str | None) -> PreTokenizerSpec:
    """The split rules for a `tokenizer.ggml.pre` value; unknown names get the default and a warning.

    Args:
        name: the metadata value, or None when the key is missing.
    """
    if not name:
        return PreTokenizerSpec("default", "default", REGEXES["default"], warning=(
            "tokenizer.ggml.pre is missing: using llama.cpp's default pre-tokenizer "
            "(llama.cpp warns that generation quality will be degraded)"))
    kind = NAMES.get(name)
    if kind is None:
        why = UNSUPPORTED.get(name)
        reason = (f"pre-tokenizer {name!r} is not reproduced here ({why})" if why
                  else f"unknown pre-tokenizer {name!r} (llama.cpp refuses to load it)")
        return PreTokenizerSpec(name, "default", REGEXES["default"], warning=(
            f"{reason}: using the default regex, so token ids may differ from llama.cpp"))
    return PreTokenizerSpec(name, kind, REGEXES[kind], name in IGNORE_MERGES, name in ADD_BOS,
                            byte_level=kind not in NOT_BYTE_LEVEL)


def build_pre_tokenizer(spec: PreTokenizerSpec) -> pre_tokenizers.PreTokenizer:
    """The regex splits of `spec` in order, then (byte-level types) GPT-2's byte-to-character map."""
    steps = [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in spec.regexes]
    if spec.byte_level:
        steps.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False, trim_offsets=False))
    return pre_tokenizers.Sequence(steps)
