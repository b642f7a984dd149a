"""The cost model: what one request costs on one machine, from the model card and measured runs.

Where costs live (the predictions work grows this package; estimates go here, not in engine/):
- hardware (+ hardware.json, each figure with its source): machine profiles, the user's own too;
- corpus (+ corpus.json, measured_runs.csv: published runs, each with its source), timing (the timing
  model fitted on them), fitted (its predictions for a profile, with their error band);
- estimate: memory, decode and prefill speed, several users at once (`estimate`, `rows`);
- budget: weights, KV cache, state and compute buffers against memory; figure: a number with its formula;
- memory: what an engine will hold for a request beside what this machine has free;
- curves: estimates as series over context or prompt length; request_size: the Costs stage's knobs;
- machines and race: every profile side by side, and the speed race; sram: on-chip SRAM machines;
- measured: measured speed beside the roofline (runs an engine to time it).
Nothing here imports Textual or the screens (`tests/test_import_arrows.py`).
"""
