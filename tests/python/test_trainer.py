"""transformers' Trainer fine-tunes a model compiled with backend "onnxtrain" (`model.compile(...)` before the
Trainer is built; TrainingArguments(torch_compile_backend=...) goes through accelerate, whose list of backends is
closed): the same losses as the eager Trainer, falling, and save_model / from_pretrained gives the trained model
back."""

import copy
import logging
import warnings

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")


def train(model, folder):
    data = [dict(input_ids=torch.arange(i, i + 8) % 100, labels=torch.arange(i, i + 8) % 100) for i in range(32)]
    args = transformers.TrainingArguments(output_dir=str(folder), max_steps=12, per_device_train_batch_size=8,
                                          learning_rate=1e-2, report_to=[], use_cpu=True, save_strategy="no",
                                          logging_steps=1, disable_tqdm=True, seed=0)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data)
    trainer.train()
    return trainer, [h["loss"] for h in trainer.state.log_history if "loss" in h]


def test_trainer_fine_tunes_a_model_compiled_with_onnxtrain(tmp_path, caplog):
    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                                      use_cache=False)
    eager = transformers.LlamaForCausalLM(config)
    model = copy.deepcopy(eager)
    model.compile(backend="onnxtrain", options={"log_level": "INFO"})
    with caplog.at_level(logging.INFO, logger="onnxtrain"):
        trainer, losses = train(model, tmp_path / "onnxtrain")
    # The steps ran in onnxtrain (the graph exported, or loaded from a capture cache an earlier test filled).
    assert "session built in" in caplog.text
    _, eager_losses = train(eager, tmp_path / "eager")
    assert len(losses) == 12 and losses[-1] < 0.75 * losses[0]
    assert losses == pytest.approx(eager_losses, rel=1e-3)
    trainer.save_model(str(tmp_path / "saved"))
    back = transformers.LlamaForCausalLM.from_pretrained(str(tmp_path / "saved"))
    ids = torch.arange(8)[None]
    with torch.no_grad():
        torch.testing.assert_close(back(ids).logits, model(ids).logits, rtol=1e-5, atol=1e-6)
