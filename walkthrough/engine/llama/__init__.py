"""The llama.cpp engine (the optional extra `walkthrough[llama]`): real speed, the same `Step` records.

model (a GGUF loaded by llama.cpp), session (its passes behind the `Session` interface), capture (the
eval callback that reads experts and attention from the graph), ggml_tensor (reading a tensor handed
to that callback), pass_cost (bytes read and FLOPs from the tensor table), rpc / rpc_traffic /
placement (ggml's RPC workers, the bytes sent to them, where the layers went).
"""
