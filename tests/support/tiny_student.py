"""A random tiny student model with the embedded model's tokenizer."""

from __future__ import annotations

from pathlib import Path

from agentune.tasks.llm.embedded_model import resolve_model_path


def make_tiny_student(folder: Path) -> Path:
    """A randomly initialised 2-layer Llama with the embedded model's tokenizer (seconds)."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(str(resolve_model_path("embedded")))
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                         max_position_embeddings=4096, tie_word_embeddings=True)
    LlamaForCausalLM(config).save_pretrained(str(folder))
    tokenizer.save_pretrained(str(folder))
    return folder
