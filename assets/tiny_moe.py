"""The tiny qwen2moe model in PyTorch, written to compute exactly what llama.cpp's qwen2moe graph does.

Per layer (llama.cpp `src/models/qwen2moe.cpp`): RMSNorm -> attention with q/k/v biases, NEOX RoPE
and grouped KV heads (query head h reads KV head h // (n_head / n_head_kv)) -> residual; RMSNorm ->
softmax router, top-k experts weighted by their softmax probabilities (not renormalised), each a
SwiGLU FFN, plus a shared SwiGLU expert scaled by sigmoid(x . ffn_gate_inp_shexp) -> residual.
Final RMSNorm and the output projection. Parameter shapes follow PyTorch's [out, in] layout, which
is numpy's view of ggml's {in, out}, so export writes them unchanged.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Config:
    """Hyper-parameters; the GGUF metadata is written from these."""

    n_vocab: int
    n_embd: int = 128
    n_layer: int = 4
    n_head: int = 4
    n_head_kv: int = 2
    n_expert: int = 8
    n_expert_used: int = 2
    n_ff_exp: int = 64
    n_ff_shexp: int = 128
    n_ctx: int = 2048
    rope_base: float = 10000.0
    rms_eps: float = 1e-6

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    def to_dict(self) -> dict:
        return asdict(self)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """[..., d] -> [..., d]"""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rope_neox(x: torch.Tensor, base: float) -> torch.Tensor:
    """Rotate halves (NEOX style): [B, H, T, hd] -> [B, H, T, hd], positions 0..T-1."""
    hd, t = x.shape[-1], x.shape[-2]
    inv = base ** (-torch.arange(0, hd // 2, dtype=torch.float32) * 2 / hd)  # [hd/2]
    ang = torch.arange(t, dtype=torch.float32)[:, None] * inv[None, :]  # [T, hd/2]
    cos, sin = ang.cos(), ang.sin()
    x1, x2 = x[..., : hd // 2], x[..., hd // 2 :]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Layer(nn.Module):
    """One qwen2moe block; parameter names mirror the GGUF tensor names."""

    def __init__(self, c: Config) -> None:
        super().__init__()
        d, kv = c.n_embd, c.n_head_kv * c.head_dim
        self.c = c
        self.attn_norm = nn.Parameter(torch.ones(d))
        self.attn_q = nn.Linear(d, d)
        self.attn_k = nn.Linear(d, kv)
        self.attn_v = nn.Linear(d, kv)
        self.attn_output = nn.Linear(d, d, bias=False)
        self.ffn_norm = nn.Parameter(torch.ones(d))
        self.ffn_gate_inp = nn.Linear(d, c.n_expert, bias=False)
        self.ffn_gate_exps = nn.Parameter(torch.randn(c.n_expert, c.n_ff_exp, d) * 0.02)
        self.ffn_up_exps = nn.Parameter(torch.randn(c.n_expert, c.n_ff_exp, d) * 0.02)
        self.ffn_down_exps = nn.Parameter(torch.randn(c.n_expert, d, c.n_ff_exp) * 0.02)
        self.ffn_gate_inp_shexp = nn.Parameter(torch.zeros(d))
        self.ffn_gate_shexp = nn.Linear(d, c.n_ff_shexp, bias=False)
        self.ffn_up_shexp = nn.Linear(d, c.n_ff_shexp, bias=False)
        self.ffn_down_shexp = nn.Linear(c.n_ff_shexp, d, bias=False)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        """[B, T, d] -> [B, T, d], causal."""
        c = self.c
        b, t, _ = x.shape
        q = self.attn_q(x).view(b, t, c.n_head, c.head_dim).transpose(1, 2)  # [B, H, T, hd]
        k = self.attn_k(x).view(b, t, c.n_head_kv, c.head_dim).transpose(1, 2)  # [B, Hkv, T, hd]
        v = self.attn_v(x).view(b, t, c.n_head_kv, c.head_dim).transpose(1, 2)
        q, k = rope_neox(q, c.rope_base), rope_neox(k, c.rope_base)
        rep = c.n_head // c.n_head_kv
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)  # [B, H, T, hd]
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # [B, H, T, hd]
        return self.attn_output(y.transpose(1, 2).reshape(b, t, -1))

    def moe(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Routed plus shared experts: [N, d] -> ([N, d], probs [N, E], top-k ids [N, k])."""
        c = self.c
        probs = F.softmax(self.ffn_gate_inp(x), dim=-1)  # [N, E]
        weights, ids = probs.topk(c.n_expert_used, dim=-1)  # [N, k], not renormalised
        out = torch.zeros_like(x)
        for e in range(c.n_expert):
            tok, slot = (ids == e).nonzero(as_tuple=True)
            if tok.numel() == 0:
                continue
            xe = x[tok]  # [n_e, d]
            h = F.silu(xe @ self.ffn_gate_exps[e].T) * (xe @ self.ffn_up_exps[e].T)  # [n_e, ff]
            out.index_add_(0, tok, (h @ self.ffn_down_exps[e].T) * weights[tok, slot, None])
        shared = self.ffn_down_shexp(F.silu(self.ffn_gate_shexp(x)) * self.ffn_up_shexp(x))
        gate = torch.sigmoid(x @ self.ffn_gate_inp_shexp)[:, None]  # [N, 1]
        return out + gate * shared, probs, ids

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """[B, T, d] -> ([B, T, d], router probs [B*T, E], top-k ids [B*T, k])."""
        x = x + self.attention(rms_norm(x, self.attn_norm, self.c.rms_eps))
        b, t, d = x.shape
        y, probs, ids = self.moe(rms_norm(x, self.ffn_norm, self.c.rms_eps).reshape(b * t, d))
        return x + y.view(b, t, d), probs, ids


class TinyMoE(nn.Module):
    """Embedding, `n_layer` blocks, final norm and output head (tied to the embedding in training)."""

    def __init__(self, c: Config) -> None:
        super().__init__()
        self.c = c
        self.token_embd = nn.Embedding(c.n_vocab, c.n_embd)
        nn.init.normal_(self.token_embd.weight, std=0.02)
        self.layers = nn.ModuleList(Layer(c) for _ in range(c.n_layer))
        self.output_norm = nn.Parameter(torch.ones(c.n_embd))
        for name, p in self.named_parameters():
            if name.endswith(("attn_output.weight", "ffn_down_shexp.weight", "ffn_down_exps")):
                nn.init.normal_(p, std=0.02 / (2 * c.n_layer) ** 0.5)

    def hidden(self, ids: torch.Tensor) -> tuple[torch.Tensor, list[tuple[torch.Tensor, ...]]]:
        """Token ids [B, T] -> final-normed hidden states [B, T, d] and per-layer routes."""
        x = self.token_embd(ids)  # [B, T, d]
        routes = []
        for layer in self.layers:
            x, probs, top = layer(x)
            routes.append((probs, top))
        return rms_norm(x, self.output_norm, self.c.rms_eps), routes

    def head(self, x: torch.Tensor) -> torch.Tensor:
        """Output projection (tied embedding): [..., d] -> logits [..., V]."""
        return x @ self.token_embd.weight.T

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, list[tuple[torch.Tensor, ...]]]:
        """Token ids [B, T] -> logits [B, T, V] and per-layer (router probs, top-k ids)."""
        x, routes = self.hidden(ids)
        return self.head(x), routes


def balance_loss(probs: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor, n_expert: int
                 ) -> torch.Tensor:
    """Switch-Transformer load balancing: n_expert * sum_e (share of picks_e) * (mean prob_e).

    Args:
        probs: router probabilities [N, E].
        ids: chosen experts [N, k].
        mask: 1.0 for real tokens, 0.0 for padding [N].
        n_expert: E.

    Returns:
        A scalar, 1.0 when routing is perfectly uniform.
    """
    picks = F.one_hot(ids, n_expert).sum(1).float() * mask[:, None]  # [N, E]
    share = picks.sum(0) / picks.sum().clamp(min=1.0)  # [E]
    mean_prob = (probs * mask[:, None]).sum(0) / mask.sum().clamp(min=1.0)  # [E]
    return n_expert * (share * mean_prob).sum()
