#include "kernels/in_float32.h"

#include "core/allocator.h"
#include "onnxtrain/error.h"

namespace onnxtrain::kernels {
namespace {

// The node's shapes as the float32 kernel sees them: low-precision floats as float32, with the data of their
// float32 copies when the kernel runs (`copies`), else withheld.
ops::InferCtx float32_view(ops::InferCtx& s, const std::vector<Tensor>* copies = nullptr) {
  std::vector<ops::InputInfo> in(s.num_inputs());
  for (size_t i = 0; i < in.size(); ++i) {
    if (!s.has(i)) continue;
    in[i].present = true;
    in[i].dtype = dtype_is_16bit_float(s.dtype(i)) ? DType::kFloat32 : s.dtype(i);
    in[i].shape = s.shape(i);
    if (dtype_is_16bit_float(s.dtype(i))) {
      if (copies) in[i].tensor = &(*copies)[i];
      continue;
    }
    in[i].tensor = s.tensor(i);
    if (const std::vector<Dim>* v = s.value(i)) in[i].value = *v;
  }
  ops::InferCtx r(s.node(), std::move(in), nullptr);
  for (size_t i = 0; i < s.num_outputs(); ++i) {
    const ops::OutputInfo& o = s.outputs()[i];
    r.set(i, dtype_is_16bit_float(o.dtype) ? DType::kFloat32 : o.dtype, o.shape, o.value);
  }
  return r;
}

// Whether any input or output of the node has a dtype `is` picks.
bool holds(ops::InferCtx& s, bool (*is)(DType)) {
  for (size_t i = 0; i < s.num_inputs(); ++i)
    if (s.has(i) && is(s.dtype(i))) return true;
  for (auto& o : s.outputs())
    if (is(o.dtype)) return true;
  return false;
}

bool any_low(ops::InferCtx& s) { return holds(s, dtype_is_16bit_float); }
bool any_half(ops::InferCtx& s) {  // (which no native low-precision path takes)
  return holds(s, [](DType t) { return t == DType::kFloat16; });
}

// Layout of the scratch: the kernel's own (aligned), then one float32 copy per low-precision input and output.
Dim total_scratch(const ScratchFn& own, const ops::Op& op, ops::InferCtx& s) {
  ops::InferCtx f = float32_view(s);
  Dim total = own ? scratch_span(own(op, f)) : Dim(0);
  for (size_t i = 0; i < s.num_inputs(); ++i)
    if (s.has(i) && dtype_is_16bit_float(s.dtype(i))) total = total + scratch_span(shape_numel(s.shape(i)) * Dim(4));
  for (auto& o : s.outputs())
    if (dtype_is_16bit_float(o.dtype)) total = total + scratch_span(shape_numel(o.shape) * Dim(4));
  return total;
}

// def, with float32 copies of its 16-bit values for the nodes `as_is` does not hold.
template <typename AsIs>
KernelDef with_copies(KernelDef def, ConvertFn convert, AsIs as_is) {
  KernelFn fn = def.fn;
  ScratchFn own = def.scratch;
  def.fn = [fn, own, as_is, convert](const ops::Op& op, KernelCtx& c) {
    if (as_is(*c.shapes)) return fn(op, c);
    ScratchCarver copies{c};
    size_t own_bytes = 0;
    if (own) {
      ops::InferCtx shapes = float32_view(*c.shapes);
      Dim d = own(op, shapes);
      own_bytes = size_t(d.value());
      copies.at = size_t(scratch_span(d).value());
    }
    const Device device = c.alloc ? c.alloc->device() : kCpu;  // (the scratch's: a kernel run alone has the host's)
    auto carve = [&](const std::vector<int64_t>& dims) {
      int64_t n = numel_of(dims);
      return Tensor(DType::kFloat32, dims, Storage::borrow(copies.take<float>(n), size_t(n) * 4, nullptr, device));
    };
    std::vector<Tensor> ins(c.inputs.size()), outs(c.outputs.size());
    for (size_t i = 0; i < c.inputs.size(); ++i)
      if (c.inputs[i] && dtype_is_16bit_float(c.inputs[i]->dtype())) {
        ins[i] = carve(c.inputs[i]->dims());
        convert(c.inputs[i]->dtype(), DType::kFloat32, c.inputs[i]->raw(), ins[i].raw(), ins[i].numel());
      }
    ops::InferCtx shapes = float32_view(*c.shapes, &ins);
    KernelCtx f{c.node, c.inputs, c.outputs, c.seed, c.alloc, &shapes, c.scratch, own_bytes};
    for (size_t i = 0; i < c.inputs.size(); ++i)
      if (ins[i].defined()) f.inputs[i] = &ins[i];
    for (size_t i = 0; i < c.outputs.size(); ++i)
      if (c.outputs[i] && dtype_is_16bit_float(c.outputs[i]->dtype())) {
        outs[i] = carve(c.outputs[i]->dims());
        f.outputs[i] = &outs[i];
      }
    fn(op, f);
    for (size_t i = 0; i < c.outputs.size(); ++i)
      if (outs[i].defined()) convert(DType::kFloat32, c.outputs[i]->dtype(), outs[i].raw(), c.outputs[i]->raw(),
                                     outs[i].numel());
  };
  def.scratch = [own, as_is](const ops::Op& op, ops::InferCtx& s) {
    if (as_is(s)) return own ? own(op, s) : Dim(0);
    return total_scratch(own, op, s);
  };
  return def;
}

}  // namespace

KernelDef in_float32(KernelDef def, ConvertFn convert, bool (*bf16_native)()) {
  auto as_is = [bf16_native](ops::InferCtx& s) {
    return !any_low(s) || (bf16_native && !any_half(s) && bf16_native());
  };
  return with_copies(std::move(def), convert, as_is);
}

KernelDef in_float32(KernelDef def, ConvertFn convert, bool (*takes_as_is)(ops::InferCtx&)) {
  auto as_is = [takes_as_is](ops::InferCtx& s) { return !any_low(s) || takes_as_is(s); };
  return with_copies(std::move(def), convert, as_is);
}

}  // namespace onnxtrain::kernels
