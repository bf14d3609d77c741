"""com.onnxtrain.FlashAttention (online softmax over tiles of keys, no (Tq, Tk) buffer) against NumPy, its bfloat16
path against its float32 result rounded, and flash_attention_fusion against the unfused graph it replaces: the same
outputs and gradients under dropout, drawing the same mask. (Float64 gradients: test_gradcheck.py.)"""

import numpy as np
import pytest
import onnx
import torch
from onnx import TensorProto, helper, numpy_helper

import onnxtrain

DOMAINS = [helper.make_opsetid("", 20), helper.make_opsetid("com.onnxtrain", 1)]
TYPES = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE}


def flash_model(dtype, scale, cond, fill, elem=None):
    elem = elem or TYPES[dtype]
    consts = [numpy_helper.from_array(np.array(scale, dtype), "scale")]
    names = ["q", "k", "v", "scale"]
    if cond is not None:
        consts += [numpy_helper.from_array(cond, "cond"), numpy_helper.from_array(np.array(fill, dtype), "fill")]
        names += ["cond", "fill"]
    node = helper.make_node("FlashAttention", names, ["y", "lse"], domain="com.onnxtrain")
    inputs = [helper.make_tensor_value_info(n, elem, None) for n in ["q", "k", "v"]]
    outputs = [helper.make_tensor_value_info("y", elem, None), helper.make_tensor_value_info("lse", TensorProto.FLOAT
                                                                                             if dtype != np.float64
                                                                                             else TensorProto.DOUBLE,
                                                                                             None)]
    graph = helper.make_graph([node], "flash", inputs, outputs, initializer=consts)
    return helper.make_model(graph, opset_imports=DOMAINS).SerializeToString()


def reference(q, k, v, scale, cond, fill):
    s = np.matmul(q.astype(np.float64), np.swapaxes(k, -1, -2).astype(np.float64)) * scale
    if cond is not None:
        s = np.where(cond, fill, s)
    m = s.max(-1, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    e = np.exp(s - m)
    total = e.sum(-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.matmul(e / total, v.astype(np.float64)), (np.log(total) + m)[..., 0]


T = 70
MASKS = {
    "none": None,
    "causal": np.triu(np.ones((T, 300), bool), 231),  # two tiles of keys; the first rows skip most of them
    "padding": np.broadcast_to(np.arange(300) >= 250, (2, 1, 1, 300)).copy(),
    "per_batch": np.stack([np.triu(np.ones((T, 300), bool), 231), np.tril(np.ones((T, 300), bool), -1)])[:, None],
    "rows_fully_masked": np.concatenate([np.ones((3, 300), bool), np.triu(np.ones((T - 3, 300), bool), 234)]),
}
CASES = [(m, f) for m in MASKS for f in ([-np.inf, np.finfo(np.float32).min, -3.0] if MASKS[m] is not None else [0])
         if (m, f) != ("rows_fully_masked", -np.inf)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mask,fill", CASES)
def test_flash_attention_matches_numpy(dtype, mask, fill):
    rng = np.random.default_rng(1)
    q = rng.standard_normal((2, 3, T, 16)).astype(dtype)
    k = rng.standard_normal((2, 3, 300, 16)).astype(dtype)
    v = rng.standard_normal((2, 3, 300, 8)).astype(dtype)
    out = onnxtrain.Session.from_bytes(flash_model(dtype, 0.25, MASKS[mask], fill)).run({"q": q, "k": k, "v": v})
    y, lse = reference(q, k, v, 0.25, MASKS[mask], fill)
    np.testing.assert_allclose(out["y"], y, rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(out["lse"], lse, rtol=2e-5, atol=2e-6)


def test_keys_and_values_shared_by_heads_are_broadcast():
    rng = np.random.default_rng(2)
    q = rng.standard_normal((2, 6, 40, 8)).astype(np.float32)
    k = rng.standard_normal((2, 1, 40, 8)).astype(np.float32)
    v = rng.standard_normal((2, 1, 40, 8)).astype(np.float32)
    causal = np.triu(np.ones((40, 40), bool), 1)
    out = onnxtrain.Session.from_bytes(flash_model(np.float32, 0.3, causal, -np.inf)).run({"q": q, "k": k, "v": v})
    np.testing.assert_allclose(out["y"], reference(q, k, v, 0.3, causal, -np.inf)[0], rtol=2e-5, atol=2e-6)


def test_a_fully_masked_row_of_minus_infinity_is_nan_as_softmax_makes_it():
    q, k, v = np.ones((1, 4, 8), np.float32), np.ones((1, 4, 8), np.float32), np.ones((1, 4, 2), np.float32)
    cond = np.array([[True] * 4, [False, True, True, True], [False, False, True, True], [False] * 4])
    y = onnxtrain.Session.from_bytes(flash_model(np.float32, 1.0, cond, -np.inf)).run({"q": q, "k": k, "v": v})["y"]
    assert np.isnan(y[0, 0]).all() and not np.isnan(y[0, 1:]).any()


def test_bfloat16_is_the_float32_result_within_its_rounding():
    """Within a few bf16 units of the float32 result (where the CPU multiplies bf16 natively the probabilities are
    rounded to bf16 for their product, else it is the float32 result rounded: bf16_flash_attention_test.cpp checks
    both paths)."""
    rng = np.random.default_rng(3)
    q, k, v = (torch.from_numpy(rng.standard_normal(s).astype(np.float32)).to(torch.bfloat16)
               for s in [(2, 3, 50, 16), (2, 3, 50, 16), (2, 3, 50, 16)])
    causal = np.triu(np.ones((50, 50), bool), 1)
    low = onnxtrain.Session.from_bytes(flash_model(np.float32, 0.25, causal, -np.inf, TensorProto.BFLOAT16))
    wide = onnxtrain.Session.from_bytes(flash_model(np.float32, 0.25, causal, -np.inf))
    got = torch.from_dlpack(low.run({"q": q, "k": k, "v": v})["y"])
    want = torch.tensor(wide.run({"q": q.float().numpy(), "k": k.float().numpy(), "v": v.float().numpy()})["y"])
    assert got.dtype == torch.bfloat16
    assert (got.float() - want).abs().max() <= 2 ** -6 * want.abs().max()


def attention_with_dropout(keep_mask_output, heads_split=False):
    """Loss = sum(MatMul(Dropout(AttentionSoftmax(q, kt)), v) * r); with the Dropout's mask a graph output (which
    keeps the fusion away) or not (fused). `heads_split`: q, k and v come in as (B, T, H, d) (q4, k4, v4), transposed
    into heads, and Y is transposed back before r (sequence-major r) multiplies it, as models split and merge heads."""
    rng = np.random.default_rng(4)
    consts = [numpy_helper.from_array(np.array(0.25, np.float32), "scale"),
              numpy_helper.from_array(np.triu(np.ones((40, 40), bool), 1), "cond"),
              numpy_helper.from_array(np.array(-np.inf, np.float32), "fill"),
              numpy_helper.from_array(np.array(0.3, np.float32), "ratio"),
              numpy_helper.from_array(np.array(True), "training"),
              numpy_helper.from_array(rng.uniform(0.5, 1.5, (2, 3, 40, 8)).astype(np.float32), "r")]
    nodes = [helper.make_node("AttentionSoftmax", ["q", "kt", "scale", "cond", "fill"], ["p"], domain="com.onnxtrain"),
             helper.make_node("Dropout", ["p", "ratio", "training"], ["pd", "mask"], name="drop"),
             helper.make_node("MatMul", ["pd", "v"], ["y"]),
             helper.make_node("Mul", ["y", "r"], ["w"]),
             helper.make_node("ReduceSum", ["w"], ["loss"], keepdims=0)]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
              for n, s in [("q", [2, 3, 40, 8]), ("kt", [2, 3, 8, 40]), ("v", [2, 3, 40, 8])]]
    outputs = [helper.make_tensor_value_info("loss", TensorProto.FLOAT, []),
               helper.make_tensor_value_info("y", TensorProto.FLOAT, None)]
    if heads_split:
        consts[-1] = numpy_helper.from_array(numpy_helper.to_array(consts[-1]).transpose(0, 2, 1, 3).copy(), "r")
        nodes[2:4] = [helper.make_node("MatMul", ["pd", "v"], ["heads"]),
                      helper.make_node("Transpose", ["heads"], ["y"], perm=[0, 2, 1, 3]),
                      helper.make_node("Mul", ["y", "r"], ["w"])]
        nodes[:0] = [helper.make_node("Transpose", [x[0] + "4"], [x], perm=perm)
                     for x, perm in [("q", [0, 2, 1, 3]), ("kt", [0, 2, 3, 1]), ("v", [0, 2, 1, 3])]]
        inputs = [helper.make_tensor_value_info(n + "4", TensorProto.FLOAT, [2, 40, 3, 8]) for n in ["q", "k", "v"]]
        outputs = outputs[:1]
    if keep_mask_output:
        outputs.append(helper.make_tensor_value_info("mask", TensorProto.BOOL, None))
    graph = helper.make_graph(nodes, "attention", inputs, outputs, initializer=consts)
    model = helper.make_model(graph, opset_imports=DOMAINS).SerializeToString()
    return onnxtrain.Session.for_training(model, [i.name for i in inputs], "loss")


def test_fusion_draws_the_unfused_dropout_mask_and_gives_its_gradients(tmp_path):
    rng = np.random.default_rng(5)
    feeds = {"q": rng.standard_normal((2, 3, 40, 8)).astype(np.float32),
             "kt": rng.standard_normal((2, 3, 8, 40)).astype(np.float32),
             "v": rng.standard_normal((2, 3, 40, 8)).astype(np.float32)}
    results = []
    for unfused in [True, False]:
        session = attention_with_dropout(unfused)
        session.save(str(tmp_path / "optimized.onnx"))
        ops = {n.op_type for n in onnx.load(str(tmp_path / "optimized.onnx")).graph.node}
        assert ("FlashAttention" in ops) != unfused and ("Dropout" in ops) == unfused
        out, state = session.run_forward(dict(feeds), seed=11)
        results.append((out, session.run_backward(state)))
    (out_u, grads_u), (out_f, grads_f) = results
    assert 0.2 < 1 - out_u["mask"].mean() < 0.4  # dropout did drop
    np.testing.assert_allclose(out_f["y"], out_u["y"], rtol=1e-5, atol=1e-6)
    for name in feeds:
        np.testing.assert_allclose(grads_f[name], grads_u[name], rtol=1e-4, atol=1e-5)


class SDPA(torch.nn.Module):
    """Attention through scaled_dot_product_attention; `gqa`: 4 query heads share 2 key-value heads (enable_gqa)."""

    def __init__(self, mask, gqa=False, dropout=0.0):
        super().__init__()
        self.kv_heads = 2 if gqa else 4
        self.q = torch.nn.Linear(16, 32)
        self.kv = torch.nn.Linear(16, 16 * self.kv_heads)
        self.mask, self.gqa, self.dropout = mask, gqa, dropout

    def forward(self, x):
        q = self.q(x).view(2, 12, 4, 8).transpose(1, 2)
        k, v = self.kv(x).view(2, 12, 2, self.kv_heads, 8).permute(2, 0, 3, 1, 4)
        keep = torch.ones(12, 12, dtype=torch.bool).tril()
        keep[:, 9:] = False  # three padding keys
        keep[:2, :] = True
        rows = torch.stack([keep, keep.T]).unsqueeze(1).repeat(1, 4, 1, 1) & (torch.arange(12) < 10)[:, None]
        mask = {"causal": None,
                "additive": torch.zeros(12, 12).masked_fill(~keep, float("-inf")),
                "bool": keep,
                "bool_rows": rows,  # per batch and head, with rows fully masked (PyTorch gives them zeros)
                }[self.mask]
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None,
                                                             dropout_p=self.dropout, enable_gqa=self.gqa)
        return (y * torch.arange(8.0)).sum()


def optimized_ops(path):
    return {n.op_type for n in onnx.load(str(path / "SDPA_train_optimized.onnx")).graph.node}


def keys_repeated(path):
    """Whether a fused attention reads keys or values made by Expand or Tile (grouped-query attention's K and V
    repeated per query head rather than broadcast)."""
    nodes = onnx.load(str(path / "SDPA_train_optimized.onnx")).graph.node
    producer = {o: n for n in nodes for o in n.output}
    todo = [x for n in nodes if n.op_type == "FlashAttention" for x in n.input[1:3]]
    while todo:
        node = producer.get(todo.pop())
        if node is not None and node.op_type in ("Expand", "Tile"):
            return True
        if node is not None and node.op_type in ("Reshape", "Transpose", "Unsqueeze", "Squeeze", "Identity"):
            todo.append(node.input[0])
    return False


@pytest.mark.parametrize("exporter", ["auto", "torchscript"])  # (one translation serves both: translations)
@pytest.mark.parametrize("gqa", [False, True])
@pytest.mark.parametrize("mask", ["causal", "additive", "bool", "bool_rows"])
def test_scaled_dot_product_attention_is_fused_and_matches_eager(mask, gqa, exporter, tmp_path, monkeypatch):
    monkeypatch.delenv("ONNXTRAIN_EXPORTER", raising=False)
    torch.manual_seed(0)
    eager = SDPA(mask, gqa)
    ours = onnxtrain.Module(SDPA(mask, gqa), onnxtrain.Options(save_onnx=str(tmp_path), exporter=exporter))
    ours.load_state_dict(eager.state_dict())
    x = torch.randn(2, 12, 16)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    got, want = ours(xa), eager(xb)
    got.backward()
    want.backward()
    ops = optimized_ops(tmp_path)
    assert "FlashAttention" in ops and "Softmax" not in ops and not keys_repeated(tmp_path), ops
    assert got.item() == pytest.approx(want.item(), rel=1e-5)
    torch.testing.assert_close(xa.grad, xb.grad, rtol=1e-4, atol=1e-5)
    for (n, p), q in zip(ours.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=n)


def test_the_torchscript_exporter_takes_bfloat16_constants():
    """Under bf16 autocast the attention's scale is a bfloat16 constant; the TorchScript-based exporter (auto's
    fallback) takes it by its bits, as numpy holds it in ml_dtypes' type (it raised a TypeError before)."""
    torch.manual_seed(0)
    eager = SDPA("causal")
    ours = onnxtrain.Module(SDPA("causal"), onnxtrain.Options(exporter="torchscript"))
    ours.load_state_dict(eager.state_dict())
    x = torch.randn(2, 12, 16)
    with torch.autocast("cpu", torch.bfloat16):
        got, want = ours(x), eager(x)
    assert ours.runners()[0].exported.exporter == "torchscript"
    assert got.item() == pytest.approx(want.item(), rel=2e-2)


class CausalSDPA(torch.nn.Module):
    def forward(self, q, k, v):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)


def test_attention_of_dynamic_shapes_is_fused_and_matches_eager(tmp_path):
    """scaled_dot_product_attention on the module's own inputs, every dim dynamic: the exporter divides the scores by
    the square root of the head size read off Q's shape (a CastLike to the scores' dtype), which the fusion takes in
    as the scale's reciprocal."""
    torch.manual_seed(0)
    ours = onnxtrain.Module(CausalSDPA(), onnxtrain.Options(save_onnx=str(tmp_path), capture_cache=""))
    q, k, v = (torch.randn(2, 3, 70, 16) for _ in range(3))
    dy = torch.randn(2, 3, 70, 16)
    grads = []
    for module in (ours, CausalSDPA()):
        xs = [x.clone().requires_grad_() for x in (q, k, v)]
        y = module(*xs)
        y.backward(dy)
        grads.append((y.detach(), *(x.grad for x in xs)))
    ops = {n.op_type for n in onnx.load(str(tmp_path / "CausalSDPA_train_optimized.onnx")).graph.node}
    assert "FlashAttention" in ops and "Softmax" not in ops and "CastLike" not in ops, ops
    for got, want in zip(*grads):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def test_scaled_dot_product_attention_dropout_drops_in_training(tmp_path):
    """PyTorch's own translation writes a Dropout without training_mode, which ONNX runs as the identity."""
    torch.manual_seed(0)
    plain = onnxtrain.Module(SDPA("causal", True))
    dropped = onnxtrain.Module(SDPA("causal", True, dropout=0.5), onnxtrain.Options(save_onnx=str(tmp_path)))
    dropped.load_state_dict(plain.state_dict())
    x = torch.randn(2, 12, 16)
    a, b, c = plain(x).item(), dropped(x).item(), dropped(x).item()
    assert "FlashAttention" in optimized_ops(tmp_path) and "Dropout" not in optimized_ops(tmp_path)
    assert a != b and b != c  # dropped, and a new mask each step


class RepeatedKV(torch.nn.Module):
    """Grouped-query attention as transformers writes it for exporters: K and V repeated per query head
    (repeat_kv), then scaled_dot_product_attention with a padding mask."""

    def __init__(self):
        super().__init__()
        self.q, self.kv = torch.nn.Linear(16, 32), torch.nn.Linear(16, 32)

    def forward(self, x, keep):
        q = self.q(x).view(2, 12, 4, 8).transpose(1, 2)
        k, v = (t.transpose(1, 2) for t in self.kv(x).view(2, 12, 2, 2, 8).unbind(2))
        k = k.float()  # (under autocast: float32 keys, as the rotary embedding leaves them, cast after repeat_kv)
        k, v = (t[:, :, None].expand(2, 2, 2, 12, 8).reshape(2, 4, 12, 8) for t in (k, v))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None, None, :])
        return (y * torch.arange(8.0)).sum()


@pytest.mark.parametrize("bf16", [False, True])
def test_repeated_keys_and_values_are_read_once_per_group(bf16, tmp_path):
    torch.manual_seed(0)
    eager = RepeatedKV()
    ours = onnxtrain.Module(RepeatedKV(), onnxtrain.Options(save_onnx=str(tmp_path)))
    ours.load_state_dict(eager.state_dict())
    x, keep = torch.randn(2, 12, 16), torch.arange(12) < torch.tensor([[12], [9]])
    with torch.autocast("cpu", torch.bfloat16, enabled=bf16):
        got, want = ours(x, keep), eager(x, keep)
    got.backward()
    want.backward()
    nodes = onnx.load(str(tmp_path / "RepeatedKV_train_optimized.onnx")).graph.node
    fused = [n for n in nodes if n.op_type == "FlashAttention"]
    assert [a.i for n in fused for a in n.attribute if a.name == "kv_groups"] == [2]
    assert got.item() == pytest.approx(want.item(), rel=2e-2 if bf16 else 1e-5)
    for (n, p), q in zip(ours.named_parameters(), eager.parameters()):
        if bf16:
            assert torch.nn.functional.cosine_similarity(p.grad.flatten(), q.grad.flatten(), dim=0) >= 0.999, n
        else:
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=n)


class HeadsSplitAndMerged(torch.nn.Module):
    """GPT-2's attention: one projection split into Q, K and V, each viewed as (B, T, H, d) and transposed into heads,
    causal attention with dropout, the heads transposed back and merged for the output projection."""

    def __init__(self, dropout):
        super().__init__()
        self.qkv, self.out, self.dropout = torch.nn.Linear(32, 96), torch.nn.Linear(32, 32), dropout

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = (h.view(b, t, 4, 8).transpose(1, 2) for h in self.qkv(x).split(32, dim=2))
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout)
        return self.out(y.transpose(1, 2).reshape(b, t, 32)).sin().sum()


@pytest.mark.parametrize("bf16", [False, True])
def test_heads_split_and_merged_are_read_and_written_where_they_lie(bf16, tmp_path):
    """The attention_layout pass: the fused attention reads Q, K and V where the projection writes them, side by side
    in its one output (packed_heads: no Split of it, no Concat of their gradients), and writes Y as the merge reads it
    (sequence_major), so no Transpose is left in forward or backward; as eager computes it."""
    torch.manual_seed(0)
    eager = HeadsSplitAndMerged(0.0)
    ours = onnxtrain.Module(HeadsSplitAndMerged(0.0), onnxtrain.Options(save_onnx=str(tmp_path)))
    ours.load_state_dict(eager.state_dict())
    x = torch.randn(2, 70, 32)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    with torch.autocast("cpu", torch.bfloat16, enabled=bf16):
        got, want = ours(xa), eager(xb)
    got.backward()
    want.backward()
    graph = onnx.load(str(tmp_path / "HeadsSplitAndMerged_train_optimized.onnx")).graph
    nodes = graph.node
    fused = [n for n in nodes if n.op_type in ("FlashAttention", "FlashAttentionGrad")]
    floats = {v.name for v in graph.value_info if v.type.tensor_type.elem_type in (onnx.TensorProto.FLOAT,
                                                                                 onnx.TensorProto.BFLOAT16)}
    moved = {n.op_type for n in nodes if n.op_type in ("Transpose", "Split", "Concat") and n.output[0] in floats}
    assert len(fused) == 2 and fused[0].output[0] in floats and not moved, [n.op_type for n in nodes]
    assert all([list(a.ints) for a in n.attribute if a.name == "sequence_major"] == [[1, 1, 1, 1]] for n in fused)
    assert all([a.i for a in n.attribute if a.name == "packed_heads"] == [4] for n in fused)
    assert got.item() == pytest.approx(want.item(), rel=2e-2 if bf16 else 1e-5)
    for (n, p), q in [*zip(ours.named_parameters(), eager.parameters()), (("x", xa), xb)]:
        g, w = p.grad, q.grad
        if bf16:
            assert torch.nn.functional.cosine_similarity(g.flatten().float(), w.flatten().float(), dim=0) >= 0.999, n
        else:
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5, msg=n)



def test_heads_split_and_merged_draw_the_unfused_dropout_mask(tmp_path):
    """Dropout's draw numbers the scores (B, H, Tq, Tk) whatever the layout: the attention laid out (sequence_major, no
    Transpose left) gives the unfused attention's loss and gradients, its Dropout keeping the same elements."""
    rng = np.random.default_rng(6)
    heads = {x: rng.standard_normal((2, 40, 3, 8)).astype(np.float32) for x in ["q4", "k4", "v4"]}
    laid = attention_with_dropout(False, heads_split=True)
    laid.save(str(tmp_path / "laid.onnx"))
    nodes = onnx.load(str(tmp_path / "laid.onnx")).graph.node
    flags = [list(a.ints) for n in nodes if n.op_type == "FlashAttention" for a in n.attribute
             if a.name == "sequence_major"]
    assert flags == [[1, 1, 1, 1]] and "Transpose" not in {n.op_type for n in nodes}
    out, state = laid.run_forward(dict(heads), seed=11)
    grads = laid.run_backward(state)
    unfused = attention_with_dropout(True)
    feeds = {"q": heads["q4"].transpose(0, 2, 1, 3).copy(), "kt": heads["k4"].transpose(0, 2, 3, 1).copy(),
             "v": heads["v4"].transpose(0, 2, 1, 3).copy()}
    want, state = unfused.run_forward(feeds, seed=11)
    want_grads = unfused.run_backward(state)
    assert 0.2 < 1 - want["mask"].mean() < 0.4  # dropout did drop
    np.testing.assert_allclose(out["loss"], want["loss"], rtol=1e-5)
    for x, perm in [("q", (0, 2, 1, 3)), ("kt", (0, 3, 1, 2)), ("v", (0, 2, 1, 3))]:
        np.testing.assert_allclose(grads[x[0] + "4"], want_grads[x].transpose(perm), rtol=1e-4, atol=1e-5)
