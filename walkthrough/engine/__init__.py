"""The numpy engine: forward pass, KV cache, sampler, step records, cost model. Knows nothing of Textual."""
