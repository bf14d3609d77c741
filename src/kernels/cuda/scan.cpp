// The CUDA kernel of CumSum (scan.cu's launcher): the axis read on the host (a host input), as the CPU's kernel.
#include "kernels/cuda/indexing.h"
#include "ops/axis_util.h"
#include "ops/scan.h"

namespace onnxtrain::kernels::cuda {
namespace {

void cum_sum_node(const ops::CumSumAttrs& at, KernelCtx& c) {
  const Tensor& x = c.in(0);
  const int64_t a = c.in(1).to_int64()[0];
  if (a < -x.rank() || a >= x.rank()) c.fail("axis " + std::to_string(a) + " out of range for " + dims_str(x.dims()));
  const ops::AxisView v = ops::axis_view(x.dims(), a < 0 ? a + x.rank() : a);
  cum_sum(x.dtype(), c.out(0).dtype(), x.raw(), c.out(0).raw(), v.outer, v.n, v.inner, at.exclusive, at.reverse,
          stream());
}

const bool kRegistered = register_kernels(cuda_device(0), {{"", "CumSum", kernel(cum_sum_node)}});

}  // namespace
}  // namespace onnxtrain::kernels::cuda
