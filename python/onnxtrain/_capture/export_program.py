"""Capture through torch.export (the training-mode ATen graph, non-strict) and PyTorch's torch.export-based ONNX
exporter, with onnxtrain's translations where its defaults do not train (translations) and these fix-ups:
parameters and buffers become graph inputs (the exporter makes them initializers), and each dynamic dim is named
`<input>_dim<i>` as onnxtrain names them (the exporter names them by their sympy symbols)."""

import linecache
import logging

import onnx_ir
import onnx_ir.passes.common as ir_passes
import onnxscript.optimizer
import onnxscript.rewriter
import torch
from onnxscript.rewriter.rules import common as rules
from torch._decomp.decompositions_for_rng import PhiloxStateTracker
from torch.fx.experimental import proxy_tensor
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from onnxtrain import _onnxtrain as C
from onnxtrain._capture import aten_to_onnx
from onnxtrain._capture.aten_values import Untranslatable
from onnxtrain._capture.translations import TABLE

logger = logging.getLogger("onnxtrain")


def _as_inputs(graph, state):
    """Initializers of the exported graph (onnx_ir) named in `state` (the module's parameters and buffers; not the
    constants the module makes, which the exporter names as its attributes) become graph inputs. Done before the
    graph is serialized, so that the weights are never copied into a ModelProto: freed, such a copy stays in the
    process's heap (65 MiB of resident memory for a 6-layer GPT)."""
    for name in [n for n in graph.initializers if n in state]:
        value = graph.initializers.pop(name)
        value.const_value = None
        graph.inputs.append(value)


def _contiguous_before_reshape(program):
    """A contiguous copy before each reshape (Identity in ONNX, which the optimizer removes). Decomposing for ONNX
    traces the graph again, where an op may give other strides than at capture: scaled_dot_product_attention's
    output, transposed in T5's cross-attention, is contiguous at capture, and a reshape of it decomposes to a view
    that cannot be taken."""
    graph = program.graph_module.graph
    for node in list(graph.nodes):
        if node.target is not torch.ops.aten.reshape.default:
            continue
        with graph.inserting_before(node):
            copy = graph.call_function(torch.ops.aten.clone.default, (node.args[0],),
                                       {"memory_format": torch.contiguous_format})
        copy.meta["val"] = node.args[0].meta["val"].clone(memory_format=torch.contiguous_format)
        node.replace_input_with(node.args[0], copy)
    program.graph_module.recompile()


def _name_inputs(model, names):
    """The call's inputs named `names` (the exporter renames an input that is also an output, `x` to `x_orig`, and
    may name a value as an input is named): other values named as an input are renamed away."""
    user = [i for i in model.graph.input
            if any(p.key.endswith("InputSpec.kind") and p.value == "USER_INPUT" for p in i.metadata_props)]
    assert len(user) == len(names), (len(user), names)
    produced = {o for n in model.graph.node for o in n.output} | {o.name for o in model.graph.output}
    rename = {v: f"{v}_out" for v in produced & set(names)}
    rename.update({value.name: name for value, name in zip(user, names)})
    for v in [*model.graph.input, *model.graph.output]:
        v.name = rename.get(v.name, v.name)
    for node in model.graph.node:
        node.input[:] = [rename.get(x, x) for x in node.input]
        node.output[:] = [rename.get(x, x) for x in node.output]


def _name_dims(model, names):
    """Each symbolic dim of the inputs named after the first input dim it is; symbolic dims elsewhere (outputs,
    value_info) dropped, onnxtrain infers them."""
    symbols = {}
    for value in model.graph.input:
        if value.name not in names:
            continue
        for i, d in enumerate(value.type.tensor_type.shape.dim):
            if d.HasField("dim_param"):
                d.dim_param = symbols.setdefault(d.dim_param, f"{value.name}_dim{i}")
    del model.graph.value_info[:]
    for value in model.graph.output:
        for d in value.type.tensor_type.shape.dim:
            if d.HasField("dim_param"):
                if d.dim_param in symbols:
                    d.dim_param = symbols[d.dim_param]
                else:
                    d.Clear()


# onnxscript's default rewrite rules but SlicesSplit, whose matching time grows with the square of the graph's size
# (22 of the 47 s a 30-layer Llama took to capture, for 2 fewer nodes): onnxtrain's own passes fuse what matters.
_RULES = tuple(r for r in onnxscript.rewriter._DEFAULT_REWRITE_RULES if r is not rules.slice_split_rule)


def _optimize(model):
    """onnxscript's optimizer as onnxscript.optimizer.optimize runs it (functions inlined; constants folded and the
    rules applied, twice; unused nodes dropped; constants lifted, deduplicated; common subexpressions merged), with
    _RULES and without ONNX's shape inference (onnxtrain infers shapes itself)."""
    ir_passes.InlinePass()(model)
    for _ in range(2):
        folded = onnxscript.optimizer.fold_constants(model, onnx_shape_inference=False).modified
        rewritten = onnxscript.rewriter.RewritePass(_RULES)(model).modified
        ir_passes.RemoveUnusedNodesPass()(model)
        if not (folded or rewritten):
            break
    for p in (ir_passes.RemoveUnusedFunctionsPass(), ir_passes.RemoveUnusedOpsetsPass(),
              ir_passes.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0),
              ir_passes.LiftSubgraphInitializersToMainGraphPass(), ir_passes.DeduplicateInitializersPass(),
              ir_passes.CommonSubexpressionEliminationPass(), ir_passes.OutputFixPass(), ir_passes.NameFixPass()):
        p(model)
    return model


def _drop_tracing_leftovers(program):
    """What tracing and exporting leave in process-wide places until the next time: PyTorch's map from fake tensors
    to the last traced graph's nodes (which holds that graph, its fake tensors and its symbolic shapes), the source
    lines read for the nodes' stack traces, the RNG state tracker's last states, the caches ShapeEnv's methods keep
    (keyed by the ShapeEnv itself), and each onnxscript rewrite rule's last match (the ONNX graph it matched, whose
    metadata holds the traced FX nodes). About 10 MiB for a 6-layer GPT. And a cycle the garbage collector cannot
    see whole, which would keep the program's ShapeEnv for good: the ShapeEnv tracks the fake inputs, whose sizes
    (in C++) hold the symbols' SymNodes, which hold the ShapeEnv; the program no longer needs its tracked fakes."""
    env = _shape_env(program)
    if env is not None:
        env.tracked_fakes = None
    getattr(proxy_tensor, "_FAKE_TENSOR_ID_TO_PROXY_MAP_FOR_EXPORT", {}).clear()
    linecache.clearcache()
    PhiloxStateTracker.reset()
    for method in vars(ShapeEnv).values():
        if hasattr(method, "cache_clear"):
            method.cache_clear()
    _forget_matches()


def _shape_env(program):
    for node in program.graph.nodes if program is not None else ():
        mode = getattr(node.meta.get("val"), "fake_mode", None)
        if mode is not None and mode.shape_env is not None:
            return mode.shape_env
    return None


def _forget_matches():
    for rule in onnxscript.rewriter._DEFAULT_REWRITE_RULES:
        matcher = getattr(rule, "_matcher", None)
        for state in ("_graph", "_current_node", "_tracer", "_match"):
            if hasattr(matcher, state):
                setattr(matcher, state, None)


def to_onnx(flat, tensors, names, dynamic_dims, training, opset, direct=True):
    """The graph of `flat` called on `tensors` (named `names`), with parameters and buffers as inputs named
    module.<name>. Dims torch.export specializes (to a size the module requires, or 0 and 1) stay sizes. `direct`:
    translated by aten_to_onnx where it can be (else, and when not `direct`, by PyTorch's ONNX exporter)."""
    auto = torch.export.Dim.AUTO
    shapes = tuple({d: auto for d in dims} or None for dims in dynamic_dims)
    # (torch.export warns of each dim it specializes to 0 or 1: such dims stay sizes here by design)
    specializing = logging.getLogger("torch._export.non_strict_utils")
    level = specializing.level
    specializing.setLevel(logging.ERROR)
    program, untranslated = None, ""
    try:
        program = torch.export.export(flat, tuple(tensors), dynamic_shapes=(shapes,), strict=False)
        if direct and opset == aten_to_onnx.OPSET:
            try:
                return aten_to_onnx.translate(program, names)
            except C.Error:  # (what onnxtrain cannot run, however captured)
                raise
            except Untranslatable as e:
                untranslated = f"not translated directly ({e}), "
                if any(n.target is torch.ops.onnxtrain.python_op.default for n in program.graph.nodes):
                    raise RuntimeError(f"{untranslated}and PyTorch's ONNX exporter cannot hold the custom autograd "
                                       "Functions it calls") from None
                logger.info("onnxtrain: %s: not translated directly (%s); PyTorch's ONNX exporter translates it",
                            type(getattr(flat, "module", flat)).__name__, e)
            except Exception as e:  # noqa: BLE001 (a fault of the translation: the exporter still captures it)
                logger.warning("onnxtrain: %s: the direct translation failed (%s: %s); PyTorch's ONNX exporter "
                               "translates it", type(getattr(flat, "module", flat)).__name__, type(e).__name__, e)
        _contiguous_before_reshape(program)
        mode = torch.onnx.TrainingMode.TRAINING if training else torch.onnx.TrainingMode.EVAL
        try:
            exported = torch.onnx.export(program, tuple(tensors), dynamo=True, optimize=False, opset_version=opset,
                                         custom_translation_table=TABLE, verbose=False, training=mode)
        except Exception as e:  # (its own message is advice on filing a report: the cause at the root says what)
            root = e
            while root.__cause__ is not None:
                root = root.__cause__
            raise RuntimeError(f"{untranslated}PyTorch's ONNX exporter failed: {type(root).__name__}: "
                               f"{(str(root).strip().splitlines() or [''])[0]}") from e
    finally:
        specializing.setLevel(level)
        _drop_tracing_leftovers(program)
    held = [*flat.named_parameters(remove_duplicate=False), *flat.named_buffers(remove_duplicate=False)]
    _as_inputs(exported.model.graph, {n for n, _ in held})  # (a tied parameter may be named by any of its names)
    # onnxscript's optimizer once the weights are inputs (before, it folds transposes into them): splits into
    # Split rather than sequences, constants folded
    model = onnx_ir.to_proto(_optimize(exported.model))
    _forget_matches()
    _name_inputs(model, names)
    _name_dims(model, set(names))
    return model
