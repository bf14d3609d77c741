// Two sessions training at once in two threads, on the one host allocator, give what each gives alone, and each
// records its own memory (a second recording used to replace the first's observer).
#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>

#include "onnxtrain/session.h"
#include "runtime/session_impl.h"
#include "test_graphs.h"

using namespace onnxtrain;

namespace {

struct Trained {
  std::vector<std::map<std::string, Tensor>> grads;  // per step
  nlohmann::json recording;                          // of the last step
};

// `steps` training steps on a batch of 64, each with its own input; the last one recorded.
Trained train(Session& s, int steps) {
  Trained r;
  std::string out = s.output_names().at(0);
  for (int step = 0; step < steps; ++step) {
    if (step == steps - 1) s.start_memory_recording();
    Tensor x = test_graphs::pattern_tensor({64 + step, 8});
    Tensor dy = test_graphs::pattern_tensor({64 + step, 4});
    auto [outputs, state] = s.run_forward({{"x", x}});
    r.grads.push_back(s.run_backward(*state, {{out, dy}}));
  }
  r.recording = nlohmann::json::parse(s.stop_memory_recording({{"batch", 64 + steps - 1}}));
  return r;
}

Session training_session() { return training_session(test_graphs::mlp_graph(), TrainingSpec{{"w1", "b1", "w2"}, ""}); }

void expect_same(const Trained& a, const Trained& b) {
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i)
    for (auto& [name, g] : a.grads[i]) {
      const Tensor& h = b.grads[i].at(name);
      ASSERT_EQ(g.dims(), h.dims()) << name;
      EXPECT_EQ(std::memcmp(g.raw(), h.raw(), g.nbytes()), 0) << "step " << i << ", gradient of " << name;
    }
  EXPECT_EQ(a.recording.at("events"), b.recording.at("events"));
  EXPECT_EQ(a.recording.at("measured_peak"), b.recording.at("measured_peak"));
}

}  // namespace

TEST(Concurrency, TwoSessionsTrainingInTwoThreadsMatchOneAfterTheOther) {
  constexpr int kSteps = 20;
  Session alone = training_session();
  Trained reference = train(alone, kSteps);
  EXPECT_EQ(reference.recording.at("measured_peak"), reference.recording.at("predicted_peak"));

  Session a = training_session(), b = training_session();
  Trained ra, rb;
  std::thread ta([&] { ra = train(a, kSteps); });
  std::thread tb([&] { rb = train(b, kSteps); });
  ta.join();
  tb.join();
  expect_same(ra, reference);
  expect_same(rb, reference);
}

TEST(Concurrency, TwoRecordingsOfOneAllocatorEachSeeTheirOwnSession) {
  // Interleaved on one thread: b's recording does not end a's, and neither sees the other's allocations.
  Session a = training_session(), b = training_session();
  a.start_memory_recording();
  b.start_memory_recording();
  std::string out = a.output_names().at(0);
  auto [oa, sa] = a.run_forward({{"x", test_graphs::pattern_tensor({64, 8})}});
  auto [ob, sb] = b.run_forward({{"x", test_graphs::pattern_tensor({64, 8})}});
  b.run_backward(*sb, {{out, test_graphs::pattern_tensor({64, 4})}});
  a.run_backward(*sa, {{out, test_graphs::pattern_tensor({64, 4})}});
  auto ja = nlohmann::json::parse(a.stop_memory_recording({{"batch", 64}}));
  auto jb = nlohmann::json::parse(b.stop_memory_recording({{"batch", 64}}));
  EXPECT_EQ(ja.at("events"), jb.at("events"));
  EXPECT_EQ(ja.at("measured_peak"), ja.at("predicted_peak"));
  EXPECT_EQ(jb.at("measured_peak"), jb.at("predicted_peak"));
}
