// run_backward's refeeds: a forward input whose memory moved between forward and backward (FSDP2 frees each
// parameter after forward and gathers it again, elsewhere, before backward) is read at its new place, through the
// views the stash holds of it too.
#include <gtest/gtest.h>

#include <cstring>

#include "onnxtrain/session.h"
#include "runtime/session_impl.h"
#include "test_graphs.h"

using namespace onnxtrain;
using namespace onnxtrain::test_graphs;

namespace {

Session viewed_weight_session() { return training_session(viewed_weight_graph(), TrainingSpec{{"x", "w"}, ""}); }

Tensor copy_of(const Tensor& t) {
  Tensor c(t.dtype(), t.dims());
  std::memcpy(c.raw(), t.raw(), t.nbytes());
  return c;
}

bool same(const Tensor& a, const Tensor& b) {
  return a.dims() == b.dims() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

}  // namespace

TEST(Refeed, BackwardReadsARefedInputWhereItNowIs) {
  Session s = viewed_weight_session();
  const std::string y = s.output_names().at(0);
  Tensor x = pattern_tensor({5, 8}), w = pattern_tensor({32}), dy = pattern_tensor({5, 4});
  auto [out, state] = s.run_forward({{"x", x}, {"w", copy_of(w)}});
  auto want = s.run_backward(*state, {{y, dy}});

  for (bool refed : {false, true}) {
    Tensor moved = copy_of(w);
    auto [out2, state2] = s.run_forward({{"x", x}, {"w", moved}});
    std::fill(moved.data<float>(), moved.data<float>() + moved.numel(), 99.0f);  // freed and reused, as FSDP2 does
    auto got = refed ? s.run_backward(*state2, {{y, dy}}, {{"w", copy_of(w)}}) : s.run_backward(*state2, {{y, dy}});
    EXPECT_EQ(same(got.at("x"), want.at("x")), refed);
    EXPECT_TRUE(same(got.at("w"), want.at("w")));  // (dw reads x and dy only)
  }
}

TEST(Refeed, ARefeedMustMatchWhatTheForwardWasFed) {
  Session s = viewed_weight_session();
  const std::string y = s.output_names().at(0);
  for (auto [name, t] :
       std::vector<std::pair<std::string, Tensor>>{{"w", pattern_tensor({16})}, {"v", pattern_tensor({32})}}) {
    auto [out, state] = s.run_forward({{"x", pattern_tensor({5, 8})}, {"w", pattern_tensor({32})}});
    EXPECT_THROW(s.run_backward(*state, {{y, pattern_tensor({5, 4})}}, {{name, t}}), InputError) << name;
  }
}
