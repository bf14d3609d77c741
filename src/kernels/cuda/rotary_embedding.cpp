// The CUDA kernel of com.onnxtrain.RotaryEmbedding (rotary_embedding.cu's launcher): cos and sin broadcast to X with
// its (even) last dim, in X's dtype or float32 (X and Y then of any float dtype), as on the CPU; their rows' offsets
// from the broadcast strides of X's leading dims.
#include "kernels/cuda/indexing.h"
#include "kernels/strides.h"

namespace onnxtrain::kernels::cuda {
namespace {

void rotary_embedding_node(KernelCtx& c) {
  const Tensor &x = c.in(0), &cos = c.in(1), &sin = c.in(2);
  const std::vector<int64_t>& dims = x.dims();
  const int64_t width = dims.empty() ? 0 : dims.back();
  for (const Tensor* t : {&cos, &sin}) {
    std::vector<int64_t> out;
    if (dims.empty() || t->dtype() != cos.dtype() || t->dims().empty() || t->dims().back() != width ||
        !broadcast_dims(t->dims(), dims, &out) || out != dims || width % 2)
      c.fail("cos and sin " + dims_str(cos.dims()) + ", " + dims_str(sin.dims()) + " must broadcast to X " +
             dims_str(dims) + " (of even last dim) with its last dim, in one dtype");
  }
  std::vector<int64_t> cs = broadcast_strides(cos.dims(), dims), ss = broadcast_strides(sin.dims(), dims);
  cs.pop_back();
  ss.pop_back();
  const Indexing rows = indexing(c, std::vector<int64_t>(dims.begin(), dims.end() - 1), {cs, ss});
  Tensor& y = c.out(0);
  rotary_embedding(x.dtype(), cos.dtype(), y.dtype(), x.raw(), cos.raw(), sin.raw(), y.raw(), rows, width,
                   c.node.attr_int("transposed", 0) != 0, stream());
}

const bool kRegistered =
    register_kernels(cuda_device(0), {{"com.onnxtrain", "RotaryEmbedding", kernel(rotary_embedding_node)}});

}  // namespace
}  // namespace onnxtrain::kernels::cuda
