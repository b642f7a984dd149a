"""Does a request fit the model's context? One check for the commands and the app, before a pass.

A prompt longer than the context the model declares (`{arch}.context_length`)
was run anyway, and attention grows with the square of its length: about 16,000
tokens on the tiny model's 2,048 ran past 100 s. A request needs a position for
each prompt token and each answer token it may pick; when that is more than the
context, it is refused in one line naming both lengths and what to change. A file
that declares no context length is not checked.

Example: fit_error(2048, 16000, 120, "--max-tokens") ->
    "the prompt has 16,000 tokens, more than the model's context of 2,048 (context_length);
    shorten the prompt"
"""

from __future__ import annotations

from walkthrough.errors import WalkthroughError


class ContextTooSmall(WalkthroughError):
    """The request needs more positions than the model's context has."""


def fit_error(
    context: int | None,
    prompt: int,
    answer: int,
    answer_option: str,
    shorten: str = "shorten the prompt",
) -> str | None:
    """Why a prompt of `prompt` tokens and an answer of `answer` more do not fit `context`, or None.

    Args:
        answer_option: the option that caps the answer where the request comes from (`--max-tokens`,
            `--steps`, `--output-tokens`), named in the advice.
        shorten: how to shorten the prompt there (`bench`: lower --prompt-tokens).
    """
    if not context or context <= 0:
        return None
    if prompt > context:
        return (
            f"the prompt has {prompt:,} tokens, more than the model's context of {context:,} "
            f"(context_length); {shorten}"
        )
    if prompt + answer > context:
        room = context - prompt
        advice = f"lower {answer_option} to {room:,} or {shorten}" if room > 0 else shorten
        return (
            f"the prompt's {prompt:,} tokens and an answer of up to {answer:,} ({answer_option}) "
            f"need {prompt + answer:,} positions, more than the model's context of {context:,} "
            "(context_length); "
            f"{advice}"
        )
    return None


def check_fits(
    context: int | None,
    prompt: int,
    answer: int,
    answer_option: str,
    shorten: str = "shorten the prompt",
) -> None:
    """Raise `ContextTooSmall` with `fit_error`'s line if the request does not fit."""
    reason = fit_error(context, prompt, answer, answer_option, shorten)
    if reason is not None:
        raise ContextTooSmall(reason)
