#include "autodiff/training_graph.h"

#include <map>
#include <set>

#include "kernels/shape_inference.h"
#include "onnxtrain/error.h"
#include "ops/bind.h"
#include "ops/grad.h"
#include "ops/op.h"

namespace onnxtrain::autodiff {
namespace {

class Engine;

// The GradCtx of one forward node.
class NodeGrad : public ops::GradCtx {
 public:
  NodeGrad(Engine& e, ir::Node& n) : e_(e), n_(n) {}
  const ir::Node& node() const override { return n_; }
  ir::Value* x(size_t i) override { return n_.input(i); }
  ir::Value* y(size_t i) override;
  ir::Value* dy(size_t i) override;
  bool needs(size_t i) const override;
  void set_dx(size_t i, ir::Value* g) override;
  std::vector<ir::Value*> ops(const std::string& type, const std::vector<ir::Value*>& inputs, size_t outputs,
                              ir::Attributes attrs, const std::string& domain) override;
  ir::Value* scalar(double v, DType t) override;
  ir::Value* ints(const std::vector<int64_t>& v) override;

 private:
  Engine& e_;
  ir::Node& n_;
};

class Engine {
 public:
  explicit Engine(ir::Graph& g) : g_(g) {
    auto it = g.opsets.find("");
    opset_ = it == g.opsets.end() ? 17 : it->second;
  }

  ir::Value* add_node(const std::string& type, const std::vector<ir::Value*>& inputs, size_t outputs,
                      ir::Attributes attrs, const std::string& domain, std::vector<ir::Value*>* outs) {
    for (size_t i = 0; i < outputs; ++i) outs->push_back(g_.add_value(g_.unique_name("grad")));
    ir::Node* n = g_.add_node(type, inputs, *outs, std::move(attrs), g_.unique_name(type + "_grad"));
    // The shape of a forward value is taken in the forward part (the schedule runs it right after the value is
    // made): the backward part then keeps a few integers instead of the whole activation.
    const ir::Value* in = inputs.empty() ? nullptr : inputs[0];
    bool backward_value = in && ((in->producer && in->producer->backward) || backward_inputs_.count(in));
    n->backward = !((type == "Shape" || type == "Size") && in && !backward_value);
    n->domain = domain;
    n->opset = domain.empty() ? opset_ : 1;
    ops::bind_node(*n);
    kernels::infer_node(g_, *n);
    return (*outs)[0];
  }

  void contribute(ir::Value* x, ir::Value* g) { contrib_[x].push_back(g); }

  // The summed gradient of v (nullptr when nothing flowed into it).
  ir::Value* total(ir::Value* v) {
    auto it = contrib_.find(v);
    if (it == contrib_.end() || it->second.empty()) return nullptr;
    if (it->second.size() > 1) {
      std::vector<ir::Value*> outs;
      ir::Value* sum = add_node("Sum", it->second, 1, {}, "", &outs);
      it->second = {sum};
    }
    return it->second[0];
  }

  // Sums a gradient over the dims that broadcasting added, back to x's shape.
  ir::Value* reduce_to(ir::Value* x, ir::Value* g, const ir::Node& where) {
    if (!g->has_shape || !x->has_shape)
      throw UnsupportedError(where.where() + ": gradient shapes depend on data (not supported yet)");
    if (g->shape == x->shape) return g;
    size_t gr = g->shape.size(), xr = x->shape.size();
    if (xr > gr)
      throw ShapeError(where.where() + ": gradient " + shape_str(g->shape) + " has lower rank than input " +
                       shape_str(x->shape));
    std::vector<int64_t> axes;
    for (size_t i = 0; i < gr; ++i) {
      if (i < gr - xr) {
        axes.push_back(int64_t(i));
        continue;
      }
      const Dim& xd = x->shape[i - (gr - xr)];
      if (xd == Dim(1) && g->shape[i] != Dim(1)) axes.push_back(int64_t(i));
    }
    std::vector<ir::Value*> outs;
    ir::Value* r = g;
    if (!axes.empty()) r = add_node("ReduceSum", {g, ints(axes)}, 1, {{"keepdims", int64_t(1)}}, "", &outs);
    outs.clear();
    if (r->shape == x->shape) return r;
    ir::Value* shape = add_node("Shape", {x}, 1, {}, "", &outs);
    outs.clear();
    return add_node("Reshape", {r, shape}, 1, {}, "", &outs);
  }

  ir::Value* ints(const std::vector<int64_t>& v) {
    Tensor t(DType::kInt64, {int64_t(v.size())});
    std::copy(v.begin(), v.end(), t.data<int64_t>());
    std::vector<ir::Value*> outs;
    return add_node("Constant", {}, 1, {{"value", t}}, "", &outs);
  }

  ir::Value* scalar(double c, DType dt) {
    bool integer = dt == DType::kInt64 || dt == DType::kInt32;
    double limit = dt == DType::kInt64 ? 0x1p63 : 0x1p31;
    if (integer && !(c >= -limit && c < limit))
      throw ModelError("autodiff: the constant " + std::to_string(c) + " does not fit " + dtype_name(dt));
    Tensor t(dt, {});
    switch (dt) {
      case DType::kFloat32:
        *t.data<float>() = float(c);
        break;
      case DType::kFloat64:
        *t.data<double>() = c;
        break;
      case DType::kInt64:
        *t.data<int64_t>() = int64_t(c);
        break;
      case DType::kInt32:
        *t.data<int32_t>() = int32_t(c);
        break;
      case DType::kBFloat16:
        *t.data<BFloat16>() = BFloat16(float(c));
        break;
      case DType::kFloat16:
        *t.data<Half>() = Half(float(c));
        break;
      default:
        throw UnsupportedError("autodiff: constants of dtype " + dtype_name(dt) + " are not supported");
    }
    std::vector<ir::Value*> outs;
    return add_node("Constant", {}, 1, {{"value", t}}, "", &outs);
  }

  ir::Graph& g_;
  int64_t opset_;
  std::set<const ir::Value*> needs_grad_;
  std::set<const ir::Value*> backward_inputs_;  // the output gradients fed to the backward part
  std::map<ir::Value*, std::vector<ir::Value*>> contrib_;
};

ir::Value* NodeGrad::y(size_t i) {
  if (i >= n_.outputs.size()) n_.outputs.resize(i + 1, nullptr);
  if (!n_.outputs[i]) {  // an optional output the rule needs (LayerNorm's mean, Dropout's mask)
    ir::Value* v = e_.g_.add_value(e_.g_.unique_name(n_.name + "_out" + std::to_string(i)));
    v->producer = &n_;
    n_.outputs[i] = v;
    kernels::infer_node(e_.g_, n_);
  }
  return n_.outputs[i];
}

ir::Value* NodeGrad::dy(size_t i) { return i < n_.outputs.size() && n_.outputs[i] ? e_.total(n_.outputs[i]) : nullptr; }

bool NodeGrad::needs(size_t i) const {
  ir::Value* v = n_.input(i);
  return v && e_.needs_grad_.count(v);
}

void NodeGrad::set_dx(size_t i, ir::Value* g) {
  if (!needs(i) || !g) return;
  ir::Value* x = n_.input(i);
  if (g->dtype != x->dtype)
    throw Error(n_.where() + ": gradient rule produced " + dtype_name(g->dtype) + " for a " + dtype_name(x->dtype) +
                " input");
  e_.contribute(x, e_.reduce_to(x, g, n_));
}

std::vector<ir::Value*> NodeGrad::ops(const std::string& type, const std::vector<ir::Value*>& inputs, size_t outputs,
                                      ir::Attributes attrs, const std::string& domain) {
  std::vector<ir::Value*> outs;
  e_.add_node(type, inputs, outputs, std::move(attrs), domain, &outs);
  return outs;
}

ir::Value* NodeGrad::scalar(double v, DType t) { return e_.scalar(v, t); }
ir::Value* NodeGrad::ints(const std::vector<int64_t>& v) { return e_.ints(v); }

bool is_float(const ir::Value* v) { return v && dtype_is_float(v->dtype); }

}  // namespace

TrainingGraph build_training_graph(std::unique_ptr<ir::Graph> forward, const TrainingSpec& spec) {
  TrainingGraph tg;
  ir::Graph& g = *forward;
  ops::bind_graph(g);
  kernels::infer_shapes(g);
  Engine e(g);
  std::vector<ir::Value*> wrt;
  for (auto& name : spec.wrt) {
    ir::Value* v = g.find(name);
    if (!v || v->producer)
      throw InputError("gradient requested for '" + name + "', which is not a graph input or initializer");
    if (!is_float(v))
      throw InputError("gradient requested for '" + name + "' of dtype " + dtype_name(v->dtype) +
                       "; only float inputs have gradients");
    wrt.push_back(v);
    e.needs_grad_.insert(v);
  }
  std::vector<ir::Node*> order;
  for (auto& n : g.nodes()) order.push_back(n.get());
  for (ir::Node* n : order) {
    bool any = false;
    for (ir::Value* v : n->inputs) any = any || (v && e.needs_grad_.count(v));
    if (any)
      for (size_t i = 0; i < n->outputs.size(); ++i)
        if (is_float(n->outputs[i]) && n->op->differentiable_output(i)) e.needs_grad_.insert(n->outputs[i]);
  }
  tg.forward_outputs = g.outputs;
  tg.boundary = order.size();  // the forward nodes; every node added from here on is marked backward
  if (!spec.loss.empty()) {
    ir::Value* loss = g.find(spec.loss);
    bool is_output = std::find(g.outputs.begin(), g.outputs.end(), loss) != g.outputs.end();
    if (!loss || !is_output) throw InputError("loss '" + spec.loss + "' is not a graph output");
    if (!loss->has_shape || !shape_numel(loss->shape).is_const() || shape_numel(loss->shape).value() != 1)
      throw InputError("loss '" + spec.loss + "' must be a scalar, its shape is " +
                       (loss->has_shape ? shape_str(loss->shape) : "unknown"));
    std::vector<ir::Value*> outs;
    ir::Value* one = e.scalar(1.0, loss->dtype);
    if (!loss->shape.empty())
      one = e.add_node("Reshape", {one, e.ints(std::vector<int64_t>(loss->shape.size(), 1))}, 1, {}, "", &outs);
    e.contribute(loss, one);
    tg.output_grads.assign(g.outputs.size(), nullptr);
  } else {
    for (ir::Value* out : g.outputs) {
      if (!e.needs_grad_.count(out)) {
        tg.output_grads.push_back(nullptr);
        continue;
      }
      ir::Value* gin = g.add_value(g.unique_name(out->name + "_grad"));
      gin->dtype = out->dtype;
      gin->shape = out->shape;
      gin->has_shape = out->has_shape;
      g.inputs.push_back(gin);
      e.backward_inputs_.insert(gin);
      tg.output_grads.push_back(gin);
      e.contribute(out, gin);
    }
  }
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    ir::Node* n = *it;
    bool flows = false, wanted = false;
    for (ir::Value* v : n->outputs) flows = flows || (v && e.contrib_.count(v));
    for (ir::Value* v : n->inputs) wanted = wanted || (v && e.needs_grad_.count(v));
    if (!flows || !wanted) continue;
    // (a node whose shapes were not inferred has not shown it has the inputs its op reads either)
    for (ir::Value* v : n->outputs)
      if (v && e.contrib_.count(v) && !v->has_shape)
        throw UnsupportedError(n->where() + ": gradient shapes depend on data (not supported yet)");
    NodeGrad ctx(e, *n);
    n->op->grad(ctx);
  }
  for (ir::Value* v : wrt) {
    ir::Value* gv = e.total(v);
    tg.reached.push_back(gv != nullptr);
    if (!gv) {  // no path from the loss: a zero gradient
      std::vector<ir::Value*> outs;
      Tensor zero = Tensor::zeros(v->dtype, {1});
      ir::Value* shape = e.add_node("Shape", {v}, 1, {}, "", &outs);
      outs.clear();
      gv = e.add_node("ConstantOfShape", {shape}, 1, {{"value", zero}}, "", &outs);
    }
    if (gv == v || gv->producer == nullptr || std::find(g.outputs.begin(), g.outputs.end(), gv) != g.outputs.end()) {
      std::vector<ir::Value*> outs;  // a distinct value per gradient output
      gv = e.add_node("Identity", {gv}, 1, {}, "", &outs);
    }
    tg.grads.push_back(gv);
    g.outputs.push_back(gv);
  }
  tg.graph = std::move(forward);
  return tg;
}

}  // namespace onnxtrain::autodiff
