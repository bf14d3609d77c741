"""Exports a PyTorch module to ONNX with PyTorch's exporter, every listed axis dynamic."""

import contextlib
import io
import logging
import warnings

import torch


def export(module, args, path, input_names, dynamic_axes):
    """dynamic_axes: {input name: {axis: dim name}}; returns the path."""
    shapes = {
        name: {axis: torch.export.Dim(dim_name) for axis, dim_name in axes.items()}
        for name, axes in dynamic_axes.items()
    }
    logging.getLogger("torch.onnx").setLevel(logging.ERROR)
    # The exporter reports its phases on stdout; keep the caller's output readable.
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, path, input_names=input_names, dynamic_shapes=shapes, dynamo=True)
    return path
