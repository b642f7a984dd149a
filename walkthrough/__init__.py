"""walkthrough: follow one request to a language model, from the GGUF file to the last token."""

__version__ = "0.1.0"
