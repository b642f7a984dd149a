"""Abliteration: a behaviour's direction in the residual stream, found from two prompt sets and projected
out of the weights that write into the stream (prompts, collect, direction, edit)."""
