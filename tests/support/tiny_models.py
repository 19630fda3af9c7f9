"""Tiny random Llama models for tests that need a real model folder in seconds."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def tiny_llama(folder: Path, corpus: Sequence[str], *, chat_template: str, vocab_size: int,
               max_positions: int, hidden_size: int = 32, layers: int = 2,
               added_tokens: Sequence[str] = ()) -> Path:
    """A random 2-layer Llama with a byte-level BPE tokenizer fitted to ``corpus`` (ChatML
    special tokens; ``added_tokens`` are whole strings that become one token each), saved to
    ``folder`` with ``chat_template``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(list(corpus), trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token="<|im_start|>", eos_token="<|im_end|>",
        pad_token="<|im_end|>", unk_token="<|endoftext|>")
    tokenizer.chat_template = chat_template
    if added_tokens:
        tokenizer.add_tokens(list(added_tokens))
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_positions,
        tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def sft_trainer_for(student: Path, chat_template: str, train: Any, out_dir: Path,
                    **settings: Any) -> Any:
    """TRL's SFTTrainer over ``train`` (messages + tools) for the model in ``student``, rendering
    with ``chat_template`` and the loss on assistant tokens only, as the train stage sets it up:
    its ``train_dataset`` is the data TRL prepared, its ``processing_class`` the tokenizer.
    ``settings`` go to SFTConfig (max_steps, learning_rate ...)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    tokenizer = AutoTokenizer.from_pretrained(str(student))
    tokenizer.chat_template = chat_template
    return SFTTrainer(
        model=AutoModelForCausalLM.from_pretrained(str(student)),
        args=SFTConfig(output_dir=str(out_dir), max_length=4096, assistant_only_loss=True,
                       report_to=[], bf16=False, per_device_train_batch_size=2, **settings),
        train_dataset=train, processing_class=tokenizer)
