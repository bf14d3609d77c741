// com.onnxtrain.FlashAttention and FlashAttentionGrad on the CPU in bfloat16, where its products run natively
// (gemm_bf16_native()): Q, K, V, Y and dY read as they lie, every product bfloat16 by bfloat16 into float32 through
// oneDNN (AMX or AVX512_BF16), the softmax and its gradient in float32, the probabilities and the scores' gradients
// rounded to bfloat16 as the products read them (as FlashAttention-2 does on a GPU, and PyTorch's CPU kernel);
// the outputs accumulated in float32 and rounded once.
#pragma once
#include "kernels/attention_geometry.h"
#include "kernels/kernel.h"

namespace onnxtrain::kernels {

// The forward's inputs as flash_attention.cpp's kernel reads them (Q, K, V bfloat16; LSE float32).
void flash_attention_bf16(KernelCtx& c, const AttentionGeometry& g);
// The gradient's (dY, Q, K, V, Y bfloat16; LSE float32), checked as the float32 kernel checks them.
void flash_attention_grad_bf16(KernelCtx& c, const AttentionGeometry& g);

}  // namespace onnxtrain::kernels
