"""What the Speculate stage draws: rounds of drafts as rows, and the figures they add up to.

Presentation only: every figure comes from the verification passes' `Step`
records and `walkthrough.engine.serving.rounds.round_stats`; the model card gives plain
decoding's bytes per token and the experts one token wakes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rich.console import Group
from rich.table import Table
from rich.text import Text

from walkthrough.costs.measured import measured_here
from walkthrough.engine.serving.rounds import round_stats, weight_bytes
from walkthrough.engine.steps import Step
from walkthrough.render.format import bar, human_bytes
from walkthrough.textsafe import token_label
from walkthrough.words import count

PIECE_CHARS = 10  # longest token text in a cell


def _piece(piece: Callable[[int], str], token: int, style: str = "") -> Text:
    return token_label(piece(token), style, PIECE_CHARS)


def drafts_text(step: Step, piece: Callable[[int], str]) -> Text:
    """The round's drafts: accepted ones in green with a check, rejected ones struck through after a cross."""
    d = step.draft
    out = Text()
    if not d.tokens:
        return Text("no draft", style="dim")
    for i, token in enumerate(d.tokens):
        if i:
            out.append(" ")
        accepted = i < d.accepted
        out.append("\u2713" if accepted else "\u2717", style="green" if accepted else "red")
        out.append_text(_piece(piece, token, "green" if accepted else "strike dim"))
    return out


def rounds_table(rounds: Sequence[Step], piece: Callable[[int], str], shown: int) -> Table:
    """The last `shown` rounds, one row each: position, token fed, drafts, tokens gained, weight bytes, time."""
    table = Table(box=None, padding=(0, 1), show_edge=False, expand=False)
    for name, justify in (("#", "right"), ("pos", "right"), ("fed", "left"), ("drafts", "left"),
                          ("+tok", "right"), ("read", "right"), ("ms", "right")):
        table.add_column(name, justify=justify, no_wrap=True, overflow="ellipsis")
    start = max(0, len(rounds) - shown)
    for number, step in enumerate(rounds[start:], start=start + 1):
        d = step.draft
        read = weight_bytes(step.bytes_read) + weight_bytes(d.bytes_read) + weight_bytes(d.replay)
        table.add_row(str(number), str(step.start), _piece(piece, step.input_ids[0], "reverse"),
                      drafts_text(step, piece), str(len(step.generated)), human_bytes(read),
                      f"{(step.seconds + d.seconds) * 1000:.0f}")
    return table


def figures(rounds: Sequence[Step], card) -> Group:
    """Acceptance, tokens per round (measured and expected at that alpha), bytes per token, experts, time."""
    stats = round_stats(rounds)
    lines = [Text.assemble(("acceptance ", "bold"), f"alpha = {stats.accepted}/{stats.drafted} drafts = ",
                           (f"{stats.alpha:.2f}", "bold"), "  ", bar(stats.alpha, 10))]
    lines.append(Text.assemble(("tokens per round ", "bold"), (f"{stats.tokens_per_round:.2f}", "bold"),
                               f" measured ({stats.tokens} in {count(stats.rounds, 'pass', 'passes')}), "
                               f"{stats.expected_per_round:.2f} expected at that alpha: (1 - a^(k+1)) / (1 - a)"))
    plain = card.bytes_per_token
    versus = f" = {stats.bytes_per_token / plain:.2f}x plain decoding's {human_bytes(plain)}" if plain else ""
    lines.append(Text.assemble(("weights read per token ", "bold"), human_bytes(round(stats.bytes_per_token)),
                               versus, ((f"  (drafter {human_bytes(stats.drafter_bytes)}, "
                                         f"replays {human_bytes(stats.replay_bytes)} in all)"), "dim")))
    if stats.experts_woken is not None:
        lines.append(Text.assemble(
            ("experts woken per layer ", "bold"), f"{stats.experts_woken:.1f} of {card.n_experts} by a verification "
            f"pass (one decoded token wakes {card.n_experts_used}): the k + 1 tokens read their union"))
    lines.append(Text.assemble(("time per round ", "bold"), f"{stats.seconds_per_round * 1000:.0f} ms",
                               (f" (drafting and verification, {measured_here(rounds[0].engine)})", "dim")))
    return Group(*lines)


def summary_text(rounds: Sequence[Step], drafter: str, k: int, finished: bool) -> str:
    """The Speculate stage's run in one line for the Summary: drafter and k, rounds, acceptance, tokens per
    round, weights read per token, time per round.

    Example: "lookup drafter, k = 4: 3 passes, 5 tokens, alpha = 2/6 drafts = 0.33, 1.67 tokens per round,
    1.9 MiB of weights read per token, 41 ms per round measured here (numpy)"
    """
    stats = round_stats(rounds)
    head = f"{drafter} drafter, k = {k}: "
    if not stats.rounds:
        return head + "no round run yet"
    return (head + f"{count(stats.rounds, 'pass', 'passes')}, {count(stats.tokens, 'token')}"
            f"{' (finished)' if finished else ''}, alpha = {stats.accepted}/{stats.drafted} drafts = "
            f"{stats.alpha:.2f}, {stats.tokens_per_round:.2f} tokens per round, "
            f"{human_bytes(round(stats.bytes_per_token))} of weights read per token, "
            f"{stats.seconds_per_round * 1000:.0f} ms per round {measured_here(rounds[0].engine)}")
