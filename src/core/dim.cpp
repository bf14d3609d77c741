#include "core/dim.h"

#include <algorithm>
#include <cassert>
#include <sstream>

#include "onnxtrain/error.h"

namespace onnxtrain {

// An atom is a named symbol or an opaque function of other dims; `key` is its
// canonical text and orders atoms inside a monomial.
struct Dim::Atom {
  enum Kind { kSymbol, kFloorDiv, kCeilDiv, kMin, kMax } kind;
  std::string key;
  Dim a, b;
};

bool Dim::MonoLess::operator()(const Monomial& x, const Monomial& y) const {
  // Higher degree first, then by atom keys: a stable canonical order.
  if (x.size() != y.size()) return x.size() > y.size();
  for (size_t i = 0; i < x.size(); ++i)
    if (x[i]->key != y[i]->key) return x[i]->key < y[i]->key;
  return false;
}

Dim Dim::from_poly(Poly p) {
  for (auto it = p.begin(); it != p.end();) it = it->second == 0 ? p.erase(it) : std::next(it);
  if (p.empty()) return Dim(0);
  if (p.size() == 1 && p.begin()->first.empty()) return Dim(p.begin()->second);
  Dim d;
  d.poly_ = std::make_shared<const Poly>(std::move(p));
  return d;
}

Dim::Poly Dim::as_poly() const {
  if (poly_) return *poly_;
  Poly p;
  if (value_ != 0) p[{}] = value_;
  return p;
}

// Sizes computed from a model's numbers: past int64 is a ShapeError, not a wrapped (undefined) value.
static int64_t add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r))
    throw ShapeError("a size overflows int64: " + std::to_string(a) + " + " + std::to_string(b));
  return r;
}
static int64_t mul(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r))
    throw ShapeError("a size overflows int64: " + std::to_string(a) + " * " + std::to_string(b));
  return r;
}

Dim Dim::symbol(const std::string& name) {
  Poly p;
  p[{std::make_shared<const Atom>(Atom{Atom::kSymbol, name, Dim(), Dim()})}] = 1;
  return from_poly(std::move(p));
}

static std::string func_key(const char* f, const Dim& a, const Dim& b) {
  return std::string(f) + "(" + a.str() + "," + b.str() + ")";
}

Dim Dim::floor_div(const Dim& a, const Dim& b) {
  if (a.is_const() && b.is_const() && b.value() != 0) {
    if (b.value() == -1) return Dim(mul(a.value(), -1));
    int64_t q = a.value() / b.value();
    if ((a.value() % b.value() != 0) && ((a.value() < 0) != (b.value() < 0))) --q;
    return Dim(q);
  }
  if (b.is_const() && b.value() == 1) return a;
  if (b.is_const() && b.value() > 0) {  // exact when every coefficient divides
    Poly p = a.as_poly();
    bool exact = true;
    for (auto& [m, c] : p) exact = exact && c % b.value() == 0;
    if (exact) {
      for (auto& [m, c] : p) c /= b.value();
      return from_poly(std::move(p));
    }
  }
  if (a == b) return Dim(1);
  if (!b.is_const() && b.poly_->size() == 1) {  // division by one monomial c*m: exact when every term holds it
    const auto& [bm, bc] = *b.poly_->begin();
    Poly q;
    bool exact = bc > 0;
    for (auto& [m, c] : a.as_poly()) {
      if (!exact) break;
      Monomial rest = m;
      for (auto& at : bm) {
        auto it = std::find_if(rest.begin(), rest.end(), [&](auto& x) { return x->key == at->key; });
        if (it == rest.end()) {
          exact = false;
          break;
        }
        rest.erase(it);
      }
      exact = exact && c % bc == 0;
      if (exact) q[rest] += c / bc;
    }
    if (exact) return from_poly(std::move(q));
  }
  Poly p;
  p[{std::make_shared<const Atom>(Atom{Atom::kFloorDiv, func_key("floor", a, b), a, b})}] = 1;
  return from_poly(std::move(p));
}

Dim Dim::ceil_div(const Dim& a, const Dim& b) {
  if (a.is_const() && b.is_const() && b.value() > 0) return floor_div(a + b - 1, b);
  if (b.is_const() && b.value() == 1) return a;
  Poly p;
  p[{std::make_shared<const Atom>(Atom{Atom::kCeilDiv, func_key("ceil", a, b), a, b})}] = 1;
  return from_poly(std::move(p));
}

// Every atom is a size (>= 0), so a sum of atoms with non-negative coefficients is >= 0.
bool Dim::provably_non_negative() const {
  if (is_const()) return value_ >= 0;
  for (auto& [m, c] : *poly_)
    if (c < 0) return false;
  return true;
}

Dim Dim::min(const Dim& a, const Dim& b) {
  if (a.is_const() && b.is_const()) return Dim(std::min(a.value(), b.value()));
  if (a == b) return a;
  if ((a - b).provably_non_negative()) return b;
  if ((b - a).provably_non_negative()) return a;
  Poly p;
  const Dim& lo = a.str() < b.str() ? a : b;
  const Dim& hi = a.str() < b.str() ? b : a;
  p[{std::make_shared<const Atom>(Atom{Atom::kMin, func_key("min", lo, hi), lo, hi})}] = 1;
  return from_poly(std::move(p));
}

Dim Dim::max(const Dim& a, const Dim& b) {
  if (a.is_const() && b.is_const()) return Dim(std::max(a.value(), b.value()));
  if (a == b) return a;
  if ((a - b).provably_non_negative()) return a;
  if ((b - a).provably_non_negative()) return b;
  Poly p;
  const Dim& lo = a.str() < b.str() ? a : b;
  const Dim& hi = a.str() < b.str() ? b : a;
  p[{std::make_shared<const Atom>(Atom{Atom::kMax, func_key("max", lo, hi), lo, hi})}] = 1;
  return from_poly(std::move(p));
}

Dim operator+(const Dim& a, const Dim& b) {
  if (a.is_const() && b.is_const()) return Dim(add(a.value_, b.value_));
  Dim::Poly p = a.as_poly();
  for (auto& [m, c] : b.as_poly()) p[m] = add(p[m], c);
  return Dim::from_poly(std::move(p));
}

Dim operator-(const Dim& a, const Dim& b) { return a + b * Dim(-1); }

Dim operator*(const Dim& a, const Dim& b) {
  if (a.is_const() && b.is_const()) return Dim(mul(a.value_, b.value_));
  Dim::Poly p;
  for (auto& [ma, ca] : a.as_poly())
    for (auto& [mb, cb] : b.as_poly()) {
      Dim::Monomial m = ma;
      m.insert(m.end(), mb.begin(), mb.end());
      std::sort(m.begin(), m.end(), [](auto& x, auto& y) { return x->key < y->key; });
      p[m] = add(p[m], mul(ca, cb));
    }
  return Dim::from_poly(std::move(p));
}

bool operator==(const Dim& a, const Dim& b) {
  if (a.is_const() != b.is_const()) return false;
  if (a.is_const()) return a.value_ == b.value_;
  if (a.poly_->size() != b.poly_->size()) return false;
  for (auto ia = a.poly_->begin(), ib = b.poly_->begin(); ia != a.poly_->end(); ++ia, ++ib) {
    if (ia->second != ib->second) return false;
    if (ia->first.size() != ib->first.size()) return false;
    for (size_t i = 0; i < ia->first.size(); ++i)
      if (ia->first[i]->key != ib->first[i]->key) return false;
  }
  return true;
}

static std::optional<int64_t> eval_atom(const Dim::Atom& at, const Bindings& b) {
  if (at.kind == Dim::Atom::kSymbol) {
    auto it = b.find(at.key);
    if (it == b.end()) return std::nullopt;
    return it->second;
  }
  auto x = at.a.eval(b), y = at.b.eval(b);
  if (!x || !y) return std::nullopt;
  switch (at.kind) {
    case Dim::Atom::kFloorDiv:
      return *y == 0 ? std::nullopt : std::optional(Dim::floor_div(*x, *y).value());
    case Dim::Atom::kCeilDiv:
      return *y == 0 ? std::nullopt : std::optional(Dim::floor_div(add(add(*x, *y), -1), *y).value());
    case Dim::Atom::kMin:
      return std::min(*x, *y);
    case Dim::Atom::kMax:
      return std::max(*x, *y);
    default:
      return std::nullopt;
  }
}

std::optional<int64_t> Dim::eval(const Bindings& b) const {
  if (is_const()) return value_;
  int64_t sum = 0;
  for (auto& [m, c] : *poly_) {
    int64_t prod = c;
    for (auto& at : m) {
      auto v = eval_atom(*at, b);
      if (!v) return std::nullopt;
      prod = mul(prod, *v);
    }
    sum = add(sum, prod);
  }
  return sum;
}

std::string Dim::str() const {
  if (is_const()) return std::to_string(value_);
  std::ostringstream os;
  bool first = true;
  for (auto& [m, c] : *poly_) {
    int64_t coef = c;
    if (!first)
      os << (coef < 0 ? " - " : " + ");
    else if (coef < 0)
      os << "-";
    if (coef < 0) coef = -coef;
    first = false;
    bool wrote = false;
    if (coef != 1 || m.empty()) {
      os << coef;
      wrote = true;
    }
    for (auto& at : m) {
      if (wrote) os << "*";
      os << at->key;
      wrote = true;
    }
  }
  return os.str();
}

std::optional<std::string> Dim::lone_symbol() const {
  std::vector<std::string> names;
  symbols(&names);
  if (names.size() == 1 && *this == symbol(names[0])) return names[0];
  return std::nullopt;
}

void Dim::symbols(std::vector<std::string>* out) const {
  if (is_const()) return;
  for (auto& [m, c] : *poly_)
    for (auto& at : m) {
      if (at->kind == Atom::kSymbol) {
        if (std::find(out->begin(), out->end(), at->key) == out->end()) out->push_back(at->key);
      } else {
        at->a.symbols(out);
        at->b.symbols(out);
      }
    }
}

std::string shape_str(const Shape& s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? ", " : "") + s[i].str();
  return r + "]";
}

Dim shape_numel(const Shape& s) {
  Dim n(1);
  for (auto& d : s) n = n * d;
  return n;
}

std::optional<std::vector<int64_t>> eval_shape(const Shape& s, const Bindings& b) {
  std::vector<int64_t> r;
  r.reserve(s.size());
  for (auto& d : s) {
    auto v = d.eval(b);
    if (!v) return std::nullopt;
    r.push_back(*v);
  }
  return r;
}

Shape const_shape(const std::vector<int64_t>& dims) { return Shape(dims.begin(), dims.end()); }

}  // namespace onnxtrain
