"""Under bf16 autocast a product whose 16-bit output is only cast to float32 writes float32 itself
(cast_into_product): a weight's gradient (dY^T X, cast to the float32 parameter's gradient) and a layer's output
added to a float32 residual stream. No such Cast is left, and the step trains as eager's (cosine >= 0.999)."""

import onnx
import torch

import onnxtrain


class Residual(torch.nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.up, self.down = torch.nn.Linear(d, 2 * d), torch.nn.Linear(2 * d, d, bias=False)

    def forward(self, x):  # x float32: the residual stream stays float32 under autocast
        h = x + self.down(torch.relu(self.up(x)))
        return (h * h).mean()


def test_products_write_float32_where_only_a_cast_reads_them(tmp_path):
    torch.manual_seed(0)
    eager = Residual()
    ours = onnxtrain.Module(Residual(), onnxtrain.Options(save_onnx=str(tmp_path)))
    ours.load_state_dict(eager.state_dict())
    x = torch.randn(4, 6, 32)
    for m in (ours, eager):
        with torch.autocast("cpu", torch.bfloat16):
            loss = m(x)
        loss.backward()
    for (name, p), q in zip(ours.named_parameters(), eager.parameters()):
        assert p.grad.dtype == torch.float32, name
        cos = torch.nn.functional.cosine_similarity(p.grad.flatten().double(), q.grad.flatten().double(), dim=0)
        assert cos >= 0.999, name
    graph = onnx.load(str(tmp_path / "Residual_train_optimized.onnx")).graph
    made = {o: n for n in graph.node for o in n.output}
    products = {"Linear", "FusedMatMul", "Gemm", "MatMul"}

    def source(value):  # the node a value comes from, through Reshapes
        node = made.get(value)
        return source(node.input[0]) if node is not None and node.op_type == "Reshape" else node

    casts_of_products = [n.name for n in graph.node if n.op_type == "Cast" and source(n.input[0]) is not None
                         and source(n.input[0]).op_type in products]
    assert not casts_of_products, casts_of_products
    to_f32 = [n for n in graph.node if n.op_type in products and any(a.name == "to" for a in n.attribute)]
    assert len(to_f32) == 3, [n.op_type for n in graph.node]  # down's output, the two weights' gradients
