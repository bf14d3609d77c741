// cuBLASLt's workspace (launch.h's Workspace) as part of a product node's scratch, so that the allocation plan and
// the predicted peak count it: as large as NVIDIA recommends for Hopper (32 MiB, what PyTorch gives cuBLASLt there),
// but no larger than four float32 copies of the product's output and no smaller than 1 MiB.
#pragma once
#include "kernels/cuda/launch.h"
#include "kernels/kernel.h"

namespace onnxtrain::kernels::cuda {

// The scratch bytes of the workspace of products of `outputs` elements (with room to align its start).
Dim workspace_scratch(const Dim& outputs);
// The scratch of a node whose one product writes output 0 (MatMul, FusedMatMul, Gemm, Linear, LinearGradAdd,
// AttentionSoftmax): its workspace.
Dim product_scratch(const ops::Op&, ops::InferCtx& s);
// The workspace in c's scratch bytes [at, at + bytes), where a workspace_scratch() was laid out: its start aligned to
// 256 bytes (none in 256 bytes or fewer).
Workspace workspace_in(const KernelCtx& c, size_t at, size_t bytes);

}  // namespace onnxtrain::kernels::cuda
