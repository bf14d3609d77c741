"""A tied embedding's gradient (a language model's input embedding and head sharing one weight): the embedding's
scatter-add of its rows goes into the head's dW where it lies, instead of into zeros of the vocabulary's size
summed with dW afterwards; the gradients as eager's, and the step's predicted peak lower by that buffer."""

import onnx
import torch
import torch.nn.functional as F

import onnxtrain


class TiedLM(torch.nn.Module):
    def __init__(self, vocab=64, d=16):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, d)
        self.mix = torch.nn.Linear(d, d)

    def forward(self, ids, targets):
        h = self.emb(ids)
        logits = F.linear(torch.tanh(self.mix(h)), self.emb.weight)  # the head, tied to the embedding
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def test_the_tied_gradient_is_one_scatter_into_the_heads(tmp_path):
    torch.manual_seed(0)
    eager = TiedLM()
    ours = onnxtrain.Module(TiedLM(), onnxtrain.Options(save_onnx=str(tmp_path)))
    ours.load_state_dict(eager.state_dict())
    ids = torch.randint(0, 64, (3, 10))
    got, want = ours(ids, torch.roll(ids, -1, 1)), eager(ids, torch.roll(ids, -1, 1))
    got.backward()
    want.backward()
    torch.testing.assert_close(got, want)
    for (name, p), q in zip(ours.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=0, atol=1e-5 * q.grad.abs().max().item(), msg=name)
    graph = onnx.load(str(tmp_path / "TiedLM_train_optimized.onnx")).graph
    ops = [n.op_type for n in graph.node]
    scatters = [n for n in graph.node if n.op_type == "ScatterND"]
    assert len(scatters) == 1 and "Sum" not in ops, ops
    made_by = {o: n for n in graph.node for o in n.output}
    data = made_by.get(scatters[0].input[0])
    assert data is None or data.op_type != "ConstantOfShape", "scattered into zeros"
