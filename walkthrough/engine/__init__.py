"""The numpy engine: forward pass, KV cache, sampler, step records, cost model. Knows nothing of Textual.

Entry points: `Model.open(path)` (model.py), `Session(model)` with `prefill` /
`decode` yielding `Step` records (session.py, steps.py), `Sampler` and
`SamplerSettings` (sampler.py). `UnsupportedArchitecture` (config.py) is raised
for files the engine cannot run; they can still be inspected.
"""
