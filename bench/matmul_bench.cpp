// A 1024x1024x1024 MatMul node run through a Session, next to OpenBLAS's sgemm
// called directly on the same data, same threads, same run.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>

#include "onnxtrain/session.h"
#include "runtime/session_impl.h"

using namespace onnxtrain;

static double median_ms(int reps, const std::function<void()>& f) {
  f();  // warm-up
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto s = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - s).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int main(int argc, char** argv) {
  const int64_t n = 1024;
  const int reps = argc > 1 ? std::atoi(argv[1]) : 15;
  auto g = std::make_unique<ir::Graph>();
  g->opsets[""] = 20;
  auto input = [&](const char* name) {
    ir::Value* v = g->add_value(name);
    v->dtype = DType::kFloat32;
    v->shape = {Dim(n), Dim(n)};
    v->has_shape = true;
    g->inputs.push_back(v);
    return v;
  };
  ir::Value *a = input("a"), *b = input("b"), *y = g->add_value("y");
  g->add_node("MatMul", {a, b}, {y})->opset = 20;
  g->outputs.push_back(y);
  Session s = inference_session(std::move(g));
  Tensor ta(DType::kFloat32, {n, n}), tb(DType::kFloat32, {n, n}), tc(DType::kFloat32, {n, n});
  for (int64_t i = 0; i < n * n; ++i) {
    ta.data<float>()[i] = float(i % 7) * 0.1f;
    tb.data<float>()[i] = float(i % 5) * 0.1f;
  }
  double ours = median_ms(reps, [&] { s.run({{"a", ta}, {"b", tb}}); });
  double blas = median_ms(reps, [&] {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(n), int(n), int(n), 1.0f, ta.data<float>(), int(n),
                tb.data<float>(), int(n), 0.0f, tc.data<float>(), int(n));
  });
  double gflop = 2.0 * double(n) * double(n) * double(n) / 1e9;
  std::printf("MatMul %lldx%lldx%lld, median of %d runs, %d OpenBLAS threads\n", (long long)n, (long long)n,
              (long long)n,
              reps, openblas_get_num_threads());
  std::printf("%-28s %10s %10s\n", "", "ms", "GFLOP/s");
  std::printf("%-28s %10.2f %10.1f\n", "onnxtrain Session (MatMul)", ours, gflop / ours * 1e3);
  std::printf("%-28s %10.2f %10.1f\n", "OpenBLAS cblas_sgemm", blas, gflop / blas * 1e3);
  std::printf("onnxtrain / OpenBLAS throughput: %.1f%%\n", 100.0 * blas / ours);
  return 0;
}
