// Einsum: any equation with ellipsis and implicit output, evaluated as one
// loop over all labels (correct for every case; no BLAS fast path yet).
#include <map>
#include <set>

#include "kernels/cpu/dispatch.h"
#include "ops/grad.h"
#include "ops/op.h"
#include "ops/shape_util.h"

namespace onnxtrain::ops {
namespace {

// An equation with each operand's labels; ellipsis dims become labels '0'..'9'.
struct Equation {
  std::vector<std::string> inputs;
  std::string output;
};

class EinsumOp : public Op {
 public:
  explicit EinsumOp(const ir::Node& n) : eq_(n.attr_string("equation", "")) {
    eq_.erase(std::remove(eq_.begin(), eq_.end(), ' '), eq_.end());
    if (eq_.empty()) throw ModelError(n.where() + ": equation is empty");
  }

  Equation parse(InferCtx& ctx) const {
    Equation e;
    size_t arrow = eq_.find("->");
    std::string lhs = eq_.substr(0, arrow);
    size_t start = 0;
    int ell_rank = 0;
    for (size_t i = 0; i <= lhs.size(); ++i)
      if (i == lhs.size() || lhs[i] == ',') {
        std::string term = lhs.substr(start, i - start);
        size_t k = e.inputs.size();
        if (!ctx.has(k)) ctx.fail("equation '" + eq_ + "' has more operands than inputs");
        size_t dots = term.find("...");
        if (dots != std::string::npos) {
          int n = int(ctx.rank(k)) - int(term.size() - 3);
          if (n < 0) ctx.fail("operand " + std::to_string(k) + " rank is too small for '" + term + "'");
          ell_rank = std::max(ell_rank, n);
          std::string ell;
          for (int j = 0; j < n; ++j) ell += char('0' + (ell_rank - n + j));
          term = term.substr(0, dots) + ell + term.substr(dots + 3);
        }
        if (int64_t(term.size()) != ctx.rank(k))
          ctx.fail("operand " + std::to_string(k) + " has rank " + std::to_string(ctx.rank(k)) + " but '" + term + "' labels");
        e.inputs.push_back(term);
        start = i + 1;
      }
    std::string ell_all;
    for (int j = 0; j < ell_rank; ++j) ell_all += char('0' + j);
    if (arrow != std::string::npos) {
      e.output = eq_.substr(arrow + 2);
      size_t dots = e.output.find("...");
      if (dots != std::string::npos) e.output = e.output.substr(0, dots) + ell_all + e.output.substr(dots + 3);
    } else {
      std::map<char, int> count;
      for (auto& t : e.inputs)
        for (char ch : t) count[ch]++;
      e.output = ell_all;
      for (auto& [ch, k] : count)
        if (k == 1 && !(ch >= '0' && ch <= '9')) e.output += ch;
    }
    return e;
  }

  // Two operands without repeated labels or ellipsis: each operand's gradient is
  // the einsum of dY with the other operand, when every label of the operand
  // appears in the output or in the other operand.
  void grad(GradCtx& g) const override {
    size_t arrow = eq_.find("->");
    if (g.node().inputs.size() != 2 || arrow == std::string::npos || eq_.find("...") != std::string::npos) no_gradient(g);
    std::string lhs = eq_.substr(0, arrow), out = eq_.substr(arrow + 2);
    size_t comma = lhs.find(',');
    std::string terms[2] = {lhs.substr(0, comma), lhs.substr(comma + 1)};
    auto repeats = [](const std::string& t) { return std::set<char>(t.begin(), t.end()).size() != t.size(); };
    if (repeats(terms[0]) || repeats(terms[1]) || repeats(out)) no_gradient(g);
    for (size_t i = 0; i < 2; ++i) {
      if (!g.needs(i)) continue;
      const std::string &mine = terms[i], &other = terms[1 - i];
      for (char ch : mine)
        if (out.find(ch) == std::string::npos && other.find(ch) == std::string::npos) no_gradient(g);
      g.set_dx(i, g.op("Einsum", {g.dy(0), g.x(1 - i)}, {{"equation", out + "," + other + "->" + mine}}));
    }
  }
  void infer(InferCtx& ctx) const override {
    Equation e = parse(ctx);
    std::map<char, Dim> size;
    for (size_t k = 0; k < e.inputs.size(); ++k)
      for (size_t j = 0; j < e.inputs[k].size(); ++j) {
        char ch = e.inputs[k][j];
        const Dim& d = ctx.shape(k)[j];
        auto it = size.find(ch);
        if (it == size.end() || it->second == Dim(1)) size[ch] = d;
        else if (d != Dim(1) && d.is_const() && it->second.is_const() && d != it->second)
          ctx.fail("label '" + std::string(1, ch) + "' has sizes " + it->second.str() + " and " + d.str());
      }
    Shape out;
    for (char ch : e.output) {
      if (!size.count(ch)) ctx.fail("output label '" + std::string(1, ch) + "' is not in any operand");
      out.push_back(size[ch]);
    }
    ctx.set(0, ctx.dtype(0), out);
  }

  void compute(ComputeCtx& c) const override {
    Equation e = parse(*c.shapes);
    std::string labels = e.output;
    for (auto& t : e.inputs)
      for (char ch : t)
        if (labels.find(ch) == std::string::npos) labels += ch;
    std::map<char, int64_t> size;
    for (size_t k = 0; k < e.inputs.size(); ++k)
      for (size_t j = 0; j < e.inputs[k].size(); ++j) {
        int64_t d = c.in(k).dims()[j];
        if (!size.count(e.inputs[k][j]) || size[e.inputs[k][j]] == 1) size[e.inputs[k][j]] = d;
      }
    std::vector<int64_t> extent;
    for (char ch : labels) extent.push_back(size[ch]);
    // Element strides of each operand per label (0 where absent or broadcast).
    std::vector<std::vector<int64_t>> strides(e.inputs.size(), std::vector<int64_t>(labels.size(), 0));
    for (size_t k = 0; k < e.inputs.size(); ++k) {
      int64_t st = 1;
      for (int64_t j = int64_t(e.inputs[k].size()) - 1; j >= 0; --j) {
        int64_t d = c.in(k).dims()[size_t(j)];
        if (d != 1) strides[k][labels.find(e.inputs[k][size_t(j)])] += st;
        st *= d;
      }
    }
    int64_t n_out = 1, n_sum = 1;
    for (size_t i = 0; i < labels.size(); ++i) (i < e.output.size() ? n_out : n_sum) *= extent[i];
    kernels::dispatch<kernels::kNumeric>(c.in(0).dtype(), c.node.where(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      T* out = c.out(0).data<T>();
      std::vector<int64_t> idx(labels.size());
      for (int64_t o = 0; o < n_out; ++o) {
        int64_t rem = o;
        for (int64_t i = int64_t(e.output.size()) - 1; i >= 0; --i) {
          idx[size_t(i)] = rem % extent[size_t(i)];
          rem /= extent[size_t(i)];
        }
        T acc = 0;
        for (int64_t s = 0; s < n_sum; ++s) {
          int64_t srem = s;
          for (int64_t i = int64_t(labels.size()) - 1; i >= int64_t(e.output.size()); --i) {
            idx[size_t(i)] = srem % extent[size_t(i)];
            srem /= extent[size_t(i)];
          }
          T prod = 1;
          for (size_t k = 0; k < e.inputs.size(); ++k) {
            int64_t off = 0;
            for (size_t i = 0; i < labels.size(); ++i) off += idx[i] * strides[k][i];
            prod *= c.in(k).data<T>()[off];
          }
          acc += prod;
        }
        out[o] = acc;
      }
    });
  }

 private:
  std::string eq_;
};
OT_REGISTER_OP("Einsum", EinsumOp);

}  // namespace
}  // namespace onnxtrain::ops
