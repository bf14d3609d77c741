// Symbolic dimensions: a canonical sum of products over named symbols, so that
// equal sizes compare equal (`a*b` == `b*a`, `a+a` == `2*a`). Non-polynomial
// sizes (floor/ceil division, min, max) are opaque atoms inside the sum that
// still evaluate for concrete bindings.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "onnxtrain/bindings.h"

namespace onnxtrain {

class Dim;

class Dim {
 public:
  Dim() : value_(0) {}
  Dim(int64_t v) : value_(v) {}  // NOLINT: constants convert implicitly
  static Dim symbol(const std::string& name);
  static Dim floor_div(const Dim& a, const Dim& b);
  static Dim ceil_div(const Dim& a, const Dim& b);
  static Dim min(const Dim& a, const Dim& b);
  static Dim max(const Dim& a, const Dim& b);

  bool is_const() const { return poly_ == nullptr; }
  int64_t value() const { return value_; }  // only when is_const()
  // The value for the given symbol bindings; nullopt when a symbol is unbound.
  std::optional<int64_t> eval(const Bindings& b) const;
  std::string str() const;
  // True when the value is >= 0 for every binding (symbols are sizes, so >= 0).
  bool provably_non_negative() const;
  // Every symbol the expression mentions.
  void symbols(std::vector<std::string>* out) const;
  // The symbol's name where the dim is one symbol alone (`n`, not `2*n` nor `n+1`).
  std::optional<std::string> lone_symbol() const;

  friend Dim operator+(const Dim& a, const Dim& b);
  friend Dim operator-(const Dim& a, const Dim& b);
  friend Dim operator*(const Dim& a, const Dim& b);
  friend bool operator==(const Dim& a, const Dim& b);
  friend bool operator!=(const Dim& a, const Dim& b) { return !(a == b); }

  struct Atom;
  using Monomial = std::vector<std::shared_ptr<const Atom>>;  // sorted by key
  struct MonoLess {
    bool operator()(const Monomial& a, const Monomial& b) const;
  };
  using Poly = std::map<Monomial, int64_t, MonoLess>;

 private:
  static Dim from_poly(Poly p);
  Poly as_poly() const;
  int64_t value_;
  std::shared_ptr<const Poly> poly_;  // null for constants
};

using Shape = std::vector<Dim>;
std::string shape_str(const Shape& s);
Dim shape_numel(const Shape& s);
// Concrete dims for the bindings; nullopt when some dim cannot be evaluated.
std::optional<std::vector<int64_t>> eval_shape(const Shape& s, const Bindings& b);
Shape const_shape(const std::vector<int64_t>& dims);

}  // namespace onnxtrain
