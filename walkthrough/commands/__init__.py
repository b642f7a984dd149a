"""Subcommands of the `walkthrough` CLI, one module each (inspect, tokenize, template, trace, estimate)."""
