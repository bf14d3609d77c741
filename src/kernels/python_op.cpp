// com.onnxtrain.PythonOp and PythonOpGrad (ops/python_op.cpp) on any device: the Function runs in PyTorch through
// the calls the Python extension set, on the device's tensors as they are (DLPack), on the caller's queue. The
// context output is the handle on what the forward kept, in host memory of its own that lets go of it when the
// last tensor holding it goes (a stash freed after backward, or dropped without one); PythonOpGrad reads it there.
#include "kernels/python_op.h"

#include "onnxtrain/error.h"
#include "ops/python_op.h"

namespace onnxtrain::kernels {

static PythonOpCalls& calls() {
  static PythonOpCalls c;
  return c;
}

void set_python_op_calls(PythonOpCalls c) { calls() = std::move(c); }

const PythonOpCalls& python_op_calls(const std::string& where) {
  if (!calls().forward)
    throw UnsupportedError(where + ": a custom torch.autograd.Function runs only where the onnxtrain Python package "
                           "is loaded");
  return calls();
}

namespace {

void python_op(const ops::PythonOpAttrs& at, KernelCtx& c) {
  const PythonOpCalls& calls = python_op_calls(c.node.where());
  const size_t results = c.node.outputs.size() - 1;
  std::vector<Tensor*> outs(c.outputs.begin(), c.outputs.begin() + ptrdiff_t(results));
  const bool keep = c.wants(results) && !c.node.outputs[results]->consumers.empty();
  const int64_t handle = calls.forward(at.key, c.inputs, outs, keep);
  if (!c.wants(results)) return;
  auto* held = new int64_t(handle);
  auto release = calls.release;
  c.out(results) = Tensor(DType::kInt64, {}, Storage::borrow(held, sizeof(int64_t), [held, handle, release] {
                            if (handle) release(handle);
                            delete held;
                          }));
}

void python_op_grad(const ops::PythonOpAttrs& at, KernelCtx& c) {
  const PythonOpCalls& calls = python_op_calls(c.node.where());
  const int64_t handle = c.in(0).data<int64_t>()[0];
  if (!handle) c.fail("its forward kept nothing for backward");
  const size_t outputs = size_t(c.node.attr_int("outputs", 0));
  std::vector<const Tensor*> dy(c.inputs.begin() + 1, c.inputs.begin() + 1 + ptrdiff_t(outputs));
  calls.backward(handle, dy, c.outputs);
}

}  // namespace

std::vector<KernelDef> python_op_kernels() {
  return {{"com.onnxtrain", "PythonOp", kernel(python_op)}, {"com.onnxtrain", "PythonOpGrad", kernel(python_op_grad)}};
}

}  // namespace onnxtrain::kernels
