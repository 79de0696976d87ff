// The whole DLRM: finite-difference gradient checks through every layer
// (embedding row -> interaction -> top MLP -> loss, and an MLP weight), and
// a planted-signal training run.
#include "dlrm/model.h"

#include <cmath>
#include <vector>

#include "base/random.h"
#include "dlrm/loss.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cemb::dlrm {
namespace {

constexpr int64_t kBatch = 32, kDim = 8, kTables = 3, kRows = 20;

DlrmOptions TinyOptions(InteractionKind kind) {
  DlrmOptions o;
  o.num_dense = 4;
  o.bottom_mlp = {16, kDim};
  o.top_mlp = {12, 1};
  o.interaction = kind;
  o.embeddings.dim = kDim;
  for (int t = 0; t < kTables; ++t) o.embeddings.tables.push_back({.rows = kRows});
  o.batch_size = kBatch;
  o.threads = 1;
  o.seed = 3;
  return o;
}

// A fixed batch: 1..3 indices per bag.
struct TestBatch {
  std::vector<float> dense, labels;
  std::vector<std::vector<int32_t>> offsets, indices;
  std::vector<Bags<int32_t>> bags;
  TestBatch() {
    Xoshiro256pp rng(11);
    for (int64_t i = 0; i < kBatch * 4; ++i) dense.push_back(static_cast<float>(rng.Uniform()));
    for (int64_t i = 0; i < kBatch; ++i) labels.push_back(static_cast<float>(rng.Below(2)));
    offsets.resize(kTables);
    indices.resize(kTables);
    for (int t = 0; t < kTables; ++t) {
      offsets[t].push_back(0);
      for (int64_t b = 0; b < kBatch; ++b) {
        const int len = 1 + static_cast<int>(rng.Below(3));
        for (int j = 0; j < len; ++j) indices[t].push_back(static_cast<int32_t>(rng.Below(kRows)));
        offsets[t].push_back(static_cast<int32_t>(indices[t].size()));
      }
      bags.push_back({offsets[t], indices[t]});
    }
  }
  BatchView view() const { return {kBatch, dense, labels, bags}; }
};

double Loss(Dlrm& model, const TestBatch& batch) {
  std::vector<float> p(kBatch);
  EXPECT_TRUE(model.Predict(batch.view(), p, nullptr).ok());
  double loss = 0;
  for (int64_t i = 0; i < kBatch; ++i) {
    const double q = std::clamp<double>(p[i], 1e-12, 1 - 1e-12);
    loss -= batch.labels[i] * std::log(q) + (1 - batch.labels[i]) * std::log(1 - q);
  }
  return loss / kBatch;
}

class ModelGradient : public ::testing::TestWithParam<InteractionKind> {};

// With lr = 1 the fused SGD update moves an embedding row by exactly minus
// its gradient; a central difference of the loss on an identical model must
// agree. The MLP's weight gradients are checked the same way.
TEST_P(ModelGradient, MatchesFiniteDifferences) {
  const TestBatch batch;
  auto trained = Dlrm::Create(TinyOptions(GetParam()));
  auto probe = Dlrm::Create(TinyOptions(GetParam()));
  ASSERT_TRUE(trained.ok()) << trained.status();
  ASSERT_TRUE(probe.ok());

  const int table = 1;
  const int64_t row = batch.indices[table][0];
  std::vector<float> before(kDim), after(kDim);
  ASSERT_TRUE((*trained)->embeddings().ReadRow(table, row, before).ok());
  // Top MLP layer 0's weight gradient is read after the step (it holds the
  // gradient at the parameters before the update).
  ASSERT_TRUE((*trained)->TrainStep(batch.view(), 1.0f, nullptr).ok());
  ASSERT_TRUE((*trained)->embeddings().ReadRow(table, row, after).ok());
  const std::span<const float> top_grad = (*trained)->top_mlp().weight_grad(0);
  const std::vector<float> top_grad_copy(top_grad.begin(), top_grad.end());

  const double eps = 1e-3;
  int checked = 0;
  for (int64_t c = 0; c < kDim; ++c) {
    const double analytic = before[c] - after[c];
    std::vector<float> x = before;
    x[c] = before[c] + static_cast<float>(eps);
    ASSERT_TRUE((*probe)->embeddings().WriteRow(table, row, x).ok());
    const double up = Loss(**probe, batch);
    x[c] = before[c] - static_cast<float>(eps);
    ASSERT_TRUE((*probe)->embeddings().WriteRow(table, row, x).ok());
    const double down = Loss(**probe, batch);
    ASSERT_TRUE((*probe)->embeddings().WriteRow(table, row, before).ok());
    const double numeric = (up - down) / (2 * eps);
    EXPECT_NEAR(analytic, numeric, 2e-3 * std::max(1.0, std::abs(numeric)) + 5e-4) << "embedding column " << c;
    checked += std::abs(numeric) > 1e-4;
  }
  EXPECT_GT(checked, 0) << "the row's gradient was zero: the check proved nothing";

  // A few weights of the top MLP's first layer (input = the interaction).
  const Mlp& top = (*probe)->top_mlp();
  std::vector<float> w(top.weight_grad(0).size());
  ASSERT_TRUE(top.GetWeight(0, w).ok());
  for (size_t k : {size_t{0}, size_t{7}, w.size() / 2, w.size() - 1}) {
    std::vector<float> x = w;
    x[k] = w[k] + static_cast<float>(eps);
    ASSERT_TRUE(const_cast<Mlp&>(top).SetWeight(0, x).ok());
    const double up = Loss(**probe, batch);
    x[k] = w[k] - static_cast<float>(eps);
    ASSERT_TRUE(const_cast<Mlp&>(top).SetWeight(0, x).ok());
    const double down = Loss(**probe, batch);
    ASSERT_TRUE(const_cast<Mlp&>(top).SetWeight(0, w).ok());
    EXPECT_NEAR(top_grad_copy[k], (up - down) / (2 * eps), 2e-3 * std::max(1.0, std::abs(static_cast<double>(top_grad_copy[k]))) + 5e-4)
        << "top weight " << k;
  }
}

INSTANTIATE_TEST_SUITE_P(Interactions, ModelGradient,
                         ::testing::Values(InteractionKind::kDot, InteractionKind::kConcat));

// kAuto's measurement times the model's own MLPs in both precisions (where
// oneDNN has a bf16 matmul), and Create resolves auto by those times.
TEST(Dlrm, TimesItsMlpsInBothPrecisionsAndAutoGoesByTheTimes) {
  if (DetectMatmulCpu().bf16_matmul.empty()) GTEST_SKIP() << "no bf16 matmul on this CPU";
  DlrmOptions o = TinyOptions(InteractionKind::kDot);
  absl::StatusOr<MlpTimings> t = Dlrm::TimeMlpPrecisions(o);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_GT(t->fp32_ms, 0);
  EXPECT_GT(t->bf16_ms, 0);
  for (const MlpTimings& given : {MlpTimings{.fp32_ms = 2, .bf16_ms = 1}, MlpTimings{.fp32_ms = 1, .bf16_ms = 2}}) {
    o.mlp_precision = Precision::kAuto;
    o.mlp_auto.measured = given;
    auto model = Dlrm::Create(o);
    ASSERT_TRUE(model.ok()) << model.status();
    EXPECT_EQ((*model)->options().mlp_precision, given.bf16_ms < given.fp32_ms ? Precision::kBf16 : Precision::kFp32);
    EXPECT_THAT((*model)->mlp_precision_choice().reason, ::testing::HasSubstr("ms per MLP step measured"));
  }
}

TEST(Dlrm, RejectsBatchesItWasNotPlannedFor) {
  auto model = Dlrm::Create(TinyOptions(InteractionKind::kDot));
  ASSERT_TRUE(model.ok());
  TestBatch batch;
  BatchView v = batch.view();
  v.bags = std::span(batch.bags).first(2);
  EXPECT_FALSE((*model)->TrainStep(v, 0.1f, nullptr).ok());
  batch.indices[0][0] = kRows;  // out of range: a clear error, nothing written
  const absl::Status s = (*model)->TrainStep(batch.view(), 0.1f, nullptr).status();
  EXPECT_EQ(s.message(), "table emb0, bag 0, index 0: row 20 >= nvectors 20");
}

TEST(Dlrm, TableOfFileNamesTheTableOfItsOwnFilesOnly) {
  EXPECT_EQ(Dlrm::TableOfFile("model/emb_l.3.rows"), 3);
  EXPECT_EQ(Dlrm::TableOfFile("emb_l.12.adagrad.npy"), 12);
  EXPECT_EQ(Dlrm::TableOfFile("a/b/emb_l.0.ssd"), 0);
  EXPECT_EQ(Dlrm::TableOfFile("model/bot_l.0.weight.npy"), -1);
  EXPECT_EQ(Dlrm::TableOfFile("model/top_l.1.bias.npy"), -1);
  EXPECT_EQ(Dlrm::TableOfFile("emb_l.x.rows"), -1);
  EXPECT_EQ(Dlrm::TableOfFile("emb_l.3"), -1);
  EXPECT_EQ(Dlrm::TableOfFile("emb_l..rows"), -1);
  EXPECT_EQ(Dlrm::TableOfFile("emb_l.-1.rows"), -1);
  EXPECT_EQ(Dlrm::TableOfFile("emb_l.3.rows/MANIFEST"), -1);
  EXPECT_EQ(Dlrm::TableOfFile("xemb_l.3.rows"), -1);
}

TEST(Dlrm, RejectsInconsistentShapes) {
  DlrmOptions o = TinyOptions(InteractionKind::kDot);
  o.bottom_mlp = {16, kDim + 1};
  EXPECT_FALSE(Dlrm::Create(o).ok());
  o = TinyOptions(InteractionKind::kDot);
  o.top_mlp = {12, 2};
  EXPECT_FALSE(Dlrm::Create(o).ok());
}

}  // namespace
}  // namespace cemb::dlrm
