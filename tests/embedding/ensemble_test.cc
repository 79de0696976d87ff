#include "embedding/ensemble.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/embedding/reference.h"
#include "tests/embedding/test_util.h"

namespace cemb {
namespace {

using testing::MakeBags;
using testing::MakeTable;

// Three tables of different types and sizes in one ensemble, writing into
// column slices of one matrix, with 2 threads: the same results as a plain
// reference per table, and an update that matches too.
TEST(Ensemble, MixedTablesMatchReferenceWithThreads) {
  auto t0 = MakeTable<SimpleTable<float, 16>>(500, 16, 1);
  auto t1 = MakeTable<SimpleTable<bfloat16, kDynamic>>(700, 40, 2);
  auto t2 = MakeTable<SimpleTable<float, 128>>(300, 128, 3);
  Ensemble ensemble({.threads = 2, .items_per_thread = 16});
  ASSERT_TRUE(ensemble.add(t0).ok());
  ASSERT_TRUE(ensemble.add(t1).ok());
  ASSERT_TRUE(ensemble.add(t2).ok());
  ASSERT_EQ(ensemble.ntables(), 3);

  constexpr int64_t kBatch = 257;
  const int64_t width = 16 + 40 + 128;
  const auto b0 = MakeBags<int32_t>(kBatch, 0, 40, 500, 4);
  const auto b1 = MakeBags<int32_t>(kBatch, 1, 3, 700, 5);
  const auto b2 = MakeBags<int32_t>(kBatch, 1, 1, 300, 6);
  const std::vector<Bags<int32_t>> bags = {b0.bags(false), b1.bags(true), b2.bags(false)};
  std::vector<float> out(kBatch * width, testing::kSentinel);
  const MatrixView all{out.data(), kBatch, width, width};
  const std::vector<MatrixView> outs = {all.slice(0, 16), all.slice(16, 40), all.slice(56, 128)};

  const reference::Rows r0 = reference::Snapshot(t0), r1 = reference::Snapshot(t1), r2 = reference::Snapshot(t2);
  ASSERT_TRUE(ensemble.pooled_lookup<int32_t>(bags, outs).ok());
  const auto e0 = reference::Pooled<int32_t>(r0, b0.offsets, b0.indices, {}, Pooling::kSum);
  const auto e1 = reference::Pooled<int32_t>(r1, b1.offsets, b1.indices, b1.weights, Pooling::kSum);
  const auto e2 = reference::Pooled<int32_t>(r2, b2.offsets, b2.indices, {}, Pooling::kSum);
  for (int64_t b = 0; b < kBatch; ++b) {
    for (int c = 0; c < 16; ++c) ASSERT_NEAR(out[b * width + c], e0[b * 16 + c], 1e-5);
    for (int c = 0; c < 40; ++c) ASSERT_NEAR(out[b * width + 16 + c], e1[b * 40 + c], 1e-5);
    for (int c = 0; c < 128; ++c) ASSERT_NEAR(out[b * width + 56 + c], e2[b * 128 + c], 1e-5);
  }

  // Update with the output as its own gradient.
  ASSERT_TRUE(ensemble.reindex<int32_t>(bags, Pooling::kSum).ok());
  const std::vector<ConstMatrixView> grads = {outs[0], outs[1], outs[2]};
  ASSERT_TRUE(ensemble.sgd_update(grads, {.learning_rate = 0.1f}).ok());
  reference::Rows x0 = r0, x2 = r2;
  reference::ApplySgd(x0, reference::TableGradient<int32_t>(16, b0.offsets, b0.indices, {}, Pooling::kSum, out.data(), width), 0.1);
  reference::ApplySgd(x2, reference::TableGradient<int32_t>(128, b2.offsets, b2.indices, {}, Pooling::kSum, out.data() + 56, width), 0.1);
  const reference::Rows g0 = reference::Snapshot(t0), g2 = reference::Snapshot(t2);
  for (size_t i = 0; i < g0.v.size(); ++i) ASSERT_NEAR(g0.v[i], x0.v[i], 1e-5);
  for (size_t i = 0; i < g2.v.size(); ++i) ASSERT_NEAR(g2.v[i], x2.v[i], 1e-5);
}

TEST(Ensemble, BadTableLeavesEveryOutputUntouched) {
  auto t0 = MakeTable<SimpleTable<float, 16>>(50, 16, 1);
  auto t1 = MakeTable<SimpleTable<float, 16>>(50, 16, 2);
  Ensemble ensemble({.threads = 2});
  ASSERT_TRUE(ensemble.add(t0).ok());
  ASSERT_TRUE(ensemble.add(t1).ok());
  const std::vector<int64_t> offsets = {0, 1, 2};
  const std::vector<int64_t> good = {3, 4}, bad = {3, 50};
  const std::vector<Bags<int64_t>> bags = {{offsets, good}, {offsets, bad}};
  std::vector<float> out(2 * 32, testing::kSentinel);
  const MatrixView all{out.data(), 2, 32, 32};
  const std::vector<MatrixView> outs = {all.slice(0, 16), all.slice(16, 16)};
  absl::Status s = ensemble.pooled_lookup<int64_t>(bags, outs);
  EXPECT_EQ(s.message(), "table t2, bag 1, index 0: row 50 >= nvectors 50");
  for (float x : out) ASSERT_EQ(x, testing::kSentinel);
  EXPECT_FALSE(ensemble.pooled_lookup<int64_t>(std::span(bags).first(1), outs).ok());  // count mismatch
}

TEST(Ensemble, AdagradUpdatesEveryTable) {
  auto t0 = MakeTable<SimpleTable<float, 32>>(40, 32, 1);
  Ensemble ensemble({.threads = 2});
  ASSERT_TRUE(ensemble.add(t0).ok());
  const auto b = MakeBags<int32_t>(20, 1, 4, 40, 3);
  const std::vector<Bags<int32_t>> bags = {b.bags(false)};
  ASSERT_TRUE(ensemble.reindex<int32_t>(bags, Pooling::kSum).ok());
  std::vector<float> grad(20 * 32, 1.0f);
  const std::vector<ConstMatrixView> grads = {ConstMatrixView(grad.data(), 20, 32, 32)};
  RowwiseAdagradState state(40);
  RowwiseAdagradState* states[] = {&state};
  ASSERT_TRUE(ensemble.rowwise_adagrad_update(grads, states, {.learning_rate = 0.1f}).ok());
  int touched = 0;
  for (float s : state.values()) touched += s > 0;
  EXPECT_EQ(touched, ensemble.plan(0).nunique());
}

// Plans made ahead (Prepared::plans) are swapped in and give the update of
// plans made here; a plan of another shape is refused; checked bags still
// have their output's shape checked, and bags checked against another
// table's rows are refused.
TEST(Ensemble, PlansMadeAheadUpdateAsReindexDoes) {
  auto a = MakeTable<SimpleTable<float, 16>>(400, 16, 1);
  auto b = MakeTable<SimpleTable<float, 16>>(400, 16, 1);  // the same rows
  Ensemble ea({.threads = 2}), eb({.threads = 2});
  ASSERT_TRUE(ea.add(a).ok());
  ASSERT_TRUE(eb.add(b).ok());
  constexpr int64_t kBatch = 64;
  const auto bags_of = MakeBags<int32_t>(kBatch, 1, 6, 400, 9);
  const std::vector<Bags<int32_t>> bags = {bags_of.bags(false)};
  std::vector<float> grad(kBatch * 16);
  for (size_t i = 0; i < grad.size(); ++i) grad[i] = 0.01f * static_cast<float>(i % 13) - 0.05f;
  const std::vector<ConstMatrixView> grads = {ConstMatrixView{grad.data(), kBatch, 16, 16}};

  ASSERT_TRUE(ea.reindex<int32_t>(bags, Pooling::kSum).ok());
  ASSERT_TRUE(ea.sgd_update(grads, {.learning_rate = 0.5f}).ok());
  UpdatePlan ahead;
  ahead.BuildUnchecked<int32_t>(400, bags[0].offsets, bags[0].indices, {}, Pooling::kSum);
  UpdatePlan* plans[] = {&ahead};
  absl::StatusOr<CheckedBags<int32_t>> one = CheckBags<int32_t>("t", 400, bags[0]);
  ASSERT_TRUE(one.ok()) << one.status();
  const std::vector<CheckedBags<int32_t>> checked = {*one};
  ASSERT_TRUE(eb.reindex<int32_t>(checked, Pooling::kSum, {.plans = plans}).ok());
  EXPECT_EQ(eb.plan(0).nunique(), ea.plan(0).nunique());
  ASSERT_TRUE(eb.sgd_update(grads, {.learning_rate = 0.5f}).ok());
  const reference::Rows ra = reference::Snapshot(a), rb = reference::Snapshot(b);
  ASSERT_EQ(ra.v, rb.v);  // bit for bit

  const auto other_of = MakeBags<int32_t>(kBatch / 2, 1, 6, 400, 10);
  UpdatePlan other;
  other.BuildUnchecked<int32_t>(400, other_of.offsets, other_of.indices, {}, Pooling::kSum);
  UpdatePlan* wrong[] = {&other};
  const absl::Status refused = eb.reindex<int32_t>(checked, Pooling::kSum, {.plans = wrong});
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;

  std::vector<float> out(kBatch * 8);
  const std::vector<MatrixView> narrow = {MatrixView{out.data(), kBatch, 8, 8}};  // D = 16 needed
  EXPECT_EQ(eb.pooled_lookup<int32_t>(checked, narrow).code(), absl::StatusCode::kInvalidArgument);

  // Checked against 500 rows: not this table's 400 (an index of 450 would
  // have passed), refused before anything is read.
  absl::StatusOr<CheckedBags<int32_t>> elsewhere = CheckBags<int32_t>("t", 500, bags[0]);
  ASSERT_TRUE(elsewhere.ok());
  const std::vector<CheckedBags<int32_t>> foreign = {*elsewhere};
  std::vector<float> wide(kBatch * 16);
  const std::vector<MatrixView> outs = {MatrixView{wide.data(), kBatch, 16, 16}};
  const absl::Status not_ours = eb.pooled_lookup<int32_t>(foreign, outs);
  EXPECT_EQ(not_ours.code(), absl::StatusCode::kInvalidArgument) << not_ours;
  EXPECT_THAT(std::string(not_ours.message()), ::testing::HasSubstr("checked against 500 rows"));
  EXPECT_EQ(eb.reindex<int32_t>(foreign, Pooling::kSum).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cemb
