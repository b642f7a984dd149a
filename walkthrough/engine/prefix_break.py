"""Where a new request stops sharing tokens with what the session holds, and why, in plain words.

The session compares token ids only (`Session.reuse_prefix`). This module
knows where the held tokens came from (the previous request's rendered
messages, then the answer the model generated) and where the new ones come
from, so it can say what broke the shared prefix:

- "edited": a message that both requests send changed (an edit);
- "date": the template printed something that changed by itself between the
  two requests, such as today's date (`strftime_now`; gpt-oss's template
  writes "Current date: ..." into its system message): rendering the old
  messages again no longer gives the old text;
- "rerendered": the same messages rendered differently once more messages
  follow them (Qwen3's template drops the reasoning of turns before the last
  user message; DeepSeek-R1's drops every earlier `<think>` block);
- "prompt_end": the break lies in the generation prompt the template added
  after the last message of the held request: the answer in the history
  starts differently (DeepSeek-R1's generation prompt opens `<think>\n` for
  the model; in the history the answer is written without its reasoning);
- "answer": the template wrote the model's answer differently from the text the
  model generated (its reasoning dropped, whitespace stripped);
- "bytes": the model's answer is not valid UTF-8 text (a token can be part of
  a character); sent back as text, the broken bytes became U+FFFD, which
  tokenizes into other tokens;
- "retokenized": the answer's text is the same, but tokenizing it gives other
  tokens than the ones the model chose (a model may write "hel" + "lo" where
  the tokenizer makes "hello");
- "longer": the new prompt stops inside what is held (nothing differs).

Example: Qwen3's template, the held prompt "<|im_start|>user\nHi<|im_end|>\n
<|im_start|>assistant\n" and the answer the model generated after it,
"<think>\nx\n</think>\n\nHello"; the follow-up sends that answer back as the
assistant's message and a new user message. The template drops the reasoning
of turns before the last user message, so the first differing token is the
answer's first: held "<think>", new "Hello": "answer (its reasoning dropped)".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from walkthrough.inspect.chat import ChatTokens

CAUSES = {
    "edited": "message {n} ({role}) was changed",
    "date": "the template prints something that changed by itself since the last request (today's date)",
    "rerendered": "the template renders the earlier conversation differently now that more messages follow",
    "prompt_end": "the template starts the answer in the history differently from the generation prompt "
                  "it added to the last request",
    "answer": "the template writes the model's answer differently from what the model generated{detail}",
    "bytes": "the model's answer was not valid UTF-8: sent back as text, its broken bytes became \ufffd",
    "retokenized": "the answer's text is the same, but tokenizing it gives other tokens than the model chose",
    "longer": "the new prompt ends inside what the cache holds",
}


@dataclass(frozen=True)
class Held:
    """What a session holds and where it came from: a rendered request, then the answer tokens fed after it."""

    messages: list[dict]
    chat: ChatTokens
    answer: list[int]  # generated ids fed after the prompt (the last choice is not fed)

    @property
    def ids(self) -> list[int]:
        return self.chat.ids + self.answer


@dataclass(frozen=True)
class Break:
    """The first differing token, both sides, where each came from, and the cause."""

    position: int
    held_id: int
    new_id: int
    held_origin: str  # "message 2 (user)", "template text", "the model's answer"
    new_origin: str
    cause: str  # a key of CAUSES
    words: str  # the cause in plain words

    def to_json(self) -> dict:
        return {"position": self.position, "held_id": self.held_id, "new_id": self.new_id,
                "held_origin": self.held_origin, "new_origin": self.new_origin, "cause": self.cause,
                "words": self.words}


def _origin(chat: ChatTokens, messages: list[dict], position: int) -> str:
    message = chat.tokens[position].message
    if message is None:
        return "template text"
    return f"message {message + 1} ({messages[message].get('role', '?')})"


def explain(
    held: Held,
    messages: list[dict],
    chat: ChatTokens,
    position: int,
    *,
    decode: Callable[[list[int]], str],
    render_again: Callable[[list[dict]], ChatTokens],
) -> Break | None:
    """Why the new request `messages` (rendered as `chat`) parts from `held` at token `position`.

    Args:
        decode: token ids -> text (the tokenizer's).
        render_again: messages -> ChatTokens rendered now with the same template (to catch a date).

    Returns:
        None when nothing differs (the new prompt continues or ends inside the held tokens).
    """
    held_ids = held.ids
    if position >= len(held_ids):
        return None
    if position >= len(chat.ids):
        return Break(position, held_ids[position], -1, "", "", "longer", CAUSES["longer"])
    new_id, held_id = chat.ids[position], held_ids[position]
    new_origin = _origin(chat, messages, position)

    def found(cause: str, held_origin: str, **fill: str) -> Break:
        return Break(position, held_id, new_id, held_origin, new_origin, cause, CAUSES[cause].format(**fill))

    n_prompt = len(held.chat.ids)
    if position >= n_prompt:  # inside the answer the model generated
        generated = decode(held.answer)
        if "\ufffd" in generated:  # the tokenizer's decode replaces invalid UTF-8 with U+FFFD
            return found("bytes", "the model's answer")
        start = chat.tokens[n_prompt].start if len(chat.tokens) > n_prompt else len(chat.text)
        if chat.text[start:].startswith(generated):
            return found("retokenized", "the model's answer")
        dropped = "</think>" in generated and "</think>" not in chat.text[start:]
        return found("answer", "the model's answer", detail=" (its reasoning dropped)" if dropped else "")
    held_origin = _origin(held.chat, held.messages, position)
    if render_again(held.messages).text != held.chat.text:
        return found("date", held_origin)
    changed = next((i for i, (a, b) in enumerate(zip(held.messages, messages)) if a != b), None)
    if changed is None and len(messages) < len(held.messages):
        changed = len(messages)  # a message was taken away
    if changed is not None:
        before = [i for i, t in enumerate(held.chat.tokens) if t.message is not None and t.message < changed]
        if position > (before[-1] if before else -1):  # at or after the end of the messages before it
            role = (messages if changed < len(messages) else held.messages)[changed].get("role", "?")
            return found("edited", held_origin, n=str(changed + 1), role=str(role))
    located = [i for i, t in enumerate(held.chat.tokens) if t.message is not None]
    if located and position > located[-1]:
        return found("prompt_end", held_origin)
    return found("rerendered", held_origin)
