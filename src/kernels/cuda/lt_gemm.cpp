// gemm's products through cuBLASLt (kernels/cuda/cublaslt.h): float32, bfloat16 and float16 operands, float32
// accumulation (CUBLAS_COMPUTE_32F: no TF32, as PyTorch's default), for the products whose operands have a unit
// stride along their rows or their columns, whose batch folds into one stride per operand, and whose base is none,
// a bias row (the bias epilogue) or one matrix shaped as the output in its dtype (C, which may be D), in the
// workspace the caller gives (the node's scratch: workspace.h). Row-major C = A B is cuBLASLt's column-major
// C^T = B^T A^T: its first operand is our B, its second our A. The algorithm its heuristic picks for a shape,
// dtypes, alignments and workspace is kept, per device.
#include <cublasLt.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "kernels/cuda/cublaslt.h"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/runtime.h"
#include "onnxtrain/error.h"

namespace onnxtrain::kernels::cuda {
namespace {

void lt_check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw Error(std::string("cuBLASLt ") + what + ": " + cublaslt().status_string(status));
}

std::optional<cudaDataType_t> cuda_type(DType t) {
  switch (t) {
    case DType::kFloat32:
      return CUDA_R_32F;
    case DType::kBFloat16:
      return CUDA_R_16BF;
    case DType::kFloat16:
      return CUDA_R_16F;
    default:
      return std::nullopt;
  }
}

// An operand of (rows, cols), element (i, j) at i * rs + j * cs, as the column-major matrix cuBLASLt reads: stored
// as it is (op N, a unit stride down its columns) or as its transpose (op T, a unit stride along its rows); `rows`,
// `cols` and `ld` are the stored matrix's. None for any other strides.
struct Operand {
  cublasOperation_t op;
  uint64_t rows, cols;
  int64_t ld;
};
std::optional<Operand> column_major(int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  if ((rs == 1 || rows == 1) && (cols == 1 || cs >= rows))
    return Operand{CUBLAS_OP_N, uint64_t(rows), uint64_t(cols), cols == 1 ? rows : cs};
  if ((cs == 1 || cols == 1) && (rows == 1 || rs >= cols))
    return Operand{CUBLAS_OP_T, uint64_t(cols), uint64_t(rows), rows == 1 ? cols : rs};
  return std::nullopt;
}

// The batch as one count and a stride per operand (A, B), when its dims fold into one: dims of size 1 dropped, each
// outer dim's strides the inner ones' times their sizes.
struct Batch {
  int64_t count = 1, a = 0, b = 0;
};
std::optional<Batch> fold(const Indexing& ix) {
  Batch r;
  bool first = true;
  for (int d = ix.rank - 1; d >= 0; --d) {
    if (ix.dims[d] == 1) continue;
    if (first) {
      r = {ix.dims[d], ix.strides[0][d], ix.strides[1][d]};
      first = false;
    } else if (ix.strides[0][d] == r.a * r.count && ix.strides[1][d] == r.b * r.count) {
      r.count *= ix.dims[d];
    } else {
      return std::nullopt;
    }
  }
  if (r.count > (int64_t(1) << 30)) return std::nullopt;
  return r;
}

uint32_t alignment(const void* p) {
  const auto at = reinterpret_cast<uintptr_t>(p);
  return at ? uint32_t(std::min<uintptr_t>(256, at & (~at + 1))) : 256u;
}

template <typename T, typename Destroy>
struct Owned {  // a cuBLASLt descriptor, destroyed with its owner
  T d = nullptr;
  Destroy destroy;
  ~Owned() {
    if (d) destroy(d);
  }
};

cublasLtMatrixLayout_t layout(Owned<cublasLtMatrixLayout_t, decltype(&cublasLtMatrixLayoutDestroy)>& into,
                              cudaDataType_t type, uint64_t rows, uint64_t cols, int64_t ld, const Batch& batch,
                              int64_t stride) {
  const CublasLt& lt = cublaslt();
  lt_check(lt.layout_create(&into.d, type, rows, cols, ld), "matrix layout");
  if (batch.count > 1) {
    const int32_t count = int32_t(batch.count);
    lt_check(lt.layout_set(into.d, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)), "batch count");
    lt_check(lt.layout_set(into.d, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)),
             "batch stride");
  }
  return into.d;
}

std::mutex& mu() {
  static std::mutex m;
  return m;
}

cublasLtHandle_t handle(int device) {  // (with mu() held)
  static std::map<int, cublasLtHandle_t> handles;
  auto it = handles.find(device);
  if (it != handles.end()) return it->second;
  cublasLtHandle_t h = nullptr;
  lt_check(cublaslt().create(&h), "create");
  return handles[device] = h;
}

}  // namespace

bool lt_gemm(DType t, DType out, const void* a, const void* b, void* c, const GemmShape& s, cudaStream_t stream) {
  static const bool tiled = [] {
    const char* v = std::getenv("ONNXTRAIN_CUDA_GEMM");
    return v && std::strcmp(v, "tiled") == 0;
  }();
  const auto in_type = cuda_type(t), out_type = cuda_type(out);
  if (tiled || !in_type || !out_type || s.k == 0) return false;
  const auto x = column_major(s.n, s.k, s.b_cs, s.b_rs);  // B^T, cuBLASLt's first operand
  const auto y = column_major(s.k, s.m, s.a_cs, s.a_rs);  // A^T, its second
  const auto batch = fold(s.batch);
  if (!x || !y || !batch) return false;
  enum Base { kNone, kBias, kMatrix } base = kNone;
  if (s.c0) {
    if (s.c0_dtype != out) return false;  // (C's dtype is D's; a bias of 16-bit operands into float32: the tiled GEMM)
    if (out == t && s.c0_rs == 0 && (s.c0_cs == 1 || s.n == 1) && s.beta == 1)
      base = kBias;
    else if (batch->count == 1 && (s.c0_cs == 1 || s.n == 1) && (s.c0_rs == s.n || s.m == 1))
      base = kMatrix;
    else
      return false;
  }
  const CublasLt& lt = cublaslt();
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  using Layout = Owned<cublasLtMatrixLayout_t, decltype(&cublasLtMatrixLayoutDestroy)>;
  Owned<cublasLtMatmulDesc_t, decltype(&cublasLtMatmulDescDestroy)> desc{nullptr, lt.desc_destroy};
  Layout lx{nullptr, lt.layout_destroy}, ly{nullptr, lt.layout_destroy}, ld{nullptr, lt.layout_destroy};
  lt_check(lt.desc_create(&desc.d, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul descriptor");
  lt_check(lt.desc_set(desc.d, CUBLASLT_MATMUL_DESC_TRANSA, &x->op, sizeof(x->op)), "transa");
  lt_check(lt.desc_set(desc.d, CUBLASLT_MATMUL_DESC_TRANSB, &y->op, sizeof(y->op)), "transb");
  if (base == kBias) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    lt_check(lt.desc_set(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)), "epilogue");
    lt_check(lt.desc_set(desc.d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &s.c0, sizeof(s.c0)), "bias");
  }
  cublasLtMatrixLayout_t lay_x = layout(lx, *in_type, x->rows, x->cols, x->ld, *batch, batch->b);
  cublasLtMatrixLayout_t lay_y = layout(ly, *in_type, y->rows, y->cols, y->ld, *batch, batch->a);
  cublasLtMatrixLayout_t lay_d = layout(ld, *out_type, uint64_t(s.n), uint64_t(s.m), s.n, *batch, s.m * s.n);
  const void* base_matrix = base == kMatrix ? s.c0 : c;
  const float alpha = s.alpha, beta = base == kMatrix ? s.beta : 0.f;
  // The algorithm for this product, kept per device, shape, dtypes and alignments.
  const std::vector<int64_t> key = {device, int64_t(t), int64_t(out), x->op, y->op, int64_t(x->rows),
                                    int64_t(x->cols), x->ld, int64_t(y->rows), int64_t(y->cols), y->ld, s.m, s.n,
                                    batch->count, batch->a, batch->b, base, alignment(a), alignment(b),
                                    alignment(c), alignment(base == kBias ? s.c0 : base_matrix),
                                    int64_t(s.workspace.bytes)};
  std::lock_guard<std::mutex> lock(mu());
  static std::map<std::vector<int64_t>, std::optional<cublasLtMatmulAlgo_t>> algos;
  auto found = algos.find(key);
  if (found == algos.end()) {
    Owned<cublasLtMatmulPreference_t, decltype(&cublasLtMatmulPreferenceDestroy)> pref{nullptr,
                                                                                       lt.preference_destroy};
    lt_check(lt.preference_create(&pref.d), "preference");
    const size_t workspace = s.workspace.bytes;
    lt_check(lt.preference_set(pref.d, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace)),
             "workspace");
    const uint32_t aligns[4] = {alignment(b), alignment(a), alignment(base_matrix), alignment(c)};
    const cublasLtMatmulPreferenceAttributes_t which[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; ++i)
      lt_check(lt.preference_set(pref.d, which[i], &aligns[i], sizeof(uint32_t)), "alignment");
    cublasLtMatmulHeuristicResult_t result{};
    int returned = 0;
    cublasStatus_t status = lt.heuristic(handle(device), desc.d, lay_x, lay_y, lay_d, lay_d, pref.d, 1, &result,
                                         &returned);
    std::optional<cublasLtMatmulAlgo_t> algo;
    if (status == CUBLAS_STATUS_SUCCESS && returned > 0) algo = result.algo;
    found = algos.emplace(key, algo).first;
  }
  if (!found->second) return false;  // (no algorithm for it: the tiled kernel computes it)
  lt_check(lt.matmul(handle(device), desc.d, &alpha, b, lay_x, a, lay_y, &beta, base_matrix, lay_d, c, lay_d,
                     &*found->second, s.workspace.at, s.workspace.bytes, stream),
           "matmul");
  return true;
}

}  // namespace onnxtrain::kernels::cuda
