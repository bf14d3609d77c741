"""Capture with PyTorch's TorchScript-based ONNX exporter (deprecated by PyTorch; onnxtrain's fallback while PyTorch
ships it): every dynamic dim named `<input>_dim<i>`, training mode kept, onnxtrain's own symbolics registered."""

import io

import onnx
import torch

from onnxtrain._capture import symbolics

symbolics.register()


def fix_scaled_dot_product_attention_casts(model):
    """PyTorch's TorchScript translation of scaled_dot_product_attention casts the scale to the query's c10
    ScalarType number rather than its ONNX type: for a bfloat16 query (autocast) that is 15, ONNX's complex128.
    onnxtrain holds no complex types, so a Cast to 15 can only be that one: it becomes a Cast to bfloat16 (16)."""
    for node in model.graph.node:
        if node.op_type == "Cast":
            for a in node.attribute:
                if a.name == "to" and a.i == onnx.TensorProto.COMPLEX128:
                    a.i = onnx.TensorProto.BFLOAT16


def to_onnx(flat, tensors, names, dynamic_dims, training, opset):
    """The graph of `flat` called on `tensors` (named `names`), with parameters and buffers as inputs."""
    f = io.BytesIO()
    axes = {n: {i: f"{n}_dim{i}" for i in dims} for n, dims in zip(names, dynamic_dims) if dims}
    mode = torch.onnx.TrainingMode.TRAINING if training else torch.onnx.TrainingMode.EVAL
    torch.onnx.export(flat, tensors, f, input_names=names, dynamic_axes=axes, dynamo=False, export_params=False,
                      training=mode, do_constant_folding=False, opset_version=opset)
    model = onnx.load_from_string(f.getvalue())
    fix_scaled_dot_product_attention_casts(model)
    return model
