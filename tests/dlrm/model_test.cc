// The whole DLRM: finite-difference gradient checks through every layer
// (embedding row -> interaction -> top MLP -> loss, and an MLP weight), and
// a planted-signal training run.
#include "dlrm/model.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/npy.h"
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
  o.dcn_layers = 2;  // kDcn: x0 is [n x 32]
  o.dcn_rank = 5;
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
                         ::testing::Values(InteractionKind::kDot, InteractionKind::kConcat, InteractionKind::kDcn));

// DLRM-DCNv2, low rank and full rank: the cross network's parameter
// gradients of a whole TrainStep (loss -> top MLP -> cross network) agree
// with central differences of the model's loss.
TEST(Dlrm, DcnParameterGradientsMatchFiniteDifferences) {
  for (const int64_t rank : {int64_t{5}, int64_t{0}}) {
    SCOPED_TRACE(rank == 0 ? "full rank" : "low rank");
    DlrmOptions o = TinyOptions(InteractionKind::kDcn);
    o.dcn_rank = rank;
    const TestBatch batch;
    auto trained = Dlrm::Create(o);
    auto probe = Dlrm::Create(o);
    ASSERT_TRUE(trained.ok()) << trained.status();
    ASSERT_TRUE(probe.ok());
    ASSERT_NE((*trained)->cross_network(), nullptr);
    ASSERT_TRUE((*trained)->TrainStep(batch.view(), 0.0f, nullptr).ok());
    auto& cross = const_cast<CrossNetwork&>(*(*probe)->cross_network());
    const std::vector<ParameterInfo> params = cross.Parameters();
    ASSERT_EQ(static_cast<int>(params.size()), cross.num_parameters());
    const double eps = 1e-3;
    for (int i = 0; i < cross.num_parameters(); ++i) {
      const std::span<const float> grad = (*trained)->cross_network()->gradient(i);
      std::vector<float> p(grad.size());
      ASSERT_TRUE(cross.GetParameter(i, p).ok()) << params[i].name;
      int checked = 0;
      for (size_t k : {size_t{0}, p.size() / 3, p.size() - 1}) {
        const float w = p[k];
        p[k] = w + static_cast<float>(eps);
        ASSERT_TRUE(cross.SetParameter(i, p).ok());
        const double up = Loss(**probe, batch);
        p[k] = w - static_cast<float>(eps);
        ASSERT_TRUE(cross.SetParameter(i, p).ok());
        const double down = Loss(**probe, batch);
        p[k] = w;
        ASSERT_TRUE(cross.SetParameter(i, p).ok());
        const double numeric = (up - down) / (2 * eps);
        EXPECT_NEAR(grad[k], numeric, 2e-3 * std::max(1.0, std::abs(numeric)) + 5e-4) << params[i].name << "[" << k << "]";
        checked += std::abs(numeric) > 1e-5;
      }
      EXPECT_GT(checked, 0) << params[i].name << ": zero gradients prove nothing";
    }
  }
}

// With dense Adagrad, a checkpoint (Save / Load) carries the MLPs' and the
// cross network's accumulators: a model loaded after step 1 takes step 2
// exactly as the model that saved it.
TEST(Dlrm, DenseAdagradStateTravelsInCheckpoints) {
  DlrmOptions o = TinyOptions(InteractionKind::kDcn);
  o.dense_optimizer = {.kind = DenseOptimizerKind::kAdagrad, .adagrad_eps = 1e-8f};
  const TestBatch batch;
  auto a = Dlrm::Create(o);
  auto b = Dlrm::Create(o);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE((*a)->TrainStep(batch.view(), 0.05f, nullptr).ok());
  const std::string dir = ::testing::TempDir() + "/adagrad_checkpoint";
  ASSERT_TRUE((*a)->Save(dir).ok());
  EXPECT_TRUE(std::filesystem::exists(dir + "/top_l.0.weight.adagrad.npy"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/crossnet.V_kernels.1.adagrad.npy"));
  ASSERT_TRUE((*b)->Load(dir).ok());
  ASSERT_TRUE((*a)->TrainStep(batch.view(), 0.05f, nullptr).ok());
  ASSERT_TRUE((*b)->TrainStep(batch.view(), 0.05f, nullptr).ok());
  std::vector<float> pa(kBatch), pb(kBatch);
  ASSERT_TRUE((*a)->Predict(batch.view(), pa, nullptr).ok());
  ASSERT_TRUE((*b)->Predict(batch.view(), pb, nullptr).ok());
  EXPECT_EQ(pa, pb);
  // Without the top MLP's accumulators step 2 differs: the check above can fail.
  auto c = Dlrm::Create(o);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE((*c)->Load(dir).ok());
  DenseOptimizer& top = const_cast<Mlp&>((*c)->top_mlp()).optimizer();
  for (int i = 0; i < 4; ++i) std::ranges::fill(top.state(i), 0.0f);
  ASSERT_TRUE((*c)->TrainStep(batch.view(), 0.05f, nullptr).ok());
  std::vector<float> pc(kBatch);
  ASSERT_TRUE((*c)->Predict(batch.view(), pc, nullptr).ok());
  EXPECT_NE(pc, pa);
}

// `b` predicts other than `a` until it imports `a`'s export from `dir`, then the same.
void ExpectImportPredictsTheSame(Dlrm& a, Dlrm& b, const std::string& dir, const TestBatch& batch) {
  std::vector<float> pa(kBatch), pb(kBatch);
  ASSERT_TRUE(a.Predict(batch.view(), pa, nullptr).ok());
  ASSERT_TRUE(b.Predict(batch.view(), pb, nullptr).ok());
  EXPECT_NE(pa, pb);
  const absl::Status s = b.ImportNpy(dir);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_TRUE(b.Predict(batch.view(), pb, nullptr).ok());
  EXPECT_EQ(pa, pb);
}

// A DCN model's parameters leave as .npy files under the PyTorch names and
// come back: a model imported from another's export predicts the same.
TEST(Dlrm, DcnExportsAndImportsItsCrossNetwork) {
  const TestBatch batch;
  auto a = Dlrm::Create(TinyOptions(InteractionKind::kDcn));
  DlrmOptions other = TinyOptions(InteractionKind::kDcn);
  other.seed = 99;
  auto b = Dlrm::Create(other);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE((*a)->TrainStep(batch.view(), 0.1f, nullptr).ok());  // the bias moves off zero
  const std::string dir = ::testing::TempDir() + "/dcn_export";
  ASSERT_TRUE((*a)->ExportNpy(dir).ok());
  for (const char* name : {"crossnet.W_kernels.1.npy", "crossnet.V_kernels.0.npy", "crossnet.bias.1.npy"}) {
    EXPECT_TRUE(std::filesystem::exists(dir + "/" + name)) << name;
  }
  ExpectImportPredictsTheSame(**a, **b, dir, batch);

  // A full-rank model finds no "kernels" files in a low-rank export, and says which.
  DlrmOptions full = TinyOptions(InteractionKind::kDcn);
  full.dcn_rank = 0;
  auto c = Dlrm::Create(full);
  ASSERT_TRUE(c.ok());
  const absl::Status s = (*c)->ImportNpy(dir);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("crossnet.kernels.0.npy")) << s;
}

// TorchRec's full-rank CrossNet keeps each layer's bias as [N, 1] (its
// LowRankCrossNet as [N]): a full-rank model imports such files as it
// imports its own [N] ones; a bias of any other shape is refused, named.
TEST(Dlrm, DcnImportsAFullRankCrossNetBiasOfShapeNBy1AsTorchRecsCrossNetKeepsIt) {
  const TestBatch batch;
  DlrmOptions full = TinyOptions(InteractionKind::kDcn);
  full.dcn_rank = 0;
  DlrmOptions other = full;
  other.seed = 99;
  auto a = Dlrm::Create(full);
  auto b = Dlrm::Create(other);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE((*a)->TrainStep(batch.view(), 0.1f, nullptr).ok());  // the bias moves off zero
  const std::string dir = ::testing::TempDir() + "/dcn_bias_n1";
  ASSERT_TRUE((*a)->ExportNpy(dir).ok());
  for (int l = 0; l < full.dcn_layers; ++l) {
    const std::string path = dir + "/crossnet.bias." + std::to_string(l) + ".npy";
    absl::StatusOr<NpyArray<float>> bias = ReadNpy<float>(path);
    ASSERT_TRUE(bias.ok()) << bias.status();
    ASSERT_EQ(bias->shape.size(), 1u);
    EXPECT_TRUE(std::ranges::any_of(bias->data, [](float v) { return v != 0.0f; })) << path;
    ASSERT_TRUE(WriteNpy<float>(path, bias->data, {bias->shape[0], 1}).ok());
  }
  ExpectImportPredictsTheSame(**a, **b, dir, batch);

  const std::string bias0 = dir + "/crossnet.bias.0.npy";
  absl::StatusOr<NpyArray<float>> bias = ReadNpy<float>(bias0);
  ASSERT_TRUE(bias.ok());
  const int64_t n = bias->shape[0];
  bias->data.resize(static_cast<size_t>(2 * n));
  ASSERT_TRUE(WriteNpy<float>(bias0, bias->data, {n, 2}).ok());
  const absl::Status s = (*b)->ImportNpy(dir);
  EXPECT_THAT(s.message(), ::testing::HasSubstr(absl::StrCat("crossnet.bias.0.npy: shape (", n, ", 2) where (", n)))
      << s;
}

// A DCN model in bf16 runs its cross network in bf16 too, and trains: the
// loss on a fixed batch falls over a few steps.
TEST(Dlrm, DcnTrainsInBf16) {
  if (DetectMatmulCpu().bf16_matmul.empty()) GTEST_SKIP() << "no bf16 matmul on this CPU";
  DlrmOptions o = TinyOptions(InteractionKind::kDcn);
  o.mlp_precision = Precision::kBf16;
  const TestBatch batch;
  auto model = Dlrm::Create(o);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_NE((*model)->cross_network(), nullptr);
  EXPECT_EQ((*model)->cross_network()->options().precision, Precision::kBf16);
  std::vector<double> losses;
  for (int step = 0; step < 8; ++step) {
    absl::StatusOr<double> loss = (*model)->TrainStep(batch.view(), 0.1f, nullptr);
    ASSERT_TRUE(loss.ok()) << loss.status();
    ASSERT_TRUE(std::isfinite(*loss)) << "step " << step;
    losses.push_back(*loss);
  }
  EXPECT_LT(losses.back(), losses.front()) << "losses " << losses.front() << " ... " << losses.back();
}

// kAuto's measurement times the model's own MLPs in both precisions (where
// oneDNN has a bf16 matmul), and Create resolves auto by those times.
TEST(Dlrm, TimesItsMlpsInBothPrecisionsAndAutoGoesByTheTimes) {
  if (DetectMatmulCpu().bf16_matmul.empty()) GTEST_SKIP() << "no bf16 matmul on this CPU";
  // dcn: the cross network, which runs in the MLPs' precision, is timed with them.
  for (InteractionKind kind : {InteractionKind::kDcn, InteractionKind::kDot}) {
    absl::StatusOr<MlpTimings> t = Dlrm::TimeMlpPrecisions(TinyOptions(kind));
    ASSERT_TRUE(t.ok()) << t.status();  // the times themselves are not checked: tests never decide on timing
  }
  DlrmOptions o = TinyOptions(InteractionKind::kDot);
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
