"""Writes into a view of a value the module made itself, as transformers' shift_tokens_right (BART, mBART,
Pegasus) writes its decoder inputs: base = new_zeros(...); base[:, 1:] = ids[:, :-1]; base[:, 0] = start. In
torch.export's graph, copy_ or fill_ into a slice (step 1) or select of that value, read by nothing else. The
direct capture (aten_to_onnx) makes the value anew: the part before the view, the written values, the part after,
concatenated along the view's dim, which the value's later readers read. (Slices of a whole dim between the value
and the view, as x[:, 1:] is written, are the value itself.)"""

import operator

import torch

from onnxtrain._capture.aten_values import INT64_MAX, Untranslatable, cast, sizes

aten = torch.ops.aten
_WRITES = {aten.copy_.default, aten.fill_.Scalar, aten.fill_.Tensor}
_VIEWS = {aten.slice.Tensor, aten.select.int}


def names(node):
    """`node` and the nodes that name the same value before it: what an in-place update (x.masked_fill_) returns
    is its first argument."""
    names = [node]
    while (isinstance(node, torch.fx.Node) and isinstance(node.target, torch._ops.OpOverload)
           and node.target._schema.is_mutable and node.args and isinstance(node.args[0], torch.fx.Node)):
        node = node.args[0]
        names.append(node)
    return names


def _fresh(node):
    """Whether `node` is a value of its own that an ATen op made (not an input, parameter or view), or an
    in-place update of one."""
    origin = names(node)[-1]
    return (isinstance(origin, torch.fx.Node) and origin.op == "call_function"
            and isinstance(origin.target, torch._ops.OpOverload)
            and not any(r.alias_info is not None for r in origin.target._schema.returns))


def _slice_args(node):
    """A slice's dim, start, end and step, its defaults filled in."""
    return (list(node.args[1:]) + [0, None, None, 1][len(node.args) - 1:])[:4]


def _whole(node):
    """Whether `node` slices the whole of a dim (x[:, 1:] is such a slice of dim 0, then one of dim 1), read by one
    node alone."""
    if node.target is not aten.slice.Tensor or len(node.users) != 1:
        return False
    _, start, end, step = _slice_args(node)
    return start in (None, 0) and end in (None, INT64_MAX) and step == 1


def _base(view):
    """What the view is of, through slices of whole dims."""
    base = view.args[0]
    while isinstance(base, torch.fx.Node) and _whole(base):
        base = base.args[0]
    return base


def _is_view(node):
    target = node.target
    if not isinstance(target, torch._ops.OpOverload):
        return target is operator.getitem
    return not target._schema.is_mutable and any(r.alias_info is not None for r in target._schema.returns)


def _writes_a_view(node):
    """A copy_ or fill_, read by nothing, into a slice or select read by nothing else, of a fresh value."""
    if node.target not in _WRITES or node.users:
        return False
    view = node.args[0]
    return (isinstance(view, torch.fx.Node) and view.target in _VIEWS and len(view.users) == 1
            and _fresh(_base(view)))


def is_view_write(node, position):
    """A write into a view of a fresh value (_writes_a_view) whose other views are all read before it (in the
    graph's order, `position`), or only written into."""
    if not _writes_a_view(node):
        return False
    view = node.args[0]
    base, chain, n = _base(view), {view}, view.args[0]
    while n is not base:  # (the slices of whole dims between)
        chain.add(n)
        n = n.args[0]
    others = [u for name in names(base) for u in name.users if _is_view(u) and u not in chain and not only_written(u)]
    return all(position[r] < position[node] for u in others for r in _readers(u))


def _readers(view):
    """What reads `view`, through the views taken of it."""
    for r in view.users:
        yield from _readers(r) if _is_view(r) else [r]


def only_written(node):
    """Whether `node` is a view all of whose readers write into it, or views only written: nothing sees it as a
    view."""
    return bool(node.users) and all(_writes_a_view(u) or (u.target in _VIEWS and only_written(u)) for u in node.users)


def write(walk, node):
    """The FX nodes that name the view's base, and its written value, for node (a view write), from the
    translations in walk.env."""
    b, view = walk.b, node.args[0]
    base = _base(view)
    rank = base.meta["val"].dim()
    value = walk.env[base]
    written = b.Expand(cast(b, walk.arg(node.args[1]), value.dtype), b.Shape(walk.env[view]))
    if view.target is aten.slice.Tensor:
        dim, start, end, step = _slice_args(view)
        if step != 1:
            raise Untranslatable("a write into a slice of a step other than 1")
        start, end = 0 if start is None else start, INT64_MAX if end is None else end
    else:
        dim, start = view.args[1] % rank, view.args[2]
        if isinstance(start, int) and start < 0:  # (from the end: counted from the dim's size)
            size = base.meta["val"].shape[dim]
            start = start + size if isinstance(size, int) else b.Add(b.Shape(value, start=dim, end=dim + 1),
                                                                      b.ints([start]))
        end = start + 1 if isinstance(start, int) else b.Add(sizes(b, [start]), b.ints([1]))
        written = b.Unsqueeze(written, b.ints([dim % rank]))
    dim %= rank
    head = b.Slice(value, b.ints([0]), sizes(b, [start]), b.ints([dim]))
    tail = b.Slice(value, end if not isinstance(end, int) else b.ints([end]), b.ints([INT64_MAX]), b.ints([dim]))
    return names(base), b.Concat(head, written, tail, axis=dim)
