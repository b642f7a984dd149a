"""Train the tiny qwen2moe model on the synthetic corpus (PyTorch, CPU, fixed seeds).

Usage: python assets/train.py [--steps N] [--examples N] [--out-dir DIR]
Writes DIR/tokenizer.json and DIR/model.pt (config + weights); `export_gguf.py` turns them into the
GGUF. The loss is next-token cross-entropy on the answer (weight 1) and on the prompt (weight
PROMPT_WEIGHT, which teaches record structure and line counting; each step scores a random
PROMPT_SAMPLE share of the prompt positions, which keeps the output head's cost down), plus the
load-balancing loss.
"""

from __future__ import annotations

import argparse
import math
import random
import re
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))
from corpus import END_OF_TEXT, TRAIN_SEED, make_examples, render_chat
from tiny_moe import Config, TinyMoE, balance_loss
from train_tokenizer import train_tokenizer

TORCH_SEED = 1234
VOCAB_SIZE = 4096
PROMPT_WEIGHT = 0.2
PROMPT_SAMPLE = 0.25  # share of prompt positions scored each step (the output head is costly)
KEY_WEIGHT = 4.0
BALANCE_WEIGHT = 0.02
DEFAULT_OUT = Path(__file__).parent / "build"
DEFAULT_EXAMPLES = 40000
DEFAULT_STEPS = 3000
DEFAULT_BATCH = 16
DEFAULT_LR = 3e-3


def key_spans(answer: str) -> list[tuple[int, int]]:
    """Character spans of the answer's decisions and copies: each drug of the checked list and its
    yes/no, the Yes/No, each medication named after "interacts with", each cited line.

    Example: "Checked lines 8-8: 8 b yes. Yes, a interacts with b (line 8): ..."
    -> [(21, 22), (23, 26), (28, 31), (50, 51), (58, 59)].
    """
    spans = [m.span() for m in re.finditer(r"\b(?:yes|no|Yes|No)\b", answer)]
    spans += [m.span(1) for m in re.finditer(r"\d+ ([^,.:]+?) (?:yes|no)\b", answer)]
    spans += [m.span(1) for m in re.finditer(r"interacts with (.+?) \(line", answer)]
    spans += [m.span(1) for m in re.finditer(r"\(line (\d+)\)", answer)]
    return sorted(spans)


def encode_examples(tok, examples) -> list[tuple[list[int], list[float]]]:
    """Token ids of prompt + answer and per-token loss weights for the *next*-token targets.

    Answer tokens weigh 1, those inside `key_spans` KEY_WEIGHT (the one-token decisions would
    otherwise drown among the tokens copied from the table), prompt tokens PROMPT_WEIGHT.
    """
    prompts = tok.encode_batch([render_chat(e.messages) for e in examples])
    answers = tok.encode_batch([e.answer for e in examples])
    out = []
    for e, p, a in zip(examples, prompts, answers):
        ids = p.ids + a.ids
        spans = key_spans(e.answer)
        answer_w = [KEY_WEIGHT if any(start < e1 and end > s0 for s0, e1 in spans) else 1.0
                    for start, end in a.offsets]
        weights = [PROMPT_WEIGHT] * (len(p.ids) - 1) + answer_w  # target i+1 of input i
        out.append((ids, weights))
    return out


def epoch_batches(lengths: list[int], batch: int, rng: random.Random) -> list[list[int]]:
    """One shuffled pass as batches of similar length (less padding): sorted within pools of
    32 batches, then the batches shuffled. A tail shorter than `batch` is dropped."""
    order = list(range(len(lengths)))
    rng.shuffle(order)
    pool = batch * 32
    batches = []
    for at in range(0, len(order), pool):
        chunk = sorted(order[at : at + pool], key=lambda i: lengths[i])
        batches += [chunk[k : k + batch] for k in range(0, len(chunk) - batch + 1, batch)]
    rng.shuffle(batches)
    return batches


def make_batch(rows, pad_id: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pad rows to one length: inputs [B, T], targets [B, T], weights [B, T]."""
    t = max(len(ids) for ids, _ in rows) - 1
    inp = torch.full((len(rows), t), pad_id, dtype=torch.long)
    tgt = torch.full((len(rows), t), pad_id, dtype=torch.long)
    wts = torch.zeros((len(rows), t))
    for i, (ids, w) in enumerate(rows):
        n = len(ids) - 1
        inp[i, :n] = torch.tensor(ids[:-1])
        tgt[i, :n] = torch.tensor(ids[1:])
        wts[i, :n] = torch.tensor(w)
    return inp, tgt, wts


def sample_prompt_positions(wts: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Keep each prompt position (weight PROMPT_WEIGHT) with probability PROMPT_SAMPLE, scaled
    up so its expected weight is unchanged; answer positions all stay. [B, T] -> [B, T]."""
    prompt = wts == PROMPT_WEIGHT
    keep = torch.rand(wts.shape, generator=gen) < PROMPT_SAMPLE
    return torch.where(prompt, torch.where(keep, wts / PROMPT_SAMPLE, 0.0), wts)


def train(out_dir: Path, n_examples: int, steps: int, batch: int, lr: float, threads: int,
          config_overrides: dict | None = None, log_every: int = 50, save_every: int = 0) -> dict:
    """Build tokenizer and model from fixed seeds and train; returns a summary dict."""
    torch.set_num_threads(threads)
    torch.set_flush_denormal(True)  # decaying optimizer moments must not turn into slow denormals
    torch.manual_seed(TORCH_SEED)
    rng = random.Random(TORCH_SEED)
    gen = torch.Generator().manual_seed(TORCH_SEED)
    t0 = time.time()
    examples = make_examples(TRAIN_SEED, n_examples)
    tok = train_tokenizer([render_chat(e.messages) + e.answer for e in examples], VOCAB_SIZE,
                          out_dir / "tokenizer.json")
    data = encode_examples(tok, examples)
    pad_id = tok.token_to_id(END_OF_TEXT)
    config = Config(n_vocab=tok.get_vocab_size(), **(config_overrides or {}))
    model = TinyMoE(config)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05},
                             {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=(0.9, 0.98))
    warmup = max(1, min(200, steps // 10))
    print(f"{len(data)} examples, vocab {config.n_vocab}, "
          f"{sum(p.numel() for p in model.parameters())} parameters, setup {time.time() - t0:.1f}s",
          flush=True)
    lengths = [len(ids) for ids, _ in data]
    queue: list[list[int]] = []
    ce_avg = bal_avg = None
    t_train = time.time()
    for step in range(1, steps + 1):
        if not queue:
            queue = epoch_batches(lengths, batch, rng)
        rows = [data[i] for i in queue.pop()]
        inp, tgt, wts = make_batch(rows, pad_id)
        wts = sample_prompt_positions(wts, gen)
        scale = step / warmup if step <= warmup else 0.5 * (
            1 + math.cos(math.pi * (step - warmup) / max(1, steps - warmup)))
        for g in opt.param_groups:
            g["lr"] = lr * (0.05 + 0.95 * scale)
        hidden, routes = model.hidden(inp)  # [B, T, d]
        scored = wts > 0  # [B, T]
        logits = model.head(hidden[scored])  # [N, V], only where the loss looks
        ce = F.cross_entropy(logits, tgt[scored], reduction="none")
        ce = (ce * wts[scored]).sum() / wts.sum()
        mask = (inp != pad_id).reshape(-1).float()
        bal = sum(balance_loss(p, i, mask, config.n_expert) for p, i in routes) / len(routes)
        loss = ce + BALANCE_WEIGHT * bal
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        ce_avg = ce.item() if ce_avg is None else 0.95 * ce_avg + 0.05 * ce.item()
        bal_avg = bal.item() if bal_avg is None else 0.95 * bal_avg + 0.05 * bal.item()
        if step % log_every == 0 or step == steps:
            print(f"step {step}/{steps} loss {ce_avg:.4f} balance {bal_avg:.3f} "
                  f"{time.time() - t_train:.0f}s", flush=True)
        if save_every and step % save_every == 0 and step < steps:
            save(model, out_dir, {"steps": step, "batch": batch, "examples": n_examples,
                                  "final_loss": ce_avg, "balance": bal_avg,
                                  "train_seconds": time.time() - t_train})
    summary = {"steps": steps, "batch": batch, "examples": n_examples, "final_loss": ce_avg,
               "balance": bal_avg, "train_seconds": time.time() - t_train}
    save(model, out_dir, summary)
    return summary


def save(model: TinyMoE, out_dir: Path, summary: dict) -> None:
    """Write out_dir/model.pt: config, weights and the training summary."""
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.save({"config": model.c.to_dict(), "state": model.state_dict(), "summary": summary},
               out_dir / "model.pt")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-dir", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--examples", type=int, default=DEFAULT_EXAMPLES)
    ap.add_argument("--steps", type=int, default=DEFAULT_STEPS)
    ap.add_argument("--batch", type=int, default=DEFAULT_BATCH)
    ap.add_argument("--lr", type=float, default=DEFAULT_LR)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--save-every", type=int, default=0, help="also save every N steps")
    args = ap.parse_args(argv)
    summary = train(args.out_dir, args.examples, args.steps, args.batch, args.lr, args.threads,
                    log_every=args.log_every, save_every=args.save_every)
    print(summary)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
