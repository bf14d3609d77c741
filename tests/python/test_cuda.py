"""The CUDA backend from Python: CUDA tensors cross by DLPack without copies, and a session on the GPU computes
what the CPU kernels and PyTorch on CUDA compute. Skipped without a GPU or without CUDA in the build."""
import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

import onnxtrain

pytestmark = pytest.mark.skipif(
    not (torch.cuda.is_available() and onnxtrain._onnxtrain.device_available("cuda")),
    reason="no CUDA device, or onnxtrain built without CUDA",
)


def test_cuda_tensors_cross_without_copies():
    for dtype in (torch.float32, torch.bfloat16, torch.int64):
        x = torch.arange(15, device="cuda").reshape(3, 5).to(dtype)
        t = onnxtrain._onnxtrain.from_dlpack(x)
        assert t.device == "cuda:0" and t.data_ptr == x.data_ptr() and t.shape == (3, 5)
        assert t.__dlpack_device__() == (2, 0)
        y = torch.from_dlpack(t)
        assert y.device.type == "cuda" and y.data_ptr() == x.data_ptr() and torch.equal(y, x)


def mlp_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])
    w = helper.make_tensor_value_info("w", TensorProto.FLOAT, [64, 48])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, [48])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 48])
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Add", ["h", "b"], ["hb"]),
        helper.make_node("Gelu", ["hb"], ["g"]),
        helper.make_node("Softmax", ["g"], ["y"], axis=-1),
    ]
    graph = helper.make_graph(nodes, "mlp", [x, w, b], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)]).SerializeToString()


def test_a_session_on_the_gpu_matches_the_cpu_and_pytorch():
    gen = torch.Generator().manual_seed(0)
    x, w, b = torch.randn(32, 64, generator=gen), torch.randn(64, 48, generator=gen), torch.randn(48, generator=gen)
    on_cpu = onnxtrain.Session.from_bytes(mlp_model()).run({"x": x, "w": w, "b": b})["y"]
    gpu = onnxtrain.Session.from_bytes(mlp_model(), device="cuda")
    out = gpu.run({"x": x.cuda(), "w": w.cuda(), "b": b.cuda()})["y"]
    assert out.device == "cuda:0"
    got = torch.from_dlpack(out)
    assert got.is_cuda
    want = torch.softmax(torch.nn.functional.gelu(x.cuda() @ w.cuda() + b.cuda()), -1)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got.cpu().numpy(), on_cpu, rtol=1e-5, atol=1e-6)


def test_host_inputs_on_a_gpu_session_are_refused():
    gpu = onnxtrain.Session.from_bytes(mlp_model(), device="cuda")
    with pytest.raises(onnxtrain.InputError, match="cuda:0"):
        gpu.run({"x": torch.zeros(2, 64), "w": torch.zeros(64, 48).cuda(), "b": torch.zeros(48).cuda()})
