#include "ir/graph.h"

#include <algorithm>

#include "onnxtrain/error.h"

namespace onnxtrain::ir {

const char* attribute_kind_name(const Attribute& a) {
  static const char* names[] = {"int", "float", "string", "ints", "floats", "strings", "tensor"};
  return names[a.index()];
}

std::string Value::type_str() const { return dtype_name(dtype) + (has_shape ? shape_str(shape) : std::string("[?]")); }

Dim Value::bytes() const {
  if (!has_shape) return Dim::symbol("bytes(" + name + ")");
  try {
    return shape_numel(shape) * Dim(int64_t(dtype_size(dtype)));
  } catch (const ShapeError& e) {  // constant dims whose product overflows
    throw ShapeError((producer ? producer->where() + ": output '" : "value '") + name + "' " + type_str() +
                     " would hold more than 2^63 bytes (" + e.what() + ")");
  }
}

std::string Node::where() const { return "node '" + name + "' (" + op_type + ")"; }

template <typename T>
static const T* get_attr(const Node& n, const std::string& key, const char* want) {
  auto it = n.attrs.find(key);
  if (it == n.attrs.end()) return nullptr;
  const T* v = std::get_if<T>(&it->second);
  if (!v)
    throw ModelError(n.where() + ": attribute '" + key + "' is " + attribute_kind_name(it->second) + ", expected " +
                     want);
  return v;
}

int64_t Node::attr_int(const std::string& key, int64_t dflt) const {
  auto v = get_attr<int64_t>(*this, key, "int");
  return v ? *v : dflt;
}
int64_t Node::attr_int(const std::string& key) const {
  auto v = get_attr<int64_t>(*this, key, "int");
  if (!v) throw ModelError(where() + ": required attribute '" + key + "' is missing");
  return *v;
}
float Node::attr_float(const std::string& key, float dflt) const {
  auto v = get_attr<float>(*this, key, "float");
  return v ? *v : dflt;
}
float Node::attr_float(const std::string& key) const {
  auto v = get_attr<float>(*this, key, "float");
  if (!v) throw ModelError(where() + ": required attribute '" + key + "' is missing");
  return *v;
}
std::string Node::attr_string(const std::string& key, const std::string& dflt) const {
  auto v = get_attr<std::string>(*this, key, "string");
  return v ? *v : dflt;
}
std::vector<int64_t> Node::attr_ints(const std::string& key, std::vector<int64_t> dflt) const {
  auto v = get_attr<std::vector<int64_t>>(*this, key, "ints");
  return v ? *v : dflt;
}
std::vector<float> Node::attr_floats(const std::string& key, std::vector<float> dflt) const {
  auto v = get_attr<std::vector<float>>(*this, key, "floats");
  return v ? *v : dflt;
}
const Tensor* Node::attr_tensor(const std::string& key) const { return get_attr<Tensor>(*this, key, "tensor"); }

std::unique_ptr<Graph> Graph::clone() const {
  auto g = std::make_unique<Graph>();
  std::map<const Value*, Value*> vmap;
  std::map<const Node*, Node*> nmap;
  for (auto& v : values_) {
    g->values_.push_back(std::make_unique<Value>(*v));
    vmap[v.get()] = g->values_.back().get();
    g->by_name_[v->name] = g->values_.back().get();
  }
  for (auto& n : nodes_) {
    g->nodes_.push_back(std::make_unique<Node>(*n));
    nmap[n.get()] = g->nodes_.back().get();
  }
  auto value = [&](Value* v) { return v ? vmap.at(v) : nullptr; };
  for (auto& v : g->values_) {
    v->producer = v->producer ? nmap.count(v->producer) ? nmap.at(v->producer) : nullptr : nullptr;
    for (Node*& c : v->consumers) c = nmap.at(c);
  }
  for (auto& n : g->nodes_) {
    for (Value*& v : n->inputs) v = value(v);
    for (Value*& v : n->outputs) v = value(v);
  }
  for (Value* v : inputs) g->inputs.push_back(value(v));
  for (Value* v : outputs) g->outputs.push_back(value(v));
  for (Value* v : initializers) g->initializers.push_back(value(v));
  for (const Node* n : unknown_)
    if (nmap.count(n)) g->unknown_.push_back(nmap.at(n));
  g->opsets = opsets;
  g->name = name;
  g->ir_version = ir_version;
  g->producer_name = producer_name;
  g->invented_ = invented_;
  g->counter_ = counter_;
  return g;
}

Value* Graph::add_value(const std::string& name) {
  values_.push_back(std::make_unique<Value>());
  Value* v = values_.back().get();
  v->name = name.empty() ? unique_name("v") : name;
  by_name_[v->name] = v;
  return v;
}

Value* Graph::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

Node* Graph::add_node(const std::string& op_type, const std::vector<Value*>& inputs, const std::vector<Value*>& outputs,
                      Attributes attrs, const std::string& name) {
  nodes_.push_back(std::make_unique<Node>());
  Node* n = nodes_.back().get();
  n->op_type = op_type;
  n->name = name.empty() ? unique_name(op_type) : name;
  n->inputs = inputs;
  n->outputs = outputs;
  n->attrs = std::move(attrs);
  for (Value* v : inputs)
    if (v) v->consumers.push_back(n);
  for (Value* v : outputs)
    if (v) v->producer = n;
  return n;
}

void Graph::remove_nodes(const std::function<bool(const Node&)>& drop) {
  std::vector<const Node*> dropped;
  for (auto& n : nodes_)
    if (drop(*n)) dropped.push_back(n.get());
  auto is_dropped = [&](const Node* n) { return std::find(dropped.begin(), dropped.end(), n) != dropped.end(); };
  for (const Node* n : dropped) {
    for (Value* v : n->inputs)
      if (v) v->consumers.erase(std::remove(v->consumers.begin(), v->consumers.end(), n), v->consumers.end());
    for (Value* v : n->outputs)
      if (v) v->producer = nullptr;
  }
  nodes_.erase(std::remove_if(nodes_.begin(), nodes_.end(), [&](auto& n) { return is_dropped(n.get()); }),
               nodes_.end());
}

void Graph::sort_nodes() {
  std::vector<std::unique_ptr<Node>> sorted;
  std::map<const Node*, size_t> index;
  for (size_t i = 0; i < nodes_.size(); ++i) index[nodes_[i].get()] = i;
  std::vector<int> state(nodes_.size(), 0);  // 0 new, 1 visiting, 2 emitted
  std::function<void(size_t)> visit = [&](size_t i) {
    if (state[i] == 1) throw Error(nodes_[i]->where() + ": the graph has a cycle through this node");
    if (state[i]) return;
    state[i] = 1;
    for (Value* v : nodes_[i]->inputs)
      if (v && v->producer) visit(index.at(v->producer));
    state[i] = 2;
    sorted.push_back(std::move(nodes_[i]));
  };
  for (size_t i = 0; i < nodes_.size(); ++i) visit(i);
  nodes_ = std::move(sorted);
}

void Graph::replace_uses(Value* from, Value* to) {
  for (Node* c : from->consumers) {
    for (Value*& in : c->inputs)
      if (in == from) in = to;
    to->consumers.push_back(c);
  }
  from->consumers.clear();
  for (Value*& out : outputs)
    if (out == from) out = to;
}

std::string Graph::unique_name(const std::string& base) {
  std::string n;
  do n = base + "_" + std::to_string(counter_++);
  while (by_name_.count(n));
  return n;
}

Dim Graph::fresh_dim(const std::string& hint) {
  std::string n = hint + "__" + std::to_string(invented_.size());  // the index keeps it unique
  invented_.push_back(n);
  return Dim::symbol(n);
}

}  // namespace onnxtrain::ir
