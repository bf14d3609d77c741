// The op table. Each op is declared once, in one file of src/ops/: a class holding its typed attributes (read
// once, when the node is bound; declared in the family's header for its kernels), its shape function (symbolic
// dims and small integer values), its gradient rule, cost and traits. Kernels live in src/kernels/<device>/.
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/dim.h"
#include "ir/graph.h"
#include "onnxtrain/error.h"
#include "onnxtrain/tensor.h"

namespace onnxtrain::ops {

// What a shape function sees of one input: dtype, symbolic shape, and, when
// known, its data (a constant tensor, or the symbolic elements of a small
// integer tensor such as the output of Shape).
struct InputInfo {
  bool present = false;
  DType dtype = DType::kUndefined;
  Shape shape;
  const Tensor* tensor = nullptr;         // constant or run-time data
  std::optional<std::vector<Dim>> value;  // symbolic elements
};

// The shape-function view of a node's inputs at run time, and before it (their symbolic shapes and values).
std::vector<InputInfo> runtime_inputs(const std::vector<const Tensor*>& tensors);
std::vector<InputInfo> symbolic_inputs(const ir::Node& n);

struct OutputInfo {
  DType dtype = DType::kUndefined;
  Shape shape;
  std::optional<std::vector<Dim>> value;
};

// Thrown by InferCtx::unknown before a run; caught by kernels::infer_shapes.
struct ShapeUnknown {
  std::string what;
};

class InferCtx {
 public:
  InferCtx(const ir::Node& node, std::vector<InputInfo> inputs, ir::Graph* graph)
      : node_(node), in_(std::move(inputs)), out_(node.outputs.size()), graph_(graph) {}

  const ir::Node& node() const { return node_; }
  size_t num_inputs() const { return in_.size(); }
  bool has(size_t i) const { return i < in_.size() && in_[i].present; }
  DType dtype(size_t i) const { return input(i).dtype; }
  const Shape& shape(size_t i) const { return input(i).shape; }
  int64_t rank(size_t i) const { return int64_t(input(i).shape.size()); }
  // Input i's data (a constant, or at run time the tensor), which the shape function reads on the host: the op
  // declares i in Op::host_inputs().
  const Tensor* tensor(size_t i) const {
    if (!has(i)) return nullptr;
    read_ |= uint64_t(1) << i;
    return in_[i].tensor;
  }
  // Symbolic elements of integer input i when known (constants, shapes, ...), read for the output's shape (the op
  // declares i in Op::host_inputs()).
  const std::vector<Dim>* value(size_t i);
  // The same, read only to pass values on to the outputs (value propagation): before a run; at run time nullptr,
  // since the kernel computes the data and shapes never need it.
  const std::vector<Dim>* propagated(size_t i) { return at_runtime() ? nullptr : value(i); }
  std::optional<std::vector<Dim>> propagated_opt(size_t i) {
    auto* v = propagated(i);
    return v ? std::optional(*v) : std::nullopt;
  }
  // The inputs whose data the shape function read, a bit per input.
  uint64_t data_read() const { return read_; }
  // Concrete int64 elements of input i when all are known.
  std::optional<std::vector<int64_t>> int_values(size_t i);

  void set(size_t i, DType dtype, Shape shape, std::optional<std::vector<Dim>> value = std::nullopt);
  std::vector<OutputInfo>& outputs() { return out_; }
  size_t num_outputs() const { return out_.size(); }

  // A new symbol for a dim that depends on data; the run-time pass never needs it.
  Dim fresh(const std::string& hint);
  bool at_runtime() const { return graph_ == nullptr; }
  // The tensors of another run of the node with the same dtypes and dims (and host values) as those it was given:
  // a result kept between runs (kernels::NodeCache) reads the run's own (kernels read host inputs' data here).
  void rebind_tensors(const std::vector<const Tensor*>& tensors) {
    for (size_t i = 0; i < in_.size() && i < tensors.size(); ++i) in_[i].tensor = tensors[i];
  }
  [[noreturn]] void fail(const std::string& msg) const;
  // Before a run, an output whose rank or sizes depend on data that is not known
  // yet: the outputs stay unknown until run time. At run time it is an error.
  [[noreturn]] void unknown(const std::string& what) const;
  // Normalizes a possibly negative axis against a rank.
  int64_t axis(int64_t a, int64_t rank) const;

 private:
  const InputInfo& input(size_t i) const;  // a ShapeError naming the node when the node has no input i
  const ir::Node& node_;
  std::vector<InputInfo> in_;
  std::vector<OutputInfo> out_;
  ir::Graph* graph_;
  mutable uint64_t read_ = 0;
};

class GradCtx;

class Op {
 public:
  virtual ~Op() = default;
  // Builds the backward nodes of this op (see ops/grad.h). The default: not differentiable.
  virtual void grad(GradCtx& g) const;
  virtual void infer(InferCtx& ctx) const = 0;
  // Output 0 may be written into input `inplace_input()`'s buffer; -1 if not.
  virtual int inplace_input() const { return -1; }
  // The same for any output: the input whose buffer output `i` may be written into, or -1 (by default output 0's).
  virtual int inplace_input_of(size_t i) const { return i == 0 ? inplace_input() : -1; }
  // Output 0 is input 0's data under another shape (Reshape, Squeeze, ...):
  // run_node shares the storage; such an op has no kernel.
  virtual bool is_view() const { return false; }
  virtual bool is_random() const { return false; }
  // The memory optimizer may run this op again in the backward part (cheap, or worth it, and deterministic
  // given its inputs and random key).
  virtual bool recomputable() const { return false; }
  // Output i may be left out (nullptr) when nothing reads it, its kernels then skipping the work it takes: the
  // dead_code pass leaves it out, and the memory optimizer prices a recompute clone without it.
  virtual bool omittable_output(size_t i) const { return false; }
  // Work of one run, in floating-point operations, for the memory optimizer's costs (symbolic).
  virtual Dim flops(const ir::Node& n) const;
  // Output i's dtype from the input dtypes, for when shapes are not known before a run
  // (infer() decides otherwise). The default: the first input's dtype.
  virtual DType output_dtype(size_t i, const std::vector<DType>& inputs) const {
    return inputs.empty() ? DType::kUndefined : inputs[0];
  }
  // The inputs whose data the shape function reads (shape-like: Reshape's shape, Slice's starts, ...), a bit per
  // input: run_node hands them to the shape function and the kernel in host memory.
  virtual uint64_t host_inputs() const { return 0; }
  // Whether gradients flow through output i (not through BatchNormalization's running statistics).
  virtual bool differentiable_output(size_t i) const { return true; }
  // Whether input i may be left without a value at run time although the graph names one: a forward output's
  // gradient the caller did not make (PyTorch passes none for an output no loss reads), read as zeros.
  virtual bool input_may_be_unset(size_t i) const { return false; }
};

// An op with typed attributes (read once, from the node) that its kernels read: A is a plain struct declared in
// the op family's header (src/ops/<family>.h), the one thing of an op a kernel sees besides the node.
template <typename A>
class OpWith : public Op {
 public:
  explicit OpWith(A a) : attrs(std::move(a)) {}
  const A attrs;
};

// A bit per input index (Op::host_inputs).
constexpr uint64_t input_bits(std::initializer_list<int> indices) {
  uint64_t r = 0;
  for (int i : indices) r |= uint64_t(1) << i;
  return r;
}

// Raises the error for a gradient that flows into an op without a rule.
[[noreturn]] void no_gradient(const GradCtx& g);

using OpFactory = std::function<std::shared_ptr<const Op>(const ir::Node&)>;

struct OpDef {
  std::string domain;  // "" for ONNX's default domain
  std::string name;
  OpFactory make;
};

// Registers ops (each op file does it once, from a static initializer).
bool register_ops(std::vector<OpDef> defs);
const OpDef* find_op(const std::string& domain, const std::string& name);
std::vector<std::string> registered_ops();

template <typename T>
OpFactory factory() {
  return [](const ir::Node& n) { return std::make_shared<const T>(n); };
}

// Runs `f`, a shape function or kernel of node `n`: a read past the inputs, outputs or attribute values the node
// has (std::out_of_range from a checked access) becomes a ShapeError naming the node.
template <typename F>
auto reading_node(const ir::Node& n, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::out_of_range& e) {
    throw ShapeError(n.where() + ": reads an input, output or attribute value the node does not have (" +
                     std::string(e.what()) + ")");
  }
}

}  // namespace onnxtrain::ops
