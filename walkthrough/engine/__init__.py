"""The engines and the records they share. Knows nothing of Textual.

- `glassbox/`: the numpy engine ("numpy" on the command line): ops, weights, meter, layers, model,
  KV cache, session.
- `llama/`: the llama.cpp engine (llama-cpp-python), read through its eval callback; RPC workers.
- `serving/`: what a server does around the passes: turns, speculative decoding, drafters, cold starts.
- here, what both engines reach: `Step` records (steps.py), `Engine` / `Session` protocols
  (protocol.py), the sampler and its knobs, surprisal, checkpoints and prefix breaks (records of
  reuse), numeric checks, the context check, choosing an engine (engines.py), and the architecture
  declarations (arch.py).

Entry points: `load_model` / `new_session` (engines.py); `Model.open(path)` (glassbox/model.py),
`Session(model)` with `prefill` / `decode` yielding `Step` records (glassbox/session.py, steps.py),
`Sampler` and `SamplerSettings` (sampler.py). `UnsupportedArchitecture` (glassbox/config.py) is raised
for files the numpy engine cannot run; they can still be inspected. The cost model is in
`walkthrough/costs/`.
"""
