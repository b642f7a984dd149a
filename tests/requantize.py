"""Write a copy of a GGUF file with its weights rounded to another type, with gguf.quants and GGUFWriter.

Used by the compare tests (the tiny model at Q4_0 beside its stored Q8_0) and,
as a script, to make a pair of files for `walkthrough compare`:

    python tests/requantize.py IN.gguf OUT.gguf Q4_0

Metadata is copied as it is (general.file_type is left alone). A tensor takes
the new type when llama.cpp's quantizer would convert it (2-D or more, a
weight, not a norm; `walkthrough.inspect.requant.quantizable`) and its rows
split into whole blocks of the type; the others keep their stored bytes. The
values rounded are the stored ones dequantized, so a Q8_0 file made Q4_0 is
rounded twice, as `llama-quantize --allow-requantize` would do.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter, quants
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from walkthrough.inspect.gguf import open_gguf
from walkthrough.inspect.requant import quantizable

SKIPPED_KEYS = ("GGUF.", "general.architecture")  # written by GGUFWriter itself


def requantize(src: str | Path, dst: str | Path, qtype: GGMLQuantizationType) -> None:
    reader = GGUFReader(src)
    arch = reader.fields["general.architecture"].contents()
    writer = GGUFWriter(dst, arch)
    for name, field in reader.fields.items():
        if name.startswith(SKIPPED_KEYS):
            continue
        sub = field.types[1] if field.types[0] == GGUFValueType.ARRAY and len(field.types) > 1 else None
        writer.add_key_value(name, field.contents(), field.types[0], sub_type=sub)
    with open_gguf(src) as f:
        for t in reader.tensors:
            info = f.tensors[t.name]
            block = GGML_QUANT_SIZES[qtype][0]
            if quantizable(info) and info.shape[0] % block == 0:
                values = quants.dequantize(np.array(t.data), t.tensor_type).reshape(tuple(reversed(info.shape)))
                data = quants.quantize(values.astype(np.float32), qtype)
                writer.add_tensor(t.name, data, raw_dtype=qtype)
            else:  # stored bytes as they are
                writer.add_tensor(t.name, np.array(t.data), raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: python tests/requantize.py IN.gguf OUT.gguf TYPE")
    requantize(sys.argv[1], sys.argv[2], GGMLQuantizationType[sys.argv[3].upper()])
