"""onnxtrain.Module on transformers' GPT-2, BERT and Llama (small configs, random weights, nothing downloaded):
loss, every parameter gradient and 10 AdamW steps against eager."""

import copy
import warnings

import numpy as np
import pytest
import torch

import onnxtrain

transformers = pytest.importorskip("transformers")


def gpt2():
    c = transformers.GPT2Config(vocab_size=100, n_positions=32, n_embd=32, n_layer=2, n_head=4, resid_pdrop=0.0,
                                embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False)
    return transformers.GPT2LMHeadModel(c)


def bert():
    c = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                intermediate_size=64, max_position_embeddings=32, hidden_dropout_prob=0.0,
                                attention_probs_dropout_prob=0.0)
    return transformers.BertForMaskedLM(c)


def llama():
    c = transformers.LlamaConfig(vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32, use_cache=False)
    return transformers.LlamaForCausalLM(c)


def inputs(name, ids):
    if name == "bert":
        mask = torch.ones_like(ids)
        mask[0, -2:] = 0
        return dict(input_ids=ids, attention_mask=mask, labels=ids)
    return dict(input_ids=ids, labels=ids)


@pytest.mark.parametrize("name,make", [("gpt2", gpt2), ("bert", bert), ("llama", llama)])
def test_transformers_model_matches_eager(name, make):
    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    eager = make().train()
    ours = copy.deepcopy(eager)
    wrapped = onnxtrain.Module(ours)
    kw = inputs(name, torch.randint(0, 100, (2, 8)))
    got, want = wrapped(**kw), eager(**kw)
    assert got.loss.item() == pytest.approx(want.loss.item(), rel=1e-5)
    assert torch.allclose(got.logits, want.logits, rtol=1e-4, atol=1e-5)
    got.loss.backward()
    want.loss.backward()
    for (n, p), (_, q) in zip(ours.named_parameters(), eager.named_parameters()):
        if q.grad is not None:
            assert float((p.grad - q.grad).abs().max() / q.grad.abs().max().clamp(min=1e-3)) < 1e-4, n
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-3) for m in (eager, wrapped)]
    losses = [[], []]
    for _ in range(10):
        for k, model in enumerate((eager, wrapped)):
            opts[k].zero_grad()
            loss = model(**kw).loss
            loss.backward()
            opts[k].step()
            losses[k].append(loss.item())
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-3)
    assert wrapped.export_count == 1
