"""The tied head's dW formed in backward instead of in forward: a trade-off the memory optimizer weighs by size (the
scores' product once more against a (vocab, dim) value held from the end of forward), offered as a recompute plan
of the fused head and loss. Taken, forward's head forms no dW (the plan's clone forms only what backward reads: not
the logits), the clone and its product with the loss's gradient wait for their reader at the end of backward, and
the step's predicted peak drops; loss, logits and every gradient stay as they were."""

import copy
import json

import torch
import transformers as T

import onnxtrain

VOCAB, DIM, BATCH, SEQ = 4096, 64, 2, 64


def llama():
    torch.manual_seed(0)
    config = T.LlamaConfig(vocab_size=VOCAB, hidden_size=DIM, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True, use_cache=False)
    return T.LlamaForCausalLM(config).train()


def step(model, ids):
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    return out.loss.detach(), out.logits.detach(), {n: p.grad for n, p in model.named_parameters()}


def predicted_peak(model):
    runner = [r for r in model.runners() if r.training][-1]
    return runner.session.predict_memory(runner.last_dims)["peak"]


def head_row(model):
    report = json.loads(model.memory_report(json=True))
    rows = [r for r in report["clusters"] if r["shape"] == f"[{VOCAB}, {DIM}]"]
    assert len(rows) == 1, [(r["cluster"], r["shape"]) for r in report["clusters"]]
    return rows[0]


def test_head_dw_formed_in_backward():
    """By config (the cluster takes the head's dX too: its clone forms both, in backward): gradients as eager's, and
    the peak, at the end of forward, without the dW."""
    base = llama()
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    eager = step(copy.deepcopy(base), ids)
    plain = onnxtrain.Module(copy.deepcopy(base))
    step(plain, ids)
    row = head_row(plain)
    assert row["applied"] == 0 and "LinearCrossEntropy" in row["cluster"]
    head = onnxtrain.Module(copy.deepcopy(base), onnxtrain.Options(memory_opt_config=row["config"]))
    loss, logits, grads = step(head, ids)
    torch.testing.assert_close(loss, eager[0], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(logits, eager[1], rtol=1e-5, atol=1e-5)
    largest = max(g.abs().max() for g in eager[2].values())
    for name, g in grads.items():
        torch.testing.assert_close(g, eager[2][name], rtol=0, atol=1e-4 * float(largest), msg=name)
    assert head_row(head)["applied"] == 1
    assert predicted_peak(plain) - predicted_peak(head) >= 0.9 * VOCAB * DIM * 4, (predicted_peak(plain),
                                                                                 predicted_peak(head))


def test_a_budget_forms_the_head_dw_at_the_end_of_backward_with_the_update_applied_there():
    """Level 1 with onnxtrain.optim.AdamW(in_backward=True), as a real vocabulary's head: the layers' checkpoints
    are smaller than the head's dW. A budget half a dW under that step's peak takes the head's plan (the cheapest
    per byte left); the tied weight's update waits for its last part (the embedding's gradient), and the head's dW
    now comes just before it: the step's peak holds the dW neither from the end of forward nor from the start of
    backward."""
    base = llama()
    ids = torch.randint(0, VOCAB, (BATCH, 16))

    def trained(budget):
        model = onnxtrain.Module(copy.deepcopy(base), onnxtrain.Options(memory_opt_level=1, memory_budget=budget))
        opt = onnxtrain.optim.AdamW(model.parameters(), lr=1e-2, in_backward=True)
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()  # (does nothing: each update was applied in backward)
        return model

    plain = trained("")
    runner = [r for r in plain.runners() if r.training][-1]
    head = trained(f"{runner.session.predict_memory(runner.last_dims)['total'] - VOCAB * DIM * 2}B")
    reference = copy.deepcopy(base)
    opt = torch.optim.AdamW(reference.parameters(), lr=1e-2)
    reference(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    # (as torch's AdamW within 5% of a step, lr: where a gradient is near eps, a first step's size,
    # lr * g / (|g| + eps), is float32's rounding of g amplified; a missed or doubled update is a whole step)
    for (name, p), q in zip(head.named_parameters(), reference.parameters()):
        assert p.grad is None, name
        torch.testing.assert_close(p.detach(), q.detach(), rtol=0, atol=5e-4, msg=name)
    assert head_row(head)["applied"] == 1 and head_row(plain)["applied"] == 0
    runner = [r for r in head.runners() if r.training][-1]
    steps = json.loads(runner.session.memory_timeline(runner.last_dims))["steps"]
    backward = [s for s in steps if s["part"] == "backward"]
    head_at = [s["step"] for s in backward if s["op"] == "LinearCrossEntropy"]
    layers_at = [s["step"] for s in backward if s["op"] == "RMSNormalizationGrad"]
    assert len(head_at) == 1 and head_at[0] > max(layers_at), (head_at, layers_at)
    # (the peak now: the dW and its product's scratch at the end of backward, or the logits at the end of forward)
    assert predicted_peak(plain) - predicted_peak(head) >= 0.4 * VOCAB * DIM * 4, (predicted_peak(plain),
                                                                                 predicted_peak(head))
