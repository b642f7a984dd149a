"""The residual stream at the end of a prompt, at every layer, read from the numpy engine.

Each prompt is one user message put through the file's chat template with the generation prompt
(what the model reads before it answers), run in one prefill pass; the engine shows every
layer's output (`l_out-i`, the residual stream after layer i, the op differ's capture point) to
`Model.probe`, and the last position's row is kept: that is where the answer starts.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.glassbox.session import Session
from walkthrough.errors import WalkthroughError
from walkthrough.inspect.chat import chat_tokens, completion_tokens
from walkthrough.inspect.template import choose_template
from walkthrough.inspect.tokenizer import GGUFTokenizer

Progress = Callable[[int, int], None]  # (prompts done, prompts in all); may raise to stop


def prompt_ids(tokenizer: GGUFTokenizer, template: str | None, prompt: str) -> list[int]:
    """A prompt as one user message with the generation prompt (plain text without a template)."""
    messages = [{"role": "user", "content": prompt}]
    if template is None:
        return completion_tokens(tokenizer, messages).ids
    return chat_tokens(tokenizer, template, messages, add_generation_prompt=True).ids


def residuals(model: Model, prompts: list[str], progress: Progress | None = None) -> np.ndarray:
    """[n_prompts, n_layers, d] float64: each prompt's residual stream at its last position, per layer.

    Raises:
        WalkthroughError: a prompt has no tokens, or the template fails.
    """
    tokenizer = GGUFTokenizer.from_gguf(model.file)
    template = choose_template(model.file)
    n_layers, d = model.config.n_layers, model.config.n_embd
    out = np.zeros((len(prompts), n_layers, d))
    seen: dict[str, np.ndarray] = {}

    def probe(name: str, values: np.ndarray) -> None:
        if name.startswith("l_out-"):
            seen[name] = values[-1]  # [d]: the last position

    before, model.probe = model.probe, probe
    try:
        for k, prompt in enumerate(prompts):
            if progress is not None:
                progress(k, len(prompts))
            seen.clear()
            ids = prompt_ids(tokenizer, template, prompt)
            if not ids:
                raise WalkthroughError(f"prompt {k + 1} has no tokens")
            for _ in Session(model).prefill(ids):
                pass
            for i in range(n_layers):
                out[k, i] = seen[f"l_out-{i}"]
    finally:
        model.probe = before
    if progress is not None:
        progress(len(prompts), len(prompts))
    return out
