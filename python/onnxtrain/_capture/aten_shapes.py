"""Translations of ATen's shape, indexing and fill ops, and of arithmetic on sizes, into ONNX nodes for the direct
capture (aten_to_onnx), called as aten_math's are. A size torch.export leaves symbolic is an int64 Value of shape
[1]; one it knows stays an int."""

import operator

import numpy as np
import onnx_ir as ir
import torch

from onnxtrain._capture.aten_values import INT64, INT64_MAX, Untranslatable, cast, scalar_of, sizes, typed
from onnxtrain._capture.graph_builder import Value

aten = torch.ops.aten


def cat(out, b, tensors, dim=0):
    return b.Concat(*[cast(b, t, out.dtype) for t in tensors], axis=dim)


def stack(out, b, tensors, dim=0):
    """The tensors each with a dim of 1 at `dim` (of the result's rank), concatenated along it."""
    return b.Concat(*[b.Unsqueeze(cast(b, t, out.dtype), b.ints([dim])) for t in tensors], axis=dim)


def split(out, b, x, split_size, dim=0):
    """torch.split and torch.chunk: the parts' sizes as the graph records them (static ones only)."""
    dim %= len(x.shape)
    parts = [v.shape[dim] for v in out.val]
    if any(not isinstance(p, int) for p in parts):
        raise Untranslatable("a split of a dim of symbolic size")
    if len(parts) == 1:
        return (x,)
    return b.op("Split", x, b.ints(parts), axis=dim, _outputs=len(parts))


def chunk(out, b, x, chunks, dim=0):
    return split(out, b, x, None, dim)


def expand(out, b, x, size, implicit=False):
    """-1 keeps a dim: Expand's broadcast keeps it for 1."""
    return b.Expand(x, sizes(b, [1 if isinstance(s, int) and s == -1 else s for s in size]))


def expand_as(out, b, x, other):
    return b.Expand(x, b.Shape(other))


def flatten(out, b, x, start_dim=0, end_dim=-1):
    """Dims start_dim..end_dim as one: the input's shape with that span as -1."""
    if x.shape is None:
        raise Untranslatable("flatten of a value of unknown rank")
    rank = len(x.shape)
    start, end = start_dim % max(rank, 1), end_dim % max(rank, 1)
    parts = [b.Shape(x, end=start)] if start else []
    parts.append(b.ints([-1]))
    if end + 1 < rank:
        parts.append(b.Shape(x, start=end + 1))
    return b.Reshape(x, b.Concat(*parts, axis=0) if len(parts) > 1 else parts[0])


def reshape(out, b, x, shape):
    return b.Reshape(x, sizes(b, list(shape)), allowzero=1)


def unsqueeze(out, b, x, dim):
    return b.Unsqueeze(x, b.ints([dim]))


def squeeze(out, b, x, dims=None):
    """The dims of size 1 among `dims` removed (one of symbolic size only where the graph's value shows it
    kept)."""
    rank = len(x.shape)
    dims = range(rank) if dims is None else [dims] if isinstance(dims, int) else dims
    dims = sorted({d % rank for d in dims if x.shape[d % rank] == 1})
    if rank - out.rank != len(dims):
        raise Untranslatable("a squeeze of a dim of symbolic size")
    return b.Squeeze(x, b.ints(dims)) if dims else x


def transpose(out, b, x, d0, d1):
    perm = list(range(len(x.shape)))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return b.Transpose(x, perm=perm)


def permute(out, b, x, dims):
    rank = len(x.shape)
    return b.Transpose(x, perm=[d % rank for d in dims])


def movedim(out, b, x, source, destination):
    """The dims `source` moved to `destination`, the others in their order."""
    rank = len(x.shape)
    source = [d % rank for d in ([source] if isinstance(source, int) else source)]
    destination = [d % rank for d in ([destination] if isinstance(destination, int) else destination)]
    rest = iter(d for d in range(rank) if d not in source)
    placed = dict(zip(destination, source))
    return b.Transpose(x, perm=[placed[i] if i in placed else next(rest) for i in range(rank)])


def narrow(out, b, x, dim, start, length):
    begin = sizes(b, [start])
    end = b.ints([start + length]) if isinstance(start, int) and isinstance(length, int) else b.Add(
        begin, sizes(b, [length]))
    return b.Slice(x, begin, end, b.ints([dim]))


def index_select(out, b, x, dim, index):
    return b.Gather(x, index, axis=dim)


def reshape_as(out, b, x, other):
    return b.Reshape(x, b.Shape(other))


def trilu(upper):
    """triu and tril: the elements on and above (below) the `diagonal`-th diagonal, the others zeros."""
    def translate(out, b, x, diagonal=0):
        return b.Trilu(x, scalar_of(b, diagonal), upper=int(upper))
    return translate


def slice_(out, b, x, dim=0, start=None, end=None, step=1):
    start = 0 if start is None else start
    end = INT64_MAX if end is None else end
    size = x.shape[dim]
    if start == 0 and step == 1 and isinstance(end, int) and (end == INT64_MAX or size is not None and end >= size):
        return x  # the whole dim (x[:, :, None] slices every dim it keeps)
    return b.Slice(x, sizes(b, [start]), sizes(b, [end]), b.ints([dim]), b.ints([step]))


def flip(out, b, x, dims):
    rank = len(x.shape)
    axes = [d % rank for d in dims]
    n = len(axes)
    return b.Slice(x, b.ints([-1] * n), b.ints([-INT64_MAX] * n), b.ints(axes), b.ints([-1] * n))


def select(out, b, x, dim, index):
    return b.Gather(x, scalar_of(b, index), axis=dim)


def index(out, b, x, indices):
    """x[i0, i1, ...] with index tensors on the leading dims (broadcast together), or on one dim alone."""
    used = [i for i, t in enumerate(indices) if t is not None]
    if any(indices[i].dtype not in (INT64, ir.DataType.INT32) for i in used):
        raise Untranslatable("an index by a mask")
    if len(used) == 1:
        return b.Gather(x, indices[used[0]], axis=used[0])
    if used != list(range(len(used))):
        raise Untranslatable("index tensors on dims that are not the leading ones")
    tensors = [cast(b, indices[i], INT64) for i in used]
    shape = b.Shape(b.Max(*tensors))
    stacked = b.Concat(*[b.Unsqueeze(b.Expand(t, shape), b.ints([-1])) for t in tensors], axis=-1)
    return b.GatherND(x, stacked)


def gather(out, b, x, dim, idx, sparse_grad=False):
    return b.GatherElements(x, idx, axis=dim)


def arange(out, b, *args, **kwargs):
    """Range; integer bounds counted in int64 and cast after, so that onnxtrain knows the length as a size (a
    float Range's length is a fresh symbol to it)."""
    numbers = [a for a in args if isinstance(a, (int, float, Value))]
    start, end, step = {1: lambda n: (0, n[0], 1), 2: lambda n: (n[0], n[1], 1),
                        3: lambda n: tuple(n)}[len(numbers)](numbers)
    integral = all(isinstance(v, int) or isinstance(v, Value) and v.dtype == INT64 for v in (start, end, step))
    dtype = INT64 if integral else out.dtype

    def scalar(v):
        return cast(b, b.Squeeze(v), dtype) if isinstance(v, Value) else cast(b, v, dtype)
    r = b.Range(scalar(start), scalar(end), scalar(step))
    return r if dtype == out.dtype else b.Cast(r, to=int(out.dtype))


def cumsum(out, b, x, dim, dtype=None):
    return b.CumSum(cast(b, x, out.dtype), b.constant(np.array(dim, np.int64)))


def diff(out, b, x, n=1, dim=-1, prepend=None, append=None):
    if n != 1:
        raise Untranslatable("diff of order other than 1")
    parts = [p for p in (prepend, x, append) if p is not None]
    whole = b.Concat(*[cast(b, p, out.dtype) for p in parts], axis=dim) if len(parts) > 1 else x
    axis = b.ints([dim])
    later = b.Slice(whole, b.ints([1]), b.ints([INT64_MAX]), axis)
    earlier = b.Slice(whole, b.ints([0]), b.ints([-1]), axis)
    if out.dtype == ir.DataType.BOOL:
        return b.Xor(later, earlier)
    return b.Sub(later, earlier)


def pad(out, b, x, pad, mode="constant", value=None):
    if mode != "constant" or len(pad) % 2:
        raise Untranslatable(f"a pad of mode {mode}")
    pairs = len(pad) // 2
    pads = sizes(b, [pad[2 * i] for i in range(pairs)] + [pad[2 * i + 1] for i in range(pairs)])
    axes = b.ints([-1 - i for i in range(pairs)])
    return b.Pad(x, pads, cast(b, 0 if value is None else value, out.dtype), axes, mode="constant")


def _fill(out, b, shape, value):
    """ConstantOfShape of `shape` (an int64 Value) holding `value` in out's dtype."""
    if isinstance(value, Value):
        raise Untranslatable("a fill by a tensor")
    return b.ConstantOfShape(shape, value=ir.tensor(np.array([value], dtype=out.dtype.numpy())))


def full(out, b, size, fill_value, **kwargs):
    return _fill(out, b, sizes(b, list(size)), fill_value)


def _filled(value, like=False):
    """ones/zeros (size, ...), new_ones/new_zeros (x, size, ...), or with `like` ones_like/zeros_like/full_like
    (x, [fill,] ...): `value` None for full_like's fill."""
    def translate(out, b, *args, **kwargs):
        if like:
            return _fill(out, b, b.Shape(args[0]), args[1] if value is None else value)
        size = args[1] if isinstance(args[0], Value) else args[0]
        return _fill(out, b, sizes(b, list(size)), value)
    return translate


def sym_size(out, b, x, dim):
    if isinstance(out.val, int):
        return out.val
    return typed(b.Shape(x, start=dim, end=dim + 1 if dim != -1 else None), INT64, (1,))


def _symbolic(onnx_op, python):
    """Arithmetic on sizes: ints stay ints, an int64 Value of shape [1] where a size is symbolic."""
    def translate(out, b, x, y):
        if isinstance(x, int) and isinstance(y, int):
            return python(x, y)
        return typed(getattr(b, onnx_op)(sizes(b, [x]), sizes(b, [y])), INT64, (1,))
    return translate


def topk(out, b, x, k, dim=-1, largest=True, sorted=True):
    """TopK: the k largest (or smallest) along `dim`, and their indices."""
    values, indices = b.TopK(x, b.ints([k]), axis=dim, largest=int(largest), sorted=int(sorted))
    return values, indices


def scatter(out, b, x, dim, index, src):
    """ScatterElements: x with src written at index along dim."""
    return b.ScatterElements(x, index, src, axis=dim)


def repeat(out, b, x, repeats):
    """Tile; with more repeats than x has dims, x as a value of leading 1s first."""
    extra = len(repeats) - len(x.shape)
    if extra > 0:
        x = b.Reshape(x, b.Concat(b.ints([1] * extra), b.Shape(x), axis=0))
    return b.Tile(x, sizes(b, list(repeats)))


def repeat_interleave(out, b, x, repeats, dim=None, output_size=None):
    """Each element `repeats` times in a row along `dim` (x flattened first where there is none): x with a dim of
    `repeats` after `dim`, expanded to it and merged into `dim`."""
    if dim is None:
        x, dim = b.Reshape(x, b.ints([-1])), 0
    dim %= out.rank
    head = [b.Shape(x, end=dim)] if dim else []
    tail = [b.Shape(x, start=dim + 1)] if dim + 1 < out.rank else []
    widened = b.Expand(b.Unsqueeze(x, b.ints([dim + 1])),
                       b.Concat(*head, b.Shape(x, start=dim, end=dim + 1), sizes(b, [repeats]), *tail, axis=0))
    return b.Reshape(widened, b.Concat(*head, b.ints([-1]), *tail, axis=0))


def unbind(out, b, x, dim=0):
    """The slices of x along `dim`, that dim dropped (a dim of static size only)."""
    dim %= len(x.shape)
    n = len(out.val)
    if n == 1:
        return (b.Squeeze(x, b.ints([dim])),)
    return tuple(b.Squeeze(part, b.ints([dim])) for part in b.op("Split", x, b.ints([1] * n), axis=dim, _outputs=n))


def t(out, b, x):
    """A matrix transposed (a vector as it is)."""
    return transpose(out, b, x, 0, 1) if out.rank == 2 else b.Identity(x)


TABLE = {
    aten.topk.default: topk, aten.scatter.src: scatter, aten.t.default: t,
    aten.numpy_T.default: lambda out, b, x: b.Transpose(x, perm=list(range(len(x.shape)))[::-1]),
    aten.repeat.default: repeat, aten.unbind.int: unbind, aten.repeat_interleave.self_int: repeat_interleave,
    aten.movedim.int: movedim, aten.movedim.intlist: movedim, aten.swapaxes.default: transpose,
    aten.swapdims.default: transpose, aten.narrow.default: narrow, aten.index_select.default: index_select,
    aten.squeeze.default: squeeze, aten.triu.default: trilu(True), aten.tril.default: trilu(False),
    aten.view_as.default: reshape_as, aten.reshape_as.default: reshape_as,
    aten.cat.default: cat, aten.stack.default: stack, aten.split.Tensor: split,
    aten.split_with_sizes.default: split, aten.chunk.default: chunk,
    aten.expand.default: expand, aten.expand_as.default: expand_as, aten.flatten.using_ints: flatten,
    aten.reshape.default: reshape, aten.view.default: reshape,
    aten.unsqueeze.default: unsqueeze, aten.squeeze.dim: squeeze, aten.squeeze.dims: squeeze,
    aten.transpose.int: transpose, aten.permute.default: permute, aten.slice.Tensor: slice_, aten.flip.default: flip,
    aten.select.int: select,
    aten.index.Tensor: index, aten.gather.default: gather, aten.arange.default: arange, aten.arange.start: arange,
    aten.arange.start_step: arange, aten.cumsum.default: cumsum, aten.diff.default: diff, aten.pad.default: pad,
    aten.full.default: full, aten.zeros.default: _filled(0), aten.ones.default: _filled(1),
    aten.new_ones.default: _filled(1), aten.new_zeros.default: _filled(0),
    aten.zeros_like.default: _filled(0, like=True), aten.ones_like.default: _filled(1, like=True),
    aten.full_like.default: _filled(None, like=True), aten.sym_size.int: sym_size,
    operator.add: _symbolic("Add", operator.add), operator.sub: _symbolic("Sub", operator.sub),
    operator.mul: _symbolic("Mul", operator.mul), operator.floordiv: _symbolic("Div", operator.floordiv),
    operator.mod: _symbolic("Mod", operator.mod),
}
