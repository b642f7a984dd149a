"""Write a GGUF shaped like Qwen3.6-35B-A3B (its model card's numbers), every tensor left as zeros, with gguf.GGUFWriter.

The header is real: the hyperparameters and tensor table of tests/test_card.py's
QWEN36 (40 layers of 3 Gated DeltaNet + 1 gated attention, 256 experts of width
512 with 8 routed + 1 shared, one MTP block), the Qwen3.5 tokenizer of
../shared/fixtures/vocab/ggml-vocab-qwen35.gguf padded with "[PAD{i}]" tokens to
the model's 248,320 rows (as convert_hf_to_gguf.py pads a vocabulary), and the
reference fixtures' plain ChatML chat template (Qwen's full template also renders,
but on a loaded machine its rendering can pass the app's 1.5 s template limit). Routed
experts are stored as Q4_K, the other matrices as Q8_0 and vectors as F32 (about
21 GB, like a Q4_K_M download). The tensor data is never written: the file is
truncated to its full length, so it is a hole that reads as zeros and takes no
disk space. All-zero weights give all-zero logits, so the tokens are meaningless;
what it measures is the work: every pass reads and multiplies tensors of the
real shapes.

    python tests/bench/qwen36_shaped.py [PATH]      # default /tmp/walkthrough-bench/qwen36-35b-a3b-shaped.gguf
    python tests/bench/qwen36_shaped.py --scaled [PATH]   # default .../qwen36-scaled-shaped.gguf

--scaled keeps the structure (the same 40 layers of 3 Gated DeltaNet + 1 gated
attention and the MTP block, 256 experts with 8 routed + 1 shared, the same
248,320-token vocabulary) with every width divided (SCALED: embedding 128,
expert width 32, attention heads of 32, DeltaNet states of 32) and every matrix
Q8_0 (Q4_K's 256-value rows do not divide the narrow widths): about 0.2 GB, which
llama.cpp loads in seconds and sends to RPC workers over loopback quickly.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from gguf import GGUFWriter
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType, TokenType

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))
from conftest import FIXTURES_DIR
from test_card import QWEN36, QWEN36_VOCAB, qwen36_tensors

from walkthrough.inspect.gguf import open_gguf

DEFAULT_PATH = Path("/tmp/walkthrough-bench/qwen36-35b-a3b-shaped.gguf")
SCALED_PATH = Path("/tmp/walkthrough-bench/qwen36-scaled-shaped.gguf")
SCALED = {**QWEN36, "embedding_length": 128, "attention.key_length": 32, "attention.value_length": 32,
          "rope.dimension_count": 16, "expert_feed_forward_length": 32, "expert_shared_feed_forward_length": 32,
          "ssm.inner_size": 32 * 32, "ssm.state_size": 32}
SCALED_SECTIONS = [3, 3, 2, 0]  # rope.dimension_sections: half the rotated dimensions, as [11, 11, 10, 0] of 64
VOCAB = FIXTURES_DIR / "vocab" / "ggml-vocab-qwen35.gguf"
TEMPLATE_SOURCE = FIXTURES_DIR / "reference" / "ref-qwen3moe-q8_0.gguf"
EXPERT_TYPE = GGMLQuantizationType.Q4_K


def _nbytes(shape: tuple[int, ...], qtype: GGMLQuantizationType) -> int:
    block, size = GGML_QUANT_SIZES[qtype]
    n = int(np.prod(shape))
    return n // block * size


def write(path: Path = DEFAULT_PATH, scaled: bool = False) -> Path:
    """Write the file (header, then a hole for the data); returns its path. `scaled`: SCALED's widths."""
    hp = SCALED if scaled else QWEN36
    path.parent.mkdir(parents=True, exist_ok=True)
    vocab = open_gguf(VOCAB)
    tokens = list(vocab.get("tokenizer.ggml.tokens"))
    types = [int(t) for t in vocab.get("tokenizer.ggml.token_type")]
    pad = QWEN36_VOCAB - len(tokens)
    tokens += [f"[PAD{i}]" for i in range(len(tokens), QWEN36_VOCAB)]
    types += [int(TokenType.UNUSED)] * pad
    w = GGUFWriter(str(path), "qwen35moe")
    w.add_name("qwen36-scaled-shaped (zeros)" if scaled else "qwen36-35b-a3b-shaped (zeros)")
    for key, value in hp.items():
        if isinstance(value, float):
            w.add_float32(f"qwen35moe.{key}", value)
        else:
            w.add_uint32(f"qwen35moe.{key}", value)
    w.add_float32("qwen35moe.attention.layer_norm_rms_epsilon", 1e-6)
    w.add_float32("qwen35moe.rope.freq_base", 10_000_000.0)
    w.add_array("qwen35moe.rope.dimension_sections", SCALED_SECTIONS if scaled else [11, 11, 10, 0])
    w.add_tokenizer_model(vocab.get("tokenizer.ggml.model"))
    w.add_tokenizer_pre(vocab.get("tokenizer.ggml.pre"))
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(list(vocab.get("tokenizer.ggml.merges")))
    w.add_eos_token_id(int(vocab.get("tokenizer.ggml.eos_token_id")))
    chatml = open_gguf(TEMPLATE_SOURCE)
    w.add_chat_template(chatml.get("tokenizer.chat_template"))
    chatml.close()
    vocab.close()
    for t in qwen36_tensors(hp):
        qtype = EXPERT_TYPE if "_exps" in t.name and not scaled else GGMLQuantizationType(t.ggml_type)
        shape = tuple(reversed(t.shape))  # GGUFWriter takes numpy order
        w.add_tensor_info(t.name, shape, np.dtype(np.float32), _nbytes(t.shape, qtype), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    fout = w.fout[0]
    header = fout.tell()
    data_start = header + (-header % w.data_alignment)
    data = sum(GGUFWriter.ggml_pad(ti.nbytes, w.data_alignment) for ti in w.tensors[0].values())
    fout.truncate(data_start + data)  # the tensor data: a hole, read as zeros
    w.close()
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", nargs="?", type=Path)
    ap.add_argument("--scaled", action="store_true", help="the same structure at narrow widths (about 0.2 GB)")
    args = ap.parse_args(argv)
    path = write(args.path or (SCALED_PATH if args.scaled else DEFAULT_PATH), args.scaled)
    print(f"{path}: {path.stat().st_size / 1e9:.1f} GB ({path.stat().st_blocks * 512 / 1e6:.1f} MB on disk)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
