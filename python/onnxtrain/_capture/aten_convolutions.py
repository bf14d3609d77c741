"""Translations of ATen's convolutions, pooling and upsampling into ONNX nodes, for the direct capture
(aten_to_onnx): called as aten_math's are, f(out, b, *args, **kwargs)."""

import numpy as np
import torch

from onnxtrain._capture.aten_values import Untranslatable, floats_to, sizes

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


def _pool_window(dims, kernel_size, stride, padding, ceil_mode):
    if ceil_mode:
        raise Untranslatable("pooling with ceil_mode")
    kernel = _per_dim(kernel_size, dims)
    strides = _per_dim(stride, dims) if stride not in (None, []) else kernel  # (PyTorch's default: the kernel)
    return dict(kernel_shape=kernel, strides=strides, pads=_per_dim(padding, dims) * 2)


def max_pool(dims):
    """max_pool1d/2d/3d: MaxPool (its padding never the maximum, as PyTorch's)."""
    def translate(out, b, x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
        y, _ = b.MaxPool(x, dilations=_per_dim(dilation, dims), **_pool_window(dims, kernel_size, stride, padding,
                                                                             ceil_mode))
        return y  # (without its indices)
    return translate


def avg_pool(dims):
    """avg_pool1d/2d/3d: AveragePool, the padding counted in each average as PyTorch counts it by default."""
    def translate(out, b, x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
                  divisor_override=None):
        if divisor_override is not None:
            raise Untranslatable("average pooling with a divisor_override")
        (x,) = floats_to(b, out.dtype, x)
        return b.AveragePool(x, count_include_pad=int(count_include_pad),
                             **_pool_window(dims, kernel_size, stride, padding, ceil_mode))
    return translate


def _resize(b, x, output_size, scale_factors, **attrs):
    if scale_factors is not None:
        return b.Resize(x, None, b.constant(np.array([1.0, 1.0, *scale_factors], np.float32)), **attrs)
    return b.Resize(x, None, None, b.Concat(b.Shape(x, end=2), sizes(b, list(output_size)), axis=0), **attrs)


def upsample_nearest(out, b, x, output_size=None, scale_factors=None):
    """F.interpolate's nearest: Resize to the size or by the scales, each output index's source the floor of its
    scaled index, as PyTorch's."""
    return _resize(b, x, output_size, scale_factors, mode="nearest", coordinate_transformation_mode="asymmetric",
                   nearest_mode="floor")


def upsample_bilinear(out, b, x, output_size=None, align_corners=False, scale_factors=None):
    """F.interpolate's bilinear: Resize with PyTorch's half-pixel centres (a length of 1 from its first pixel), or
    with the corners aligned."""
    coordinates = "align_corners" if align_corners else "pytorch_half_pixel"
    return _resize(b, x, output_size, scale_factors, mode="linear", coordinate_transformation_mode=coordinates)


TABLE = {
    aten.max_pool1d.default: max_pool(1), aten.max_pool2d.default: max_pool(2), aten.max_pool3d.default: max_pool(3),
    aten.avg_pool1d.default: avg_pool(1), aten.avg_pool2d.default: avg_pool(2), aten.avg_pool3d.default: avg_pool(3),
    aten.upsample_nearest2d.vec: upsample_nearest, aten.upsample_bilinear2d.vec: upsample_bilinear,
    aten.conv1d.default: convolution(1), aten.conv2d.default: convolution(2), aten.conv3d.default: convolution(3),
    aten.adaptive_avg_pool1d.default: adaptive_avg_pool(1), aten.adaptive_avg_pool2d.default: adaptive_avg_pool(2),
}
