"""Chat templates for a file that carries none: llama.cpp's built-in ones by name, a few written here.

A base model (or a file whose converter left the template out) has no
`tokenizer.chat_template`. llama.cpp then formats a chat with one of the
templates compiled into `llm_chat_apply_template` (src/llama-chat.cpp), picked by
name (`--chat-template gemma`); `LLAMA_CPP_NAMES` lists the names it knows. The
commonest are written here as Jinja of our own (`BUILTIN`), producing the text
llama.cpp's C++ produces for them: no BOS text (the tokenizer adds BOS when the
file says `add_bos_token`), and the quirks kept (gemma folds a system message
into the first user turn and calls the assistant "model"; llama3 and gemma trim
message text; mistral-v7 and llama2 add no generation prompt). Anything else is
plain text: the messages' text itself, as llama.cpp's completion takes a prompt.

`suggest` says which of them a file's name (or, failing that, its special tokens)
points to. It is a hint shown beside the choice, never applied on its own.

Example: a file named gemma-3-270m.gguf -> suggest(...) == ("gemma", "the file's name says gemma")
"""

from __future__ import annotations

import re
from collections.abc import Callable

# The names llama.cpp's llm_chat_apply_template knows (LLM_CHAT_TEMPLATES in src/llama-chat.cpp of
# llama.cpp as vendored in llama-cpp-python 0.3.36), in its order.
LLAMA_CPP_NAMES = (
    "chatml", "llama2", "llama2-sys", "llama2-sys-bos", "llama2-sys-strip", "mistral-v1", "mistral-v3",
    "mistral-v3-tekken", "mistral-v7", "mistral-v7-tekken", "phi3", "phi4", "falcon3", "zephyr", "monarch",
    "gemma", "orion", "openchat", "vicuna", "vicuna-orca", "deepseek", "deepseek2", "deepseek3",
    "deepseek-ocr", "command-r", "llama3", "chatglm3", "chatglm4", "glmedge", "minicpm", "exaone3",
    "exaone4", "exaone-moe", "rwkv-world", "granite", "granite-4.0", "granite-4.1", "gigachat", "megrez",
    "yandex", "bailing", "bailing-think", "bailing2", "llama4", "smolvlm", "hunyuan-moe", "gpt-oss",
    "hunyuan-dense", "hunyuan-vl", "kimi-k2", "seed_oss", "grok-2", "pangu-embedded", "solar-open",
)

# Each renders `messages` (and `add_generation_prompt`) to the text llama.cpp's C++ writes for the name.
BUILTIN: dict[str, str] = {
    "chatml": (
        "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
    ),
    "gemma": (
        "{% set ns = namespace(system='') %}{% for m in messages %}"
        "{% if m['role'] == 'system' %}{% set ns.system = ns.system + m['content'] | trim %}"
        "{% else %}{% set role = 'model' if m['role'] == 'assistant' else m['role'] %}"
        "{{ '<start_of_turn>' + role + '\\n' }}"
        "{% if ns.system and role != 'model' %}{{ ns.system + '\\n\\n' }}{% set ns.system = '' %}{% endif %}"
        "{{ m['content'] | trim + '<end_of_turn>\\n' }}{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
    ),
    "llama3": (
        "{% for m in messages %}{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\\n\\n' "
        "+ m['content'] | trim + '<|eot_id|>' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
    ),
    "llama2": (  # llama.cpp's plain "llama2": a system message is the first user turn's first line
        "{% set ns = namespace(inside=true) %}{{ '[INST] ' }}{% for m in messages %}"
        "{% if not ns.inside %}{% set ns.inside = true %}{{ '[INST] ' }}{% endif %}"
        "{% if m['role'] == 'system' %}{{ m['content'] + '\\n' }}"
        "{% elif m['role'] == 'user' %}{{ m['content'] + ' [/INST]' }}"
        "{% else %}{{ m['content'] + '</s>' }}{% set ns.inside = false %}{% endif %}{% endfor %}"
    ),
    "mistral-v7": (
        "{% for m in messages %}{% if m['role'] == 'system' %}{{ '[SYSTEM_PROMPT] ' + m['content'] "
        "+ '[/SYSTEM_PROMPT]' }}{% elif m['role'] == 'user' %}{{ '[INST] ' + m['content'] + '[/INST]' }}"
        "{% else %}{{ ' ' + m['content'] + '</s>' }}{% endif %}{% endfor %}"
    ),
    "phi3": (
        "{% for m in messages %}{{ '<|' + m['role'] + '|>\\n' + m['content'] + '<|end|>\\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
    ),
    "zephyr": (
        "{% for m in messages %}{{ '<|' + m['role'] + '|>\\n' + m['content'] + '<|endoftext|>\\n' }}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
    ),
    "deepseek3": (
        "{% for m in messages %}{% if m['role'] == 'system' %}{{ m['content'] + '\\n\\n' }}"
        "{% elif m['role'] == 'user' %}{{ '<｜User｜>' + m['content'] }}"
        "{% elif m['role'] == 'assistant' %}{{ '<｜Assistant｜>' + m['content'] + '<｜end▁of▁sentence｜>' }}"
        "{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<｜Assistant｜>' }}{% endif %}"
    ),
}

# What in a file's name points to a template (the name squeezed: lower case, no separators), first match.
_BY_NAME = (
    ("gemma", "gemma"), ("llama3", "llama3"), ("llama2", "llama2"), ("phi3", "phi3"),
    ("mistral", "mistral-v7"), ("mixtral", "mistral-v7"), ("deepseek", "deepseek3"), ("zephyr", "zephyr"),
    ("qwen", "chatml"), ("smollm", "chatml"), ("hermes", "chatml"), ("chatml", "chatml"),
)
# A special token only one template family uses (llama.cpp's own guess reads these in a template's text).
_BY_TOKEN = (
    ("<start_of_turn>", "gemma"), ("<|start_header_id|>", "llama3"), ("<|im_start|>", "chatml"),
    ("[SYSTEM_PROMPT]", "mistral-v7"), ("<｜Assistant｜>", "deepseek3"), ("<|assistant|>", "phi3"),
)


def squeeze(name: str) -> str:
    """Lower case without separators: "Llama-3.2_1B" -> "llama321b"."""
    return re.sub(r"[\s._-]+", "", name.lower())


def suggest(names: list[str], has_token: Callable[[str], bool] | None = None) -> tuple[str, str] | None:
    """The built-in template a file's names point to, and why; None when nothing does.

    Args:
        names: the file name, `general.name`, `general.basename`, `general.architecture` (any may be "").
        has_token: whether the vocabulary holds a token with this text (consulted when no name matches).

    Example: suggest(["gemma-3-270m.gguf"]) -> ("gemma", "the file's name says gemma")
    """
    for name in names:
        squeezed = squeeze(name or "")
        for needle, template in _BY_NAME:
            if needle in squeezed:
                return template, f"the file's name says {needle}"
    if has_token is not None:
        for token, template in _BY_TOKEN:
            if has_token(token):
                return template, f"its vocabulary has {token}"
    return None


def choices(suggested: str | None) -> tuple[str, ...]:
    """The built-in templates to offer, the suggested one first."""
    rest = tuple(name for name in BUILTIN if name != suggested)
    return (suggested, *rest) if suggested in BUILTIN else rest
