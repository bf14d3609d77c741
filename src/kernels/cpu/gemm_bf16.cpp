#include "kernels/cpu/gemm_bf16.h"

#include <dnnl.hpp>
#include <algorithm>
#include <cstdlib>
#include <list>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "core/cpu_features.h"

namespace onnxtrain::kernels {
namespace {

using dnnl::memory;
using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, bool, bool, float, bool,
                       bool, memory::data_type>;

// oneDNN's primitive cache holds this many compiled products unless the environment names a capacity (a step of
// fixed shapes makes under a hundred; oneDNN's own default, 1024, let a run of varying lengths hold 310 MiB of them
// where this holds under 100 MiB, at the same speed: a cache is memory too).
constexpr int kPrimitiveCacheCapacity = 256;

dnnl::engine& engine() {
  static dnnl::engine e = [] {
    if (!std::getenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY") && !std::getenv("DNNL_PRIMITIVE_CACHE_CAPACITY"))
      dnnl::set_primitive_cache_capacity(kPrimitiveCacheCapacity);
    return dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
  return e;
}

// (batch, rows, cols) as op() reads it, with the strides of how it is stored.
memory::desc operand_desc(int64_t batch, int64_t rows, int64_t cols, const Bf16Operand& x) {
  memory::dims strides = x.trans ? memory::dims{x.stride, 1, x.ld} : memory::dims{x.stride, x.ld, 1};
  if (x.stride == 0) batch = 1, strides[0] = rows * cols;  // broadcast over the batch
  return memory::desc({batch, rows, cols}, memory::data_type::bf16, strides);
}

// A primitive with this thread's memory objects for its operands, pointed at each call's.
struct Bound {
  dnnl::matmul matmul;
  memory src, weights, dst, bias, scratchpad;
};

Bound make(int64_t batch, int64_t m, int64_t n, int64_t k, const Bf16Operand& a, const Bf16Operand& b, float alpha,
           bool bias, bool accumulate, memory::data_type out) {
  memory::desc dst({batch, m, n}, out, memory::format_tag::abc);
  memory::desc bias_desc({1, 1, n}, memory::data_type::bf16, memory::format_tag::abc);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // (run's, one a thread: calls may come from two at once)
  if (alpha != 1) attr.set_output_scales(0, {alpha});
  if (accumulate) {
    dnnl::post_ops ops;
    ops.append_sum(1.f);
    attr.set_post_ops(ops);
  }
  dnnl::matmul::desc d =
      bias ? dnnl::matmul::desc(operand_desc(batch, m, k, a), operand_desc(batch, k, n, b), bias_desc, dst)
           : dnnl::matmul::desc(operand_desc(batch, m, k, a), operand_desc(batch, k, n, b), dst);
  dnnl::matmul::primitive_desc pd(d, attr, engine());
  // oneDNN 2.6's AMX matmul (Debian's; the CPUs with AMX, from Sapphire Rapids on) computes wrong products for
  // 48 < n < 64 when it splits them among threads (measured, every k, layout, batch and output type, m up to 32 on
  // two threads, any m on sixteen), and stops the process on an illegal instruction (a tile load: SIGILL) for odd k
  // on more than one thread (measured, m 1-128 and n 1-512 in either layout: k 63 and every odd k tried from 1,727
  // to 4,095; none of the odd ones tried between, no even k up to 4,096): those take the next implementation
  // (AVX512_BF16), at a cost too small to see for the first, and for the second only where a product's inner length
  // is odd (attention over an odd number of rows or keys, a weight's gradient over an odd number of tokens).
  auto amx = [&] { return std::string(pd.impl_info_str()).find("amx") != std::string::npos; };
  while (((n > 48 && n < 64) || k % 2 == 1) && amx() && pd.next_impl()) {
  }
  return {dnnl::matmul(pd), memory(pd.src_desc(), engine(), nullptr), memory(pd.weights_desc(), engine(), nullptr),
          memory(pd.dst_desc(), engine(), nullptr), bias ? memory(pd.bias_desc(), engine(), nullptr) : memory(),
          memory(pd.scratchpad_desc(), engine(), nullptr)};
}

// This thread's primitives by shape (a step runs the same shapes again and again; attention's tiles call a few
// thousands of times a step from both threads, found here without a lock), the most recently used first and at
// most as many as oneDNN's primitive cache holds (ONEDNN_PRIMITIVE_CACHE_CAPACITY, 256 by default here): each holds
// its compiled kernel, and a run whose lengths vary (a batch padded to its longest sequence) makes new shapes every
// step. One evicted here and made again is found in oneDNN's cache, shared by the threads, while that still holds it.
class Primitives {
 public:
  template <class Make>
  Bound& get(const Key& key, Make&& make) {
    auto it = where_.find(key);
    if (it != where_.end()) {
      used_.splice(used_.begin(), used_, it->second);
      return it->second->second;
    }
    used_.emplace_front(key, make());
    where_.emplace(key, used_.begin());
    const size_t capacity = size_t(std::max(1, dnnl::get_primitive_cache_capacity()));  // (read once made: set)
    while (used_.size() > capacity) {
      where_.erase(used_.back().first);
      used_.pop_back();
    }
    return used_.front().second;
  }
  size_t size() const { return used_.size(); }

 private:
  std::list<std::pair<Key, Bound>> used_;
  std::map<Key, std::list<std::pair<Key, Bound>>::iterator> where_;
};

thread_local Primitives primitives;

// gemm_bf16 into C of `out`'s type.
void run(int64_t batch, int64_t m, int64_t n, int64_t k, const Bf16Operand& a, const Bf16Operand& b, void* c,
         memory::data_type out, float alpha, const BFloat16* bias, bool accumulate) {
  if (batch == 0 || m == 0 || n == 0) return;
  Key key{batch, m, n, k, a.ld, a.stride, b.ld, b.stride, a.trans, b.trans, alpha, bias != nullptr, accumulate, out};
  Bound& x = primitives.get(key, [&] { return make(batch, m, n, k, a, b, alpha, bias != nullptr, accumulate, out); });
  thread_local dnnl::stream stream(engine());
  thread_local std::vector<char> scratchpad;
  const size_t scratch_bytes = x.scratchpad.get_desc().get_size();
  if (scratchpad.size() < scratch_bytes) scratchpad.resize(scratch_bytes);
  x.src.set_data_handle(const_cast<BFloat16*>(a.data));
  x.weights.set_data_handle(const_cast<BFloat16*>(b.data));
  x.dst.set_data_handle(c);
  x.scratchpad.set_data_handle(scratchpad.data());
  dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, x.src.get()},
                             {DNNL_ARG_WEIGHTS, x.weights.get()},
                             {DNNL_ARG_DST, x.dst.get()},
                             {DNNL_ARG_SCRATCHPAD, x.scratchpad.get()},
                             {DNNL_ARG_BIAS, x.bias.get(true)}};  // (null without a bias: not passed)
  if (bias) x.bias.set_data_handle(const_cast<BFloat16*>(bias));
  dnnl::error::wrap_c_api(dnnl_primitive_execute(x.matmul.get(), stream.get(), bias ? 5 : 4, args),
                          "oneDNN's bf16 matmul failed");
  stream.wait();
}

}  // namespace

bool gemm_bf16_native() { return cpu::features().avx512_bf16; }

size_t gemm_bf16_primitives() { return primitives.size(); }

void gemm_bf16(int64_t batch, int64_t m, int64_t n, int64_t k, const Bf16Operand& a, const Bf16Operand& b, BFloat16* c,
               float alpha, const BFloat16* bias, bool accumulate) {
  run(batch, m, n, k, a, b, c, memory::data_type::bf16, alpha, bias, accumulate);
}

void gemm_bf16(int64_t batch, int64_t m, int64_t n, int64_t k, const Bf16Operand& a, const Bf16Operand& b, float* c,
               float alpha, const BFloat16* bias, bool accumulate) {
  run(batch, m, n, k, a, b, c, memory::data_type::f32, alpha, bias, accumulate);
}

}  // namespace onnxtrain::kernels
