// The real-text far-copy probe (eval/far_copy.h) on a hand-built sequence whose repeated 3-grams are known.
#include <gtest/gtest.h>

#include <vector>

#include "eval/far_copy.h"

namespace aah {
namespace {

// x (T = 18) and targets y_i = x_{i+1} (y_17 = 6):
//   i  0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17
//   x  5 6 7 8 1 2 5 6 7 9  3  5  6  7  8  1  2  5
// 3-grams seen before: (5,6,7) ends at 2, 8, 13. At i = 8 its occurrence at 2 continued with 8, the target is 9: no
// copy. At i = 13 the most recent occurrence (8) continued with 9, the target is 8: no copy, although the one at 2
// would have predicted it (only the closest occurrence counts). (6,7,8) at 3 and 14, (7,8,1) at 4 and 15, (8,1,2) at
// 5 and 16, (1,2,5) at 6 and 17: each continued as now, copies at distance 11.
struct Hand {
  std::vector<int32_t> x = {5, 6, 7, 8, 1, 2, 5, 6, 7, 9, 3, 5, 6, 7, 8, 1, 2, 5};
  std::vector<int32_t> y;
  Hand() {
    y.assign(x.begin() + 1, x.end());
    y.push_back(6);
  }
};

TEST(FarCopy, CopiesAreTheClosestOccurrencesThatContinueAsNow) {
  Hand h;
  const std::vector<FarCopy> c = far_copies(h.x.data(), h.y.data(), 18, 3);
  ASSERT_EQ(c.size(), 4u);
  for (int k = 0; k < 4; k++) {
    EXPECT_EQ(c[size_t(k)].pos, 14 + k);
    EXPECT_EQ(c[size_t(k)].distance, 11);
  }
  // 2-grams, by hand: (5,6) ends at 1, 7, 12: at 7 the occurrence at 1 continued with 7 as now (copy, distance 6),
  // at 12 the one at 7 did (distance 5); (6,7) ends at 2, 8, 13 and never continues as now (8 / 9, 9 / 8); then
  // (7,8), (8,1), (1,2), (2,5) repeat at distance 11 as above.
  const std::vector<FarCopy> c2 = far_copies(h.x.data(), h.y.data(), 18, 2);
  const std::vector<std::pair<int, int>> want2 = {{7, 6}, {12, 5}, {14, 11}, {15, 11}, {16, 11}, {17, 11}};
  ASSERT_EQ(c2.size(), want2.size());
  for (size_t k = 0; k < want2.size(); k++) {
    EXPECT_EQ(c2[k].pos, want2[k].first) << k;
    EXPECT_EQ(c2[k].distance, want2[k].second) << k;
  }
  // Targets never seen among x_0..x_i: 6, 7, 8, 1, 2 at i = 0..4, then 9 and 3 at 8 and 9.
  EXPECT_EQ(novel_positions(h.x.data(), h.y.data(), 18), (std::vector<int>{0, 1, 2, 3, 4, 8, 9}));
}

// The probe's buckets and frequency-matched control, worked by hand. Windows 8 / 16 / 32: buckets [0, 8), [8, 16),
// [16, inf). Counts: tokens 1, 2 four times (class 2), 5, 6 twice (class 1), the others once (class 0). Losses
// 0.1 i. The four copies (distance 11, bucket [8, 16)) predict 1, 2 (class 2; losses 1.4, 1.5) and 5, 6 (class 1;
// 1.6, 1.7): mean 1.55. Novel targets: class 1 has y_0 = 6 (loss 0), class 2 has y_3 = 1 and y_4 = 2 (0.3, 0.4:
// mean 0.35), class 0 the rest. Control = (2 x 0.35 + 2 x 0) / 4 = 0.175.
TEST(FarCopy, ProbeMatchesTheCopiesFrequencyClasses) {
  Hand h;
  std::vector<int64_t> count(16, 1);
  count[1] = count[2] = 4;
  count[5] = count[6] = 2;
  std::vector<float> loss(18);
  for (int i = 0; i < 18; i++) loss[size_t(i)] = 0.1f * float(i);
  FarCopyProbe p({8, 16, 32}, count, 3);
  p.add(h.x.data(), h.y.data(), loss.data(), 18);
  const nlohmann::json j = p.json();
  EXPECT_EQ(j["ngram"], 3);
  EXPECT_EQ(j["novel"], 7);
  ASSERT_EQ(j["buckets"].size(), 3u);
  EXPECT_EQ(j["buckets"][0]["n"], 0);
  EXPECT_TRUE(j["buckets"][0]["loss"].is_null() && j["buckets"][0]["control_loss"].is_null());
  const nlohmann::json& b = j["buckets"][1];
  EXPECT_EQ(b["lo"], 8);
  EXPECT_EQ(b["hi"], 16);
  EXPECT_EQ(b["n"], 4);
  EXPECT_EQ(b["matched"], 4);
  EXPECT_NEAR(b["loss"].get<double>(), 1.55, 1e-6);
  EXPECT_NEAR(b["control_loss"].get<double>(), 0.175, 1e-6);
  EXPECT_TRUE(j["buckets"][2]["hi"].is_null());
  // A class with copies but no novel token leaves the control: token 5 now frequent (class 3), where no target is
  // novel. Matched: 3 copies; control = (2 x 0.35 + 1 x 0) / 3 (y_17 = 6 against y_0 = 6 in class 1).
  count[5] = 8;
  FarCopyProbe q({8, 16, 32}, count, 3);
  q.add(h.x.data(), h.y.data(), loss.data(), 18);
  const nlohmann::json bq = q.json()["buckets"][1];
  EXPECT_EQ(bq["n"], 4);
  EXPECT_EQ(bq["matched"], 3);
  EXPECT_NEAR(bq["loss"].get<double>(), 1.55, 1e-6);
  EXPECT_NEAR(bq["control_loss"].get<double>(), 0.7 / 3, 1e-6);
}

}  // namespace
}  // namespace aah
