#include "kernels/run_node.h"

#include "kernels/kernel.h"
#include "onnxtrain/error.h"
#include "ops/op.h"
#include "ops/shape_util.h"

namespace onnxtrain::kernels {

std::vector<Tensor> run_node(const ir::Node& n, const std::vector<const Tensor*>& inputs, const RunArgs& args) {
  ops::InferCtx shapes(n, ops::runtime_inputs(inputs), nullptr);
  n.op->infer(shapes);
  const bool view = n.op->is_view();
  std::vector<Tensor> outs(n.outputs.size());
  std::vector<Tensor*> bound(n.outputs.size(), nullptr);
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    if (!n.outputs[i]) continue;
    const ops::OutputInfo& o = shapes.outputs()[i];
    std::vector<int64_t> dims = ops::concrete(n, o.shape);
    const Tensor* reuse = i < args.reuse.size() ? args.reuse[i] : nullptr;
    if (view && i == 0) {
      outs[i] = Tensor(o.dtype, dims, inputs[0]->storage());
    } else if (reuse && reuse->nbytes() == size_t(numel_of(dims)) * dtype_size(o.dtype)) {
      outs[i] = Tensor(o.dtype, dims, reuse->storage());
    } else {
      outs[i] = Tensor(o.dtype, dims, args.alloc);
      if (args.on_new_buffer) args.on_new_buffer(i, outs[i]);
    }
    bound[i] = &outs[i];
  }
  if (view) return outs;
  const Kernel& kernel = find_kernel(args.device, n);
  std::shared_ptr<Storage> scratch;  // freed when the kernel returns
  size_t scratch_bytes = 0;
  if (kernel.scratch) {
    Dim bytes = kernel.scratch(*n.op, shapes);
    if (!bytes.is_const() || bytes.value() < 0)
      throw Error(n.where() + ": internal error: scratch of " + bytes.str() + " bytes");
    scratch_bytes = size_t(bytes.value());
    if (scratch_bytes) scratch = Storage::allocate(scratch_bytes, args.alloc);
  }
  KernelCtx c{n,
              inputs,
              bound,
              args.seed,
              args.alloc,
              &shapes,
              scratch ? static_cast<char*>(scratch->data()) : nullptr,
              scratch_bytes};
  kernel.fn(*n.op, c);
  return outs;
}

}  // namespace onnxtrain::kernels
