// The graph: values (typed, symbolically shaped), nodes (ops with typed
// attributes) and the graph's inputs, outputs and initializers.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/dim.h"
#include "ir/attribute.h"
#include "onnxtrain/tensor.h"

namespace onnxtrain::ops {
class Op;
}

namespace onnxtrain::ir {

struct Node;

struct Value {
  std::string name;
  DType dtype = DType::kUndefined;
  Shape shape;
  bool has_shape = false;
  Node* producer = nullptr;
  std::vector<Node*> consumers;
  std::optional<Tensor> initializer;          // constant data (initializer or folded constant)
  bool trainable = false;                     // an initializer that training updates: never folded
  std::optional<std::vector<Dim>> sym_value;  // elements of a small integer tensor, symbolically
  std::string type_str() const;               // "float32[batch, 4]"
  // The bytes its elements take, from its shape; the symbol bytes(<name>) when the shape is known only at run
  // time. A ShapeError naming the node that makes it when they would pass 2^63.
  Dim bytes() const;
};

struct Node {
  std::string name;
  std::string op_type;
  std::string domain;           // "" for the default ONNX domain
  int64_t opset = 0;            // the opset of its domain in the model
  std::vector<Value*> inputs;   // nullptr for an omitted optional input
  std::vector<Value*> outputs;  // nullptr for an omitted optional output
  Attributes attrs;
  std::shared_ptr<const ops::Op> op;  // bound at import: typed attributes, shape function, kernel
  std::string random_key;             // random ops: the key their numbers derive from (the name when empty)
  bool backward = false;              // made by autodiff: runs in the backward part of a training step

  // The key a random op's numbers derive from: random_key, else the name (what a clone or a gradient copies to
  // draw the same numbers).
  const std::string& key() const { return random_key.empty() ? name : random_key; }
  // "node 'name' (OpType)": the prefix of every message about this node.
  std::string where() const;
  Value* input(size_t i) const { return i < inputs.size() ? inputs[i] : nullptr; }
  bool has_attr(const std::string& key) const { return attrs.count(key) != 0; }
  // Typed attribute reads; a wrong kind is a ModelError naming the node.
  int64_t attr_int(const std::string& key, int64_t dflt) const;
  int64_t attr_int(const std::string& key) const;
  float attr_float(const std::string& key, float dflt) const;
  float attr_float(const std::string& key) const;
  std::string attr_string(const std::string& key, const std::string& dflt) const;
  std::vector<int64_t> attr_ints(const std::string& key, std::vector<int64_t> dflt = {}) const;
  std::vector<float> attr_floats(const std::string& key, std::vector<float> dflt = {}) const;
  const Tensor* attr_tensor(const std::string& key) const;
};

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // A deep copy (values, nodes and their wiring; tensors share their storage, ops are shared).
  std::unique_ptr<Graph> clone() const;
  Value* add_value(const std::string& name);
  Value* find(const std::string& name) const;
  Node* add_node(const std::string& op_type, const std::vector<Value*>& inputs, const std::vector<Value*>& outputs,
                 Attributes attrs = {}, const std::string& name = "");
  std::string unique_name(const std::string& base);
  // Removes nodes for which `drop` is true (their outputs must have no remaining readers).
  void remove_nodes(const std::function<bool(const Node&)>& drop);
  // Orders nodes so that producers come before readers, keeping the existing order otherwise.
  void sort_nodes();
  // Makes every reader of `from` read `to` instead (graph outputs included).
  void replace_uses(Value* from, Value* to);

  std::vector<std::unique_ptr<Node>>& nodes() { return nodes_; }
  const std::vector<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  std::vector<Value*> inputs;  // graph inputs that are not initializers
  std::vector<Value*> outputs;
  std::vector<Value*> initializers;
  std::map<std::string, int64_t> opsets;  // domain -> version
  std::string name;
  int64_t ir_version = 8;
  std::string producer_name;

  // Fresh symbols for dims nobody named ("unk__0", ...).
  Dim fresh_dim(const std::string& hint = "unk");
  // Symbols that inference had to invent for unknown dims, in order.
  const std::vector<std::string>& invented_symbols() const { return invented_; }
  // Nodes whose output shapes could only be known at run time.
  void note_unknown(const Node* n) { unknown_.push_back(n); }
  const std::vector<const Node*>& unknown_shape_nodes() const { return unknown_; }

 private:
  std::vector<std::unique_ptr<Value>> values_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::map<std::string, Value*> by_name_;
  std::vector<std::string> invented_;
  std::vector<const Node*> unknown_;
  int64_t counter_ = 0;
};

}  // namespace onnxtrain::ir
