"""Architectures as declarations: the tensors each has, its block recipe, its layer kinds, the defaults
llama.cpp assumes for it. Plain data (gguf-py's names, no numpy, no file access).

Below both `inspect/` and `engine/` (DESIGN.md's data flow): the model card reads these declarations to
classify a file's layers, the engine reads them to run one, and nothing here imports either
(`tests/test_import_arrows.py`).

- declarations: `Architecture` (tensors, block recipe, router) and `ARCHITECTURES`, one entry each;
- layer_kinds: each kind of mixer and FFN (the function running it, what it keeps, the keys it reads);
- sliding: which layers of an architecture slide when the file does not say (llama.cpp's defaults).
"""
