"""Read a ggml tensor that llama.cpp's scheduler hands to an eval callback: its name, shape and values.

The callback receives a bare `struct ggml_tensor *`. `GGMLTensor` mirrors that
struct's layout (ggml/include/ggml.h of the llama.cpp vendored by
llama-cpp-python 0.3.36: GGML_MAX_DIMS 4, GGML_MAX_OP_PARAMS 64 bytes,
GGML_MAX_SRC 10, GGML_MAX_NAME 64) so Python can read the fields without a
C helper. Shapes are ggml order: `ne[0]` is the row length, `nb[i]` the byte
stride of dimension i.

Views are strided: `ffn_moe_topk-N` is the first k columns of an argsort
([n_expert, n_tokens] int32), so its rows are `nb[1]` = 4 x n_expert bytes apart,
not 4 x k. `read` follows `nb` and returns a contiguous numpy copy, in numpy
order (the last ggml dimension first): a [k, n_tokens] ggml tensor comes back
as an array of shape (n_tokens, k).

A tensor in host memory is read in place; one on another backend (an RPC
worker's, whose `data` is an address on that worker) is copied out with
`ggml_backend_tensor_get`. Only F32, F16 and I32 are read.
"""

from __future__ import annotations

import ctypes

import numpy as np

GGML_MAX_DIMS = 4
GGML_MAX_OP_PARAMS = 64  # bytes
GGML_MAX_SRC = 10
GGML_MAX_NAME = 64

# enum ggml_type values (ggml.h): the element types an eval callback reads here.
GGML_DTYPES = {0: np.dtype(np.float32), 1: np.dtype(np.float16), 26: np.dtype(np.int32)}


class GGMLTensor(ctypes.Structure):
    """`struct ggml_tensor` (ggml.h), field for field."""


GGMLTensor._fields_ = [
    ("type", ctypes.c_int),
    ("buffer", ctypes.c_void_p),
    ("ne", ctypes.c_int64 * GGML_MAX_DIMS),
    ("nb", ctypes.c_size_t * GGML_MAX_DIMS),
    ("op", ctypes.c_int),
    ("op_params", ctypes.c_int32 * (GGML_MAX_OP_PARAMS // 4)),
    ("flags", ctypes.c_int32),
    ("src", ctypes.POINTER(GGMLTensor) * GGML_MAX_SRC),
    ("view_src", ctypes.POINTER(GGMLTensor)),
    ("view_offs", ctypes.c_size_t),
    ("data", ctypes.c_void_p),
    ("name", ctypes.c_char * GGML_MAX_NAME),
    ("extra", ctypes.c_void_p),
    ("padding", ctypes.c_char * 8),
]


NAME_OFFSET = GGMLTensor.name.offset
VIEW_SRC_OFFSET = GGMLTensor.view_src.offset


def name_at(address: int) -> bytes:
    """The name of the tensor at a pointer, read without building the struct (the callback's hot path)."""
    return ctypes.string_at(address + NAME_OFFSET)


def tensor_at(address: int) -> GGMLTensor:
    """The tensor struct at a pointer the callback received (no copy: fields read live)."""
    return GGMLTensor.from_address(address)


def split_name(name: bytes) -> tuple[bytes, int]:
    """llama.cpp names a layer's graph tensors "NAME-LAYER": b"ffn_moe_topk-3" -> (b"ffn_moe_topk", 3).

    Names without a layer (b"result_output") give layer -1.
    """
    stem, sep, layer = name.rpartition(b"-")
    if sep and layer.isdigit():
        return stem, int(layer)
    return name, -1


def read(t: GGMLTensor) -> np.ndarray:
    """A contiguous copy of the tensor's values, numpy order (ggml's ne reversed), following its byte strides.

    Raises:
        ValueError: an element type this reader does not know, or no data.
    """
    dtype = GGML_DTYPES.get(t.type)
    if dtype is None:
        raise ValueError(f"ggml tensor {t.name!r} has type {t.type}, not F32/F16/I32")
    if not t.data:
        raise ValueError(f"ggml tensor {t.name!r} holds no data")
    ne = [int(t.ne[i]) for i in range(GGML_MAX_DIMS)]
    nb = [int(t.nb[i]) for i in range(GGML_MAX_DIMS)]
    if 0 in ne:
        return np.zeros(ne[::-1], dtype)
    span = sum((n - 1) * s for n, s in zip(ne, nb)) + dtype.itemsize  # bytes from the first to the last element
    remote = _remote_getter(t)
    if remote is not None:  # = ggml_nbytes of the (possibly strided) tensor: one copy of its whole span
        raw = ctypes.create_string_buffer(span)
        remote(ctypes.addressof(t), raw, 0, span)
    else:
        raw = (ctypes.c_char * span).from_address(t.data)
    view = np.ndarray(shape=tuple(ne[::-1]), dtype=dtype, buffer=raw, strides=tuple(nb[::-1]))
    return np.array(view)  # copy: the graph reuses this memory for later nodes


def _remote_getter(t: GGMLTensor):
    """ggml_backend_tensor_get when the tensor lives outside host memory (RPC loaded, buffer not host), else None."""
    from walkthrough.engine.llama import rpc

    base = rpc.loaded("base")
    if base is None or not t.buffer or base.ggml_backend_buffer_is_host(t.buffer):
        return None
    return base.ggml_backend_tensor_get
