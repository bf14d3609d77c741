// Einsum: any equation with ellipsis and implicit output (its kernel: kernels/cpu/einsum.cpp).
#include "ops/einsum.h"

#include <map>
#include <set>

#include "onnxtrain/error.h"
#include "ops/grad.h"
#include "ops/op.h"
#include "ops/shape_util.h"

namespace onnxtrain::ops {
namespace {

EinsumAttrs einsum_attrs(const ir::Node& n) {
  std::string eq = n.attr_string("equation", "");
  eq.erase(std::remove(eq.begin(), eq.end(), ' '), eq.end());
  if (eq.empty()) throw ModelError(n.where() + ": equation is empty");
  return {eq};
}

class EinsumOp : public OpWith<EinsumAttrs> {
 public:
  explicit EinsumOp(const ir::Node& n) : OpWith(einsum_attrs(n)) {}

  // Two operands without repeated labels or ellipsis: each operand's gradient is
  // the einsum of dY with the other operand, when every label of the operand
  // appears in the output or in the other operand.
  void grad(GradCtx& g) const override {
    size_t arrow = attrs.equation.find("->");
    if (g.node().inputs.size() != 2 || arrow == std::string::npos || attrs.equation.find("...") != std::string::npos)
      no_gradient(g);
    std::string lhs = attrs.equation.substr(0, arrow), out = attrs.equation.substr(arrow + 2);
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
    EinsumAttrs::Equation e = attrs.parse(ctx);
    std::map<char, Dim> size;
    for (size_t k = 0; k < e.inputs.size(); ++k)
      for (size_t j = 0; j < e.inputs[k].size(); ++j) {
        char ch = e.inputs[k][j];
        const Dim& d = ctx.shape(k)[j];
        auto it = size.find(ch);
        if (it == size.end() || it->second == Dim(1))
          size[ch] = d;
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
};

const bool kRegistered = register_ops({{"", "Einsum", factory<EinsumOp>()}});

}  // namespace

EinsumAttrs::Equation EinsumAttrs::parse(InferCtx& ctx) const {
  Equation e;
  size_t arrow = equation.find("->");
  std::string lhs = equation.substr(0, arrow);
  size_t start = 0;
  int ell_rank = 0;
  for (size_t i = 0; i <= lhs.size(); ++i)
    if (i == lhs.size() || lhs[i] == ',') {
      std::string term = lhs.substr(start, i - start);
      size_t k = e.inputs.size();
      if (!ctx.has(k)) ctx.fail("equation '" + equation + "' has more operands than inputs");
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
        ctx.fail("operand " + std::to_string(k) + " has rank " + std::to_string(ctx.rank(k)) + " but '" + term +
                 "' labels");
      e.inputs.push_back(term);
      start = i + 1;
    }
  std::string ell_all;
  for (int j = 0; j < ell_rank; ++j) ell_all += char('0' + j);
  if (arrow != std::string::npos) {
    e.output = equation.substr(arrow + 2);
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

}  // namespace onnxtrain::ops
