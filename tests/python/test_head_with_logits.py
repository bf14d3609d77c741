"""A language model that returns its logits beside its loss (as transformers' models do): the head and its loss
fuse into one com.onnxtrain.LinearCrossEntropy that writes the logits as they are formed, with no (N, C) scores
stashed for backward. A loop that calls backward on the loss alone gives the logits no gradient (PyTorch passes
None): nothing is made or added for them. A loop whose loss reads the logits too gets their gradient added by
com.onnxtrain.LinearGradAdd. Loss, logits and every gradient as eager's, in float32 and under bf16 autocast."""

import onnx
import pytest
import torch

import onnxtrain

VOCAB, D = 50, 16


class TinyLM(torch.nn.Module):
    def __init__(self, returns="logits", vocab=VOCAB):
        super().__init__()
        self.returns, self.vocab = returns, vocab
        self.emb = torch.nn.Embedding(vocab, D)
        self.norm = torch.nn.LayerNorm(D)
        self.head = torch.nn.Linear(D, vocab, bias=False)
        self.head.weight = self.emb.weight  # tied, as SmolLM2 and GPT-2

    def forward(self, ids, labels):
        h = self.norm(self.emb(ids))
        logits = self.head(h)
        scores = logits.float().view(-1, self.vocab)
        loss = torch.nn.functional.cross_entropy(scores, labels.view(-1), ignore_index=-100)
        return loss, (logits if self.returns == "logits" else h * 2)


def step(model, ids, labels, logits_in_loss, bf16):
    with torch.autocast("cpu", torch.bfloat16, enabled=bf16):
        loss, out = model(ids, labels)
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    (loss + (out.float() * weights).sum() * 0.01 if logits_in_loss else loss).backward()
    return loss.detach(), out.detach().float(), [p.grad for p in model.parameters()]


def close(got, want, bf16, what, largest=None):
    """fp32: within 1e-4 of `largest` (the largest gradient of the model), else of want's largest."""
    if bf16:
        cos = torch.nn.functional.cosine_similarity(got.flatten().double(), want.flatten().double(), dim=0)
        assert cos >= 0.999, what
    else:
        torch.testing.assert_close(got, want, rtol=0, atol=1e-4 * (largest or want.abs().max().item()),
                                   msg=what)


@pytest.mark.parametrize("bf16", [False, True])
@pytest.mark.parametrize("logits_in_loss", [False, True])
def test_head_fuses_with_its_logits_returned(bf16, logits_in_loss, tmp_path):
    torch.manual_seed(0)
    eager = TinyLM()
    ours = onnxtrain.Module(TinyLM(), onnxtrain.Options(save_onnx=str(tmp_path)))
    ours.load_state_dict(eager.state_dict())
    ids, labels = torch.randint(0, VOCAB, (2, 7)), torch.randint(0, VOCAB, (2, 7))
    labels[0, :2] = -100
    (l0, z0, g0), (l1, z1, g1) = (step(m, ids, labels, logits_in_loss, bf16) for m in (ours, eager))
    close(l0, l1, bf16, "loss")
    close(z0, z1, bf16, "logits")
    largest = max(g.abs().max().item() for g in g1)
    for (name, _), a, b in zip(ours.named_parameters(), g0, g1):
        close(a, b, bf16, name, largest)
    runner = [r for r in ours.runners() if r.training][-1]
    logits_name = runner.output_names[1]
    assert runner.session.optional_output_grad_names == [logits_name]
    ops = [n.op_type for n in onnx.load(str(tmp_path / "TinyLM_train_optimized.onnx")).graph.node]
    assert ops.count("LinearCrossEntropy") == 1 and "SoftmaxCrossEntropyLoss" not in ops, ops
    assert "SoftmaxCrossEntropyLossGrad" not in ops and ops.count("LinearGradAdd") == 2, ops  # dX, dW


@pytest.mark.parametrize("bf16", [False, True])
def test_many_blocks_of_classes(bf16):
    """1024 rows and 8300 classes: the gradients formed in forward take five blocks of classes, the last ragged."""
    torch.manual_seed(0)
    eager = TinyLM(returns="hidden", vocab=8300)
    ours = onnxtrain.Module(TinyLM(returns="hidden", vocab=8300))
    ours.load_state_dict(eager.state_dict())
    ids, labels = torch.randint(0, 8300, (2, 512)), torch.randint(0, 8300, (2, 512))
    labels[1, 5:9] = -100
    (l0, _, g0), (l1, _, g1) = (step(m, ids, labels, False, bf16) for m in (ours, eager))
    close(l0, l1, bf16, "loss")
    largest = max(g.abs().max().item() for g in g1)
    for (name, _), a, b in zip(ours.named_parameters(), g0, g1):
        close(a, b, bf16, name, largest)


def test_an_output_gradient_the_session_needs_is_zeros_when_none_is_made():
    torch.manual_seed(0)
    eager = TinyLM(returns="hidden")
    ours = onnxtrain.Module(TinyLM(returns="hidden"))
    ours.load_state_dict(eager.state_dict())
    ids = torch.randint(0, VOCAB, (2, 7))
    (l0, _, g0), (l1, _, g1) = (step(m, ids, ids.flip(1), False, False) for m in (ours, eager))
    runner = [r for r in ours.runners() if r.training][-1]
    assert runner.session.optional_output_grad_names == []
    close(l0, l1, False, "loss")
    largest = max(g.abs().max().item() for g in g1)
    for (name, _), a, b in zip(ours.named_parameters(), g0, g1):
        close(a, b, False, name, largest)


def test_a_session_refuses_a_missing_gradient_it_needs():
    ours = onnxtrain.Module(TinyLM(returns="hidden"))
    ids = torch.randint(0, VOCAB, (2, 7))
    ours(ids, ids)
    runner = [r for r in ours.runners() if r.training][-1]
    _, state = runner.session.run_forward(runner.feeds([ids, ids]))
    with pytest.raises(onnxtrain.InputError, match="output gradient for .* is missing"):
        runner.session.run_backward(state, {runner.output_names[0]: torch.ones(())})
