// Parameter updates shared by the ONNX training ops and TrainingSession's optimizers.
#pragma once
#include <cmath>
#include <cstdint>

namespace onnxtrain::kernels {

// SGD with momentum, as ONNX's Momentum op defines it (with beta = 1 it is PyTorch's
// SGD with dampening 0): g' = g + l2 x; v = alpha v + beta g'; x -= lr (nesterov ? g' + alpha v : v).
// Without momentum (alpha = 0) v may be null.
template <typename T>
void momentum_step(int64_t n, T* x, const T* g, T* v, double lr, double l2, double alpha, double beta, bool nesterov) {
  for (int64_t i = 0; i < n; ++i) {
    double gr = double(g[i]) + l2 * double(x[i]);
    double vn = v ? alpha * double(v[i]) + beta * gr : gr;
    if (v) v[i] = T(vn);
    x[i] = T(double(x[i]) - lr * (nesterov ? gr + alpha * vn : vn));
  }
}

// AdamW as PyTorch defines it: x *= 1 - lr wd; m, v moving averages; bias-corrected step.
template <typename T>
void adamw_step(int64_t n, T* x, const T* g, T* m, T* v, double lr, double beta1, double beta2, double eps, double wd,
                int64_t step) {
  double c1 = 1.0 - std::pow(beta1, double(step)), c2 = 1.0 - std::pow(beta2, double(step));
  for (int64_t i = 0; i < n; ++i) {
    double gi = double(g[i]);
    double mi = beta1 * double(m[i]) + (1 - beta1) * gi;
    double vi = beta2 * double(v[i]) + (1 - beta2) * gi * gi;
    m[i] = T(mi);
    v[i] = T(vi);
    double xi = double(x[i]) * (1 - lr * wd);
    x[i] = T(xi - lr * (mi / c1) / (std::sqrt(vi / c2) + eps));
  }
}

}  // namespace onnxtrain::kernels
