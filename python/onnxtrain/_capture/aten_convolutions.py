"""Translations of ATen's convolutions and pooling into ONNX nodes, for the direct capture (aten_to_onnx): called as
aten_math's are, f(out, b, *args, **kwargs)."""

import torch

from onnxtrain._capture.aten_values import Untranslatable, floats_to

aten = torch.ops.aten


def _per_dim(v, n):
    return [int(v)] * n if isinstance(v, int) else [int(x) for x in v]


def convolution(dims):
    """conv1d/conv2d/conv3d (x, w, bias, stride, padding, dilation, groups): one Conv; padding 'valid', 'same' (as
    PyTorch pads it: the odd pixel at the end) or sizes."""
    def translate(out, b, x, w, bias=None, stride=1, padding=0, dilation=1, groups=1):
        x, w, bias = floats_to(b, out.dtype, x, w, bias)
        dilation = _per_dim(dilation, dims)
        if padding == "valid":
            padding = [0] * dims
        elif padding == "same":
            if w.shape is None or any(k is None for k in w.shape[2:]):
                raise Untranslatable("padding='same' with a kernel of symbolic size")
            total = [d * (k - 1) for d, k in zip(dilation, w.shape[2:])]
            pads = [t // 2 for t in total] + [t - t // 2 for t in total]
        if padding != "same":
            pads = _per_dim(padding, dims) * 2
        inputs = [x, w] + ([bias] if bias is not None else [])
        return b.Conv(*inputs, strides=_per_dim(stride, dims), pads=pads, dilations=dilation, group=int(groups))
    return translate


def adaptive_avg_pool(dims):
    """adaptive_avg_pool1d/2d to one element per channel (a global average, as vision models' heads pool): a
    ReduceMean over the last `dims` axes; other output sizes are not translated."""
    def translate(out, b, x, output_size):
        if _per_dim(output_size, dims) != [1] * dims:
            raise Untranslatable(f"adaptive average pooling to {list(output_size)}")
        return b.ReduceMean(x, b.ints(list(range(-dims, 0))), keepdims=1)
    return translate


TABLE = {
    aten.conv1d.default: convolution(1), aten.conv2d.default: convolution(2), aten.conv3d.default: convolution(3),
    aten.adaptive_avg_pool1d.default: adaptive_avg_pool(1), aten.adaptive_avg_pool2d.default: adaptive_avg_pool(2),
}
