"""Exports a PyTorch module to ONNX with PyTorch's exporters, every listed axis dynamic.

For training, `export_training` uses the TorchScript-based exporter in TRAINING mode: PyTorch 2.13's
default (torch.export-based) exporter emits BatchNormalization with inference semantics even for a
module in training mode (tests/python/test_exporter_training_mode.py shows both).
"""

import contextlib
import io
import logging
import warnings

import torch


def export(module, args, path, input_names, dynamic_axes):
    """dynamic_axes: {input name: {axis: dim name}}; returns the path."""
    dims = {}  # one Dim object per name, shared by every input that uses it
    shapes = tuple(
        {axis: dims.setdefault(dim_name, torch.export.Dim(dim_name))
         for axis, dim_name in dynamic_axes.get(name, {}).items()}
        for name in input_names
    )
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    # The exporter reports its phases on stdout; keep the caller's output readable.
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, path, input_names=input_names, dynamic_shapes=shapes, dynamo=True)
    return path


def export_training(module, args, path, input_names, dynamic_axes, output_names=None, opset=18):
    """TorchScript-based export in TRAINING mode: training BatchNormalization and Dropout, params as initializers."""
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, path, input_names=input_names, output_names=output_names,
                          dynamic_axes=dynamic_axes, dynamo=False, training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False, opset_version=opset)
    return path
