"""Reading model files: GGUF header, model card, tokenizer, chat template, locating files."""
