"""LoRA adapters: saved, reloaded (on their base, by the loader evaluation uses) and merged give
the same logits as the adapted model they were saved from."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentune.tasks.llm.model_folders import adapter_base, is_adapter, load_causal_lm
from agentune.tasks.train.stage import merge_adapter

from support.tiny_train_model import make_tiny_model


def test_adapter_save_reload_and_merge_give_the_same_logits(tmp_path: Path) -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base_dir = make_tiny_model(tmp_path / "base")
    torch.manual_seed(0)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base_dir), LoraConfig(
        r=4, lora_alpha=8, lora_dropout=0.0, task_type="CAUSAL_LM",
        target_modules=["q_proj", "v_proj", "gate_proj"]))
    # A fresh adapter is the identity (B = 0): make it do something, as training would.
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.2)
    model.eval()
    tokenizer = AutoTokenizer.from_pretrained(base_dir)
    inputs = tokenizer(["北京今天天气怎么样?", "Find the latest news on DeepSpeed."],
                       return_tensors="pt", padding=True)
    with torch.no_grad():
        adapted = model(**inputs).logits
        plain = AutoModelForCausalLM.from_pretrained(base_dir)(**inputs).logits
    assert not torch.allclose(adapted, plain, atol=1e-3)

    adapter_dir = tmp_path / "adapter"
    model.save_pretrained(adapter_dir)
    tokenizer.save_pretrained(adapter_dir)
    assert is_adapter(adapter_dir) and adapter_base(adapter_dir) == base_dir
    assert not (adapter_dir / "model.safetensors").exists()
    reloaded = load_causal_lm(adapter_dir).eval()
    merged_dir = merge_adapter(adapter_dir, tmp_path / "merged")
    assert not is_adapter(merged_dir) and (merged_dir / "tokenizer_config.json").is_file()
    merged = AutoModelForCausalLM.from_pretrained(merged_dir).eval()
    with torch.no_grad():
        assert torch.allclose(reloaded(**inputs).logits, adapted, atol=1e-5)
        assert torch.allclose(merged(**inputs).logits, adapted, atol=1e-5)


def test_an_adapter_with_a_missing_base_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "adapter_config.json").write_text('{"base_model_name_or_path": "/nowhere"}')
    with pytest.raises(FileNotFoundError, match="base model '/nowhere' is not a folder"):
        load_causal_lm(tmp_path)


def test_an_adapter_folder_is_a_model_folder_for_the_local_provider(tmp_path: Path) -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from agentune.tasks.llm.embedded_model import resolve_model_path

    base_dir = make_tiny_model(tmp_path / "base")
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(base_dir), LoraConfig(
        r=2, lora_alpha=4, task_type="CAUSAL_LM", target_modules=["q_proj"]))
    model.save_pretrained(tmp_path / "adapter")
    assert resolve_model_path(str(tmp_path / "adapter")) == tmp_path / "adapter"
    with pytest.raises(FileNotFoundError, match="no config.json"):
        resolve_model_path(str(tmp_path))
