"""The numpy engine ("numpy" on the command line): the glass box, one plain function per operation.

ops (operations with shape comments), activations and quantdot (llama.cpp's CPU rounding), dequant
and weights (lazy dequantization), meter (bytes read and FLOPs), config (the run's numbers), cache (KV
cache and fixed states), layers / deltanet / shortconv / gated_attention / qwen35 (layer kinds),
validate (the file holds exactly the declared tensors), model (the forward pass), session (prefill and
decode).
"""
