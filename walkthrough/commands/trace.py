"""`walkthrough trace [MODEL] (--prompt TEXT | --messages F.json | --ids 1,2,3)`: run one request, print its passes.

The prompt is prefilled in chunks (`--chunk`, llama.cpp's default physical
batch of 512 tokens), then `--steps N` tokens are generated (`Session.generate`,
the same count as the app's `--max-tokens`): the last prefill pass picks the
first, and each of the N-1 decode passes feeds the previous choice and picks the
next, unless an end-of-turn token comes first.

Human output is one row per pass (phase, positions, tokens fed, experts per
layer, bytes read, KV cache size, top candidates, chosen token). `--json`
prints JSON Lines instead, one `Step.to_json()` record per pass; `--logits`
adds each pass's logits, one row per position (every prompt position for
prefill passes), so a script can compare them with another engine. Each JSON
record also says how surprised the model was by each token it fed
(`surprisal`, nats: -log p of the token given all before it; prefill passes
compute every position's logits for it), by the token it chose
(`chosen_surprisal`), and the `loss` so far: loss and perplexity of the
request and of the answer (`walkthrough.engine.surprisal.run_summary`).

`--arrows LAYER:HEAD` ends with the last token's query and the key it weighted most in that layer and head
as two arrows with their score (`trace_arrows`, the attention view's `v`).

`--speculate lookup|mtp|draft` decodes by speculative decoding instead
(`walkthrough.engine.serving.speculative`): each row after the prompt is one
verification pass over the pending token and up to `--draft-max` drafts
(prompt lookup, the file's MTP block, or `--draft MODEL`), showing the
drafts, how many the model accepted and what the drafter read; the tokens are
those of plain decoding. A summary of the rounds follows the table.

`--prompt` is one user message and `--messages` a JSON list of messages, both
rendered with the model's chat template (generation prompt added) and tokenized
as llama.cpp's chat path does, except that text typed in a message never becomes
special tokens (`walkthrough.inspect.chat`); `--ids` feeds raw token ids and
skips the template. `--raw` (and a file without a chat template, with a warning)
makes the text itself the prompt, tokenized as llama.cpp's completion does: BOS
first when the file says `add_bos_token`, special-token text read as special
(`chat.completion_tokens`); `--template-name` picks one of the file's named
templates or one of llama.cpp's built-in ones (`inspect.builtin_templates`). Sampling defaults to greedy (temperature 0)
so a trace is reproducible; the other knobs default to llama.cpp's.

Turns: a `--messages` file with several user messages is played as a chat
client plays it, one request per user message, in one session that keeps its
KV cache: each request re-sends the conversation so far (an assistant
message the file gives is sent as given; where the file gives none, the
model's own answer is), and only what follows the longest common token prefix
is computed (`engine.turns`). `--four-calls` plays the scripted sequence
instead: the request, a follow-up, an edit of its question, a new chat with
the same system prompt (`walkthrough/assets/four_calls.json`). The first pass
of every request carries `reused` (tokens taken from the cache) and `reuse`
(why reuse stopped there); after each request a line says what was reused,
where and why it broke, and what the request cost. `--measure` also runs each
request from an empty cache in this process and the first one in a fresh
process (a cold start), so the figures with and without reuse, cold and
warm, are all measured. With `--json`, those summaries are JSON lines too,
with a "turn", "summary" or "start" key instead of "phase".
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import partial

from walkthrough.commands.common import (
    add_engine_argument,
    add_memory_argument,
    add_model_argument,
    add_rpc_arguments,
    memory_report,
    open_model,
    warn,
)
from walkthrough.commands.options import PROBABILITY, SEED, TEMPERATURE, finite
from walkthrough.engine.knobs import DEFAULT_DRAFT_MAX

DEFAULT_CHUNK = 512  # llama.cpp's default n_ubatch (common/common.h): tokens per prefill pass
DEFAULT_STEPS = 16


def add_parser(subparsers) -> None:
    """Register `trace` and its options."""
    from walkthrough.engine.knobs import LLAMA_CPP_DEFAULTS

    p = subparsers.add_parser(
        "trace",
        help="run one request through an engine and print every pass (prefill chunks, decoded tokens)",
        description="Run one request through the numpy engine (or llama.cpp, --engine): prefill in chunks, "
        "then decode. One row (or one JSON line) per forward pass.",
    )
    add_model_argument(p)
    add_engine_argument(p)
    add_rpc_arguments(p)
    add_memory_argument(p)
    add_request_arguments(p, required=True)
    p.add_argument("--steps", type=int, default=DEFAULT_STEPS, metavar="N",
                   help=f"tokens to generate (default {DEFAULT_STEPS}; fewer if an end-of-turn token comes)")
    p.add_argument("--temperature", type=TEMPERATURE, default=0.0, metavar="T", help="0 = greedy (default)")
    p.add_argument("--top-k", type=int, default=LLAMA_CPP_DEFAULTS["top_k"], metavar="K",
                   help="keep the K most likely tokens, 0 = all (default %(default)s)")
    p.add_argument("--top-p", type=PROBABILITY, default=LLAMA_CPP_DEFAULTS["top_p"], metavar="P",
                   help="keep the smallest set with probability >= P (default %(default)s)")
    p.add_argument("--min-p", type=finite(0.0), default=LLAMA_CPP_DEFAULTS["min_p"], metavar="P",
                   help="drop tokens below P x the best one's probability (default %(default)s)")
    p.add_argument("--seed", type=SEED, default=0, metavar="S", help="seed of the sampler's draws (default 0)")
    p.add_argument("--chunk", type=int, default=DEFAULT_CHUNK, metavar="N",
                   help=f"prompt tokens per prefill pass (default {DEFAULT_CHUNK})")
    p.add_argument("--kv-type", default="f16", choices=["f16", "q8_0", "q4_0", "f32"],
                   help="KV cache type (default f16, as llama.cpp)")
    p.add_argument("--exact-products", action="store_true",
                   help="numpy engine: multiply as ggml's CPU kernels do, for llama.cpp's logits bit for bit "
                   "(one thread, F32 or F16 cache, flash attention off, the same --chunk; 10 to 25 times slower)")
    p.add_argument("--four-calls", action="store_true",
                   help="play the scripted four calls from the request: follow-up, edit, new chat (needs a template)")
    p.add_argument("--measure", action="store_true",
                   help="also time each request without reuse, and the first from a cold process")
    p.add_argument("--speculate", choices=["lookup", "mtp", "draft"], metavar="lookup|mtp|draft",
                   help="speculative decoding: draft with prompt lookup, the file's MTP block, or --draft MODEL")
    p.add_argument("--draft-max", type=int, default=DEFAULT_DRAFT_MAX, metavar="K",
                   help=f"tokens drafted per round (default {DEFAULT_DRAFT_MAX}, llama.cpp's)")
    p.add_argument("--draft", metavar="MODEL", help="a smaller GGUF with the same vocabulary (implies --speculate draft)")
    p.add_argument("--rates", metavar="3,12,60",
                   help="also say how long the answer takes at these decode rates (tokens/s) and at reading speed")
    p.add_argument("--arrows", metavar="LAYER:HEAD",
                   help="after the run, the last token's query and the key it weighted most in that layer and "
                   "head, as two arrows with their score (numpy engine)")
    p.add_argument("--json", action="store_true", help="JSON Lines: one record per pass")
    p.add_argument("--logits", action="store_true",
                   help="add each pass's logits, one row per position (implies --json)")


def add_request_arguments(p: argparse.ArgumentParser, *, required: bool, default: str = "") -> None:
    """--prompt / --messages / --ids, one of them (`prompt_ids` reads them); `default` says what none means."""
    source = p.add_mutually_exclusive_group(required=required)
    source.add_argument("--prompt", metavar="TEXT", help="one user message, rendered with the chat template")
    source.add_argument("--messages", metavar="F.json", help=f"a JSON list of {{role, content}} messages{default}")
    source.add_argument("--ids", metavar="1,2,3", help="raw token ids, comma-separated (no template)")
    p.add_argument("--raw", action="store_true",
                   help="plain text, no chat template: the text is the prompt, tokenized as llama.cpp's "
                   "completion does (BOS as the file says); the default for a file without a template")
    p.add_argument("--template-name", metavar="NAME",
                   help="one of the file's named templates, or a built-in one (chatml, gemma, llama3, ...)")


def run(args: argparse.Namespace) -> int:
    """Resolve the model, build the prompt ids, run the request, print each pass as it ends."""
    from walkthrough.costs.race_rates import parse_rates
    from walkthrough.engine.context_fit import check_fits
    from walkthrough.engine.engines import load_model, new_session
    from walkthrough.engine.sampler import Sampler, SamplerSettings
    from walkthrough.errors import WalkthroughError
    from walkthrough.render.race_view import rate_lines

    if args.steps < 1:
        raise WalkthroughError(f"--steps {args.steps}: give at least 1 token to generate")
    if args.chunk < 1:
        raise WalkthroughError(f"--chunk {args.chunk}: a prefill pass needs at least 1 token")
    speculate = args.speculate or ("draft" if args.draft else None)
    if args.draft_max < 1:
        raise WalkthroughError(f"--draft-max {args.draft_max}: draft at least 1 token per round")
    if args.draft and speculate != "draft":
        raise WalkthroughError(f"--draft goes with --speculate draft, not --speculate {speculate}")
    if args.engine != "numpy" and (args.measure or speculate):
        raise WalkthroughError(f"--{'measure' if args.measure else 'speculate'} runs on the numpy engine only; "
                               "leave out --engine llama.cpp (for llama.cpp's speed: walkthrough bench)")
    if args.exact_products and args.engine != "numpy":
        raise WalkthroughError("--exact-products is the numpy engine's: leave out --engine llama.cpp")
    if args.arrows is not None and (args.engine != "numpy" or speculate or args.four_calls or args.json
                                    or args.logits):
        raise WalkthroughError("--arrows draws one plain numpy run as text: leave out --engine, --speculate, "
                               "--four-calls, --json and --logits")
    f = open_model(args.model, runs="trace")
    # the model first: a file the engine cannot run is refused before its vocabulary is built (a second
    # for 128k tokens)
    model = load_model(args.engine, f, max_memory=args.max_memory, rpc=args.rpc, split=args.split,
                       exact_products=args.exact_products)
    tok = tokenizer(f, required=args.ids is None)
    settings = SamplerSettings(args.temperature, args.top_k, args.top_p, args.min_p, args.seed)
    as_json = args.json or args.logits
    piece = token_pieces(f, tok)
    source = None if args.ids is not None else request_template(f, args)

    rates = parse_rates(args.rates) if args.rates is not None else None
    arrows, kept_steps = None, []  # --arrows: (layer, head), and the passes kept to draw them from
    if args.arrows is not None:
        from walkthrough.commands.trace_arrows import parse_arrows

        arrows = parse_arrows(args.arrows, model.config.n_layers, model.config.n_head, model.config.mixers)

    def end_with_arrows(code: int) -> int:
        if arrows is not None and code == 0:
            from walkthrough.commands.trace_arrows import print_arrows

            print_arrows(kept_steps, model.config, *arrows, sys.stdout)
        return code

    def printer_for(ids: list[int]):
        if arrows is None:
            return _printer_for(ids)
        base = _printer_for(ids)
        return lambda passes, *a, **k: base((kept_steps.append(s) or s for s in passes), *a, **k)

    def _printer_for(ids: list[int]):
        """`_print`, its table headed by what the engine will hold for this request (a warning on stderr
        when that will not fit the free memory), then with --rates the answer's time at each rate."""
        memory = memory_report(model, len(ids) + args.steps, args.chunk, len(ids))
        if rates is None or as_json:
            return partial(_print, memory=None if as_json else memory)

        def printer(passes, model, piece, **options) -> None:
            answer: list[int] = []

            def kept():
                for step in passes:
                    answer.extend(step.generated)
                    yield step

            _print(kept(), model, piece, memory=memory, **options)
            for line in rate_lines(rates, "".join(piece(t) for t in answer), len(answer)):
                print(line)

        return printer
    if speculate:
        if args.four_calls:
            raise WalkthroughError("--four-calls plays turns; speculative decoding (--speculate) runs one request")
        ids = prompt_ids(f, tok, args, source)  # every message rendered as one request
        model.check_ids(ids)
        check_fits(model.card.context_length, len(ids), args.steps, "--steps")
        passes = _speculative_passes(model, ids, Sampler(settings), args, speculate)
        printer_for(ids)(passes(), model, piece, as_json=as_json, logits=args.logits)
        return 0
    if args.ids is not None or source is None:
        if args.four_calls:
            raise WalkthroughError("--four-calls plays chat turns through a template; give --template-name NAME"
                                   if source is None and args.ids is None else
                                   "--four-calls needs messages (--prompt or --messages), not --ids")
        ids = prompt_ids(f, tok, args, source)
        model.check_ids(ids)
        check_fits(model.card.context_length, len(ids), args.steps, "--steps")
        session = new_session(model, kv_type=args.kv_type, auto_checkpoints=False, n_ctx=len(ids) + args.steps,
                              measure_surprisal=as_json, attention_rows=arrows is not None)

        sampler = Sampler(settings)

        passes = session.generate(ids, sampler, args.steps, chunk=args.chunk, all_logits=args.logits)
        printer_for(ids)(passes, model, piece, as_json=as_json, logits=args.logits)
        return end_with_arrows(0)
    from walkthrough.commands.trace_turns import play

    printer = printer_for(prompt_ids(f, tok, args, source))  # sized by the first request
    return end_with_arrows(play(f, model, tok, settings, args, source, as_json=as_json, printer=printer,
                                piece=piece))


def _speculative_passes(model, ids: list[int], sampler, args: argparse.Namespace, kind: str):
    """The passes of a speculative run: prefill chunks, then one verification pass per round."""
    from walkthrough.engine.glassbox.session import Session
    from walkthrough.engine.serving import speculative
    from walkthrough.inspect.locate import model_path

    draft = model_path(args.draft) if args.draft else None
    drafter = speculative.make_drafter(kind, model, draft=draft, kv_type=args.kv_type)
    session = Session(model, kv_type=args.kv_type, keep_hidden=drafter.needs_hidden)

    def passes():
        last = None
        for last in speculative.prefill(session, drafter, ids, chunk=args.chunk, sampler=sampler,
                                           all_logits=args.logits):
            yield last
        if not last.stopped:
            yield from speculative.speculate(session, sampler, drafter, args.steps - 1, k=args.draft_max)

    return passes


def _print(passes, model, piece, *, as_json: bool, logits: bool, header: bool = True,
           memory: str | None = None) -> None:
    if as_json:
        from walkthrough.engine.surprisal import run_summary

        seen = []
        for step in passes:
            record = step.to_json(logits=logits)
            step.all_logits = None  # printed already: a long prompt's rows would pile up
            seen.append(step)
            record["loss"] = run_summary(seen)
            record["chosen_piece"] = None if step.chosen is None else piece(step.chosen)
            for entry in record["top"]:
                entry["piece"] = piece(entry["id"])
            sys.stdout.write(json.dumps(record, allow_nan=False) + "\n")
            sys.stdout.flush()
        return
    from walkthrough.commands.trace_view import print_trace

    print_trace(model, passes, piece, out=sys.stdout, header=header, memory=memory)


def tokenizer(f, *, required: bool):
    """The file's tokenizer; None if it cannot be built and only ids are needed (pieces fall back to stored text)."""
    from walkthrough.errors import WalkthroughError
    from walkthrough.inspect.tokenizer import GGUFTokenizer

    try:
        return GGUFTokenizer.from_gguf(f)
    except WalkthroughError:
        if required:
            raise
        return None


def request_template(f, args: argparse.Namespace) -> str | None:
    """The chat template the request goes through (`--template-name`, else the file's), or None for plain
    text: `--raw`, or a file without a template (said in one warning line, with what else there is)."""
    from walkthrough.errors import WalkthroughError
    from walkthrough.inspect.template import PLAIN, choose_template, no_template_advice

    name = getattr(args, "template_name", None)
    if getattr(args, "raw", False):
        if name is not None:
            raise WalkthroughError("--raw uses no template; drop --template-name")
        name = PLAIN
    source = choose_template(f, name, where=f.path.name)
    if source is None and name is None:
        warn(f"{f.path.name} has no chat template: {no_template_advice(f)}")
    return source


def prompt_ids(f, tok, args: argparse.Namespace, source: str | None | bool = True) -> list[int]:
    """Token ids of the request: --ids as given, or --prompt / --messages through the chat template
    `source` (True: the one `request_template` picks), or as plain text when it is None."""
    from walkthrough.errors import WalkthroughError

    if args.ids is not None:
        try:
            ids = [int(x) for x in args.ids.replace(" ", "").split(",") if x]
        except ValueError:
            raise WalkthroughError(f"--ids {args.ids!r}: give comma-separated whole numbers, e.g. 1,2,3") from None
        if not ids:
            raise WalkthroughError("--ids is empty; give at least one token id")
        return ids
    from walkthrough.inspect.chat import chat_tokens, completion_tokens
    from walkthrough.inspect.template import load_messages

    messages = load_messages(args.messages) if args.messages else [{"role": "user", "content": args.prompt}]
    if source is True:
        source = request_template(f, args)
    if source is None:
        chat = completion_tokens(tok, messages)
    else:
        chat = chat_tokens(tok, source, messages, add_generation_prompt=True,
                           origin=f"chat template of {f.path.name}")
    for warning in chat.warnings:
        warn(warning)
    ids = chat.ids
    if not ids:
        raise WalkthroughError("the rendered prompt has no tokens")
    return ids


def token_pieces(f, tok):
    """id -> display text (raw; views make it visible): the tokenizer's piece, else the stored token text."""
    if tok is not None:
        return lambda i: tok.piece(i) if 0 <= i < tok.vocab_size else f"<{i}>"
    tokens = f.get("tokenizer.ggml.tokens")
    if isinstance(tokens, list):
        return lambda i: tokens[i] if 0 <= i < len(tokens) else f"<{i}>"
    return lambda i: f"<{i}>"
