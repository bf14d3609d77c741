#include "kernels/run_node.h"

#include "core/allocator.h"
#include "kernels/kernel.h"
#include "onnxtrain/error.h"
#include "ops/op.h"
#include "ops/shape_util.h"

namespace onnxtrain::kernels {

// Whether the elements shape inference found for v (as t) evaluate with the call's dims: an integer tensor, each of
// its elements known (not a value that depends on data).
static bool elements_known(const ir::Value* v, const Tensor& t, const Bindings* dims) {
  if (!v || !dims || !v->sym_value || int64_t(v->sym_value->size()) != t.numel() ||
      (t.dtype() != DType::kInt64 && t.dtype() != DType::kInt32))
    return false;
  for (const Dim& d : *v->sym_value)
    if (!d.eval(*dims)) return false;
  return true;
}

// Value v (as t, on a device) on the host without reading the device: its constant data, which the graph holds on
// the host, or the elements shape inference found for it evaluated with the call's dims; undefined when neither
// gives it (a value that depends on data).
static Tensor known_on_host(const ir::Value* v, const Tensor& t, const Bindings* dims) {
  if (!v) return {};
  if (v->initializer && !v->trainable && v->initializer->dims() == t.dims() && v->initializer->dtype() == t.dtype())
    return *v->initializer;
  if (!elements_known(v, t, dims)) return {};
  Tensor h(t.dtype(), t.dims(), &CachingAllocator::global());
  for (size_t k = 0; k < v->sym_value->size(); ++k) {
    const int64_t x = *(*v->sym_value)[k].eval(*dims);
    if (t.dtype() == DType::kInt64)
      h.data<int64_t>()[k] = x;
    else
      h.data<int32_t>()[k] = int32_t(x);
  }
  return h;
}

// Whether a host_only node (RunArgs) may skip its kernel: on a device whose memory the host cannot read, with every
// output's elements known on the host.
static bool kernel_unneeded(const ir::Node& n, const std::vector<Tensor>& outs, const RunArgs& args) {
  if (!args.host_only || args.device == kCpu || CachingAllocator::of(args.device).memory().host_readable())
    return false;
  for (size_t i = 0; i < n.outputs.size(); ++i)
    if (n.outputs[i] && !elements_known(n.outputs[i], outs[i], args.dims)) return false;
  return true;
}

// The inputs n reads on the host that live in memory the host cannot read (small: shapes, axes, scalars), on the
// host: known there (known_on_host), else copied.
static std::vector<Tensor> host_copies(const ir::Node& n, const std::vector<const Tensor*>& inputs,
                                       const Bindings* dims) {
  std::vector<Tensor> r;
  const uint64_t host = n.op->host_inputs();
  for (size_t i = 0; i < inputs.size() && i < 64 && host >> i; ++i) {
    const Tensor* t = inputs[i];
    if ((host >> i & 1) && t && !(t->device() == kCpu) && !CachingAllocator::of(t->device()).memory().host_readable()) {
      r.resize(inputs.size());
      r[i] = known_on_host(i < n.inputs.size() ? n.inputs[i] : nullptr, *t, dims);
      if (!r[i].defined()) r[i] = t->clone(&CachingAllocator::global());
    }
  }
  return r;
}

// The inputs' dtypes and dims, and the values of those n reads on the host, as one key, each number handed to
// `put` in turn; false where a host input is too large to key on (then nothing is kept).
template <typename Put>
static bool walk_key(const ir::Node& n, const std::vector<const Tensor*>& inputs, Put&& put) {
  const uint64_t host = n.op->host_inputs();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor* t = inputs[i];
    if (!t) {
      put(-1);
      continue;
    }
    put(int64_t(t->dtype()));
    put(t->rank());
    for (int64_t d : t->dims()) put(d);
    if (i >= 64 || !(host >> i & 1)) continue;
    if (t->numel() > 64) return false;
    if (dtype_is_float(t->dtype())) {
      for (double v : t->to_double()) put(__builtin_bit_cast(int64_t, v));
    } else {
      for (int64_t v : t->to_int64()) put(v);
    }
  }
  return true;
}

// Whether `cache` was worked out for these inputs (compared in place: a hit builds nothing).
static bool hits(const NodeCache& cache, const ir::Node& n, const std::vector<const Tensor*>& inputs) {
  if (!cache.shapes) return false;
  size_t at = 0;
  bool same = true;
  const bool keyed = walk_key(n, inputs, [&](int64_t v) {
    same = same && at < cache.key.size() && cache.key[at] == v;
    ++at;
  });
  return keyed && same && at == cache.key.size();
}

// Shape inference, the outputs' dims and bytes and the kernel's scratch, for these inputs, into `into`.
static void work_out(const ir::Node& n, const std::vector<const Tensor*>& inputs, Device device, NodeCache& into) {
  into.shapes = std::make_unique<ops::InferCtx>(n, ops::runtime_inputs(inputs), nullptr);
  ops::InferCtx& shapes = *into.shapes;
  n.op->infer(shapes);
  if (uint64_t undeclared = shapes.data_read() & ~n.op->host_inputs())
    throw Error(n.where() + ": internal error: its shape function read the data of input " +
                std::to_string(__builtin_ctzll(undeclared)) + ", which the op does not declare in host_inputs()");
  into.dims.assign(n.outputs.size(), {});
  into.bytes.assign(n.outputs.size(), 0);
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    if (!n.outputs[i]) continue;
    const ops::OutputInfo& o = shapes.outputs()[i];
    into.dims[i] = ops::concrete(n, o.shape);
    into.bytes[i] = checked_nbytes(into.dims[i], o.dtype, n.where() + ": output " + std::to_string(i));
  }
  into.scratch = 0;
  if (n.op->is_view()) return;
  if (!into.kernel) into.kernel = &find_kernel(device, n);
  if (into.kernel->scratch) {
    Dim bytes = into.kernel->scratch(*n.op, shapes);
    if (!bytes.is_const() || bytes.value() < 0)
      throw Error(n.where() + ": internal error: scratch of " + bytes.str() + " bytes");
    into.scratch = size_t(bytes.value());
  }
}

static std::vector<Tensor> run_node_reading(const ir::Node& n, const std::vector<const Tensor*>& given,
                                            const RunArgs& args) {
  std::vector<Tensor> on_host = host_copies(n, given, args.dims);
  std::vector<const Tensor*> inputs = given;
  for (size_t i = 0; i < on_host.size(); ++i)
    if (on_host[i].defined()) inputs[i] = &on_host[i];
  NodeCache local;
  NodeCache* known = &local;
  if (args.cache && hits(*args.cache, n, inputs)) {
    known = args.cache;
    known->shapes->rebind_tensors(inputs);
  } else if (args.cache) {
    local.kernel = args.cache->kernel;
    work_out(n, inputs, args.device, local);
    args.cache->kernel = local.kernel;
    if (walk_key(n, inputs, [&](int64_t v) { local.key.push_back(v); })) {
      *args.cache = std::move(local);
      known = args.cache;
    }
  } else {
    work_out(n, inputs, args.device, local);
  }
  ops::InferCtx& shapes = *known->shapes;
  const bool view = n.op->is_view();
  std::vector<Tensor> outs(n.outputs.size());
  std::vector<Tensor*> bound(n.outputs.size(), nullptr);
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    if (!n.outputs[i]) continue;
    const DType dtype = shapes.outputs()[i].dtype;
    const Tensor* reuse = i < args.reuse.size() ? args.reuse[i] : nullptr;
    if (view && i == 0) {
      outs[i] = Tensor(dtype, known->dims[i], inputs[0]->storage());
    } else if (reuse && reuse->nbytes() == known->bytes[i]) {
      outs[i] = Tensor(dtype, known->dims[i], reuse->storage());
    } else {
      outs[i] = Tensor(dtype, known->dims[i], args.alloc);
      if (args.on_new_buffer) args.on_new_buffer(i, outs[i]);
    }
    bound[i] = &outs[i];
  }
  if (view || (!known->scratch && kernel_unneeded(n, outs, args))) return outs;  // (a scratch counts in the peak)
  std::shared_ptr<Storage> scratch;  // freed when the kernel returns
  if (known->scratch) scratch = Storage::allocate(known->scratch, args.alloc);
  KernelCtx c{n,
              inputs,
              bound,
              args.seed,
              args.alloc,
              &shapes,
              scratch ? static_cast<char*>(scratch->data()) : nullptr,
              known->scratch};
  known->kernel->fn(*n.op, c);
  return outs;
}

std::vector<Tensor> run_node(const ir::Node& n, const std::vector<const Tensor*>& given, const RunArgs& args) {
  return ops::reading_node(n, [&] { return run_node_reading(n, given, args); });
}

}  // namespace onnxtrain::kernels
