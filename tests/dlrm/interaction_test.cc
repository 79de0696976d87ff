#include "dlrm/interaction.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/random.h"

namespace cemb::dlrm {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kSeed = 77;
constexpr float kSentinel = -12345.f;

std::vector<float> RandomVector(size_t n, uint64_t seed) {
  Xoshiro256pp rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(2 * rng.Uniform() - 1);
  return v;
}

// Reference: the DLRM interaction written as plainly as possible, in double.
std::vector<double> ReferenceForward(InteractionKind kind, bool self, int64_t T, int64_t D,
                                     const std::vector<float>& dense, const std::vector<float>& sparse,
                                     int64_t b) {
  std::vector<std::vector<double>> x(T + 1, std::vector<double>(D));
  for (int64_t d = 0; d < D; ++d) x[0][d] = dense[b * D + d];
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t d = 0; d < D; ++d) x[t + 1][d] = sparse[b * T * D + t * D + d];
  }
  std::vector<double> out(x[0]);
  if (kind == InteractionKind::kConcat) {
    for (int64_t t = 0; t < T; ++t) out.insert(out.end(), x[t + 1].begin(), x[t + 1].end());
    return out;
  }
  for (int64_t i = 0; i <= T; ++i) {
    for (int64_t j = 0; j < i + (self ? 1 : 0); ++j) {
      double z = 0;
      for (int64_t d = 0; d < D; ++d) z += x[i][d] * x[j][d];
      out.push_back(z);
    }
  }
  return out;
}

struct Case {
  InteractionKind kind;
  bool self;
  int64_t T, D;
  Isa isa;
};

std::string Name(const ::testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return absl::StrCat(c.kind == InteractionKind::kDot ? "Dot" : "Concat", c.self ? "Self" : "", "T", c.T,
                      "D", c.D, c.isa == Isa::kAvx512 ? "Avx512"
                                : c.isa == Isa::kAvx2 ? "Avx2" : "Generic");
}

class InteractionTest : public ::testing::TestWithParam<Case> {
 protected:
  absl::StatusOr<Interaction> Make() {
    const Case& c = GetParam();
    return Interaction::Create(
        {.kind = c.kind, .num_sparse = c.T, .dim = c.D, .self_interaction = c.self, .isa = c.isa});
  }
  // A forced ISA this CPU (or build) does not run.
  bool Skip() {
    if (GetParam().isa == Isa::kGeneric) return false;
    return !Interaction::Create({.num_sparse = 1, .dim = 1, .isa = GetParam().isa}).ok();
  }
};

TEST_P(InteractionTest, OutputWidthIsDlrms) {
  const Case& c = GetParam();
  if (Skip()) GTEST_SKIP() << "no " << IsaName(GetParam().isa);
  absl::StatusOr<Interaction> inter = Make();
  ASSERT_TRUE(inter.ok()) << inter.status();
  const int64_t F = c.T + 1;
  const int64_t want = c.kind == InteractionKind::kConcat ? F * c.D
                                                          : c.D + (c.self ? F * (F + 1) / 2 : F * (F - 1) / 2);
  EXPECT_EQ(inter->output_width(), want);
}

TEST_P(InteractionTest, ForwardMatchesReferenceThroughStridedViews) {
  const Case& c = GetParam();
  if (Skip()) GTEST_SKIP() << "no " << IsaName(GetParam().isa);
  absl::StatusOr<Interaction> inter = Make();
  ASSERT_TRUE(inter.ok()) << inter.status();
  // Batch 70 crosses the per-thread split; the inputs and output live inside
  // wider matrices, whose padding columns must keep their sentinels.
  const int64_t batch = 70, D = c.D, T = c.T, W = inter->output_width();
  const std::vector<float> dense = RandomVector(batch * D, kSeed);
  const std::vector<float> sparse = RandomVector(batch * T * D, kSeed + 1);
  // One concatenated input matrix [batch x (F*D + 3)], as the trainer would use.
  const int64_t in_ld = (T + 1) * D + 3;
  std::vector<float> input(batch * in_ld, kSentinel);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t d = 0; d < D; ++d) input[b * in_ld + d] = dense[b * D + d];
    for (int64_t k = 0; k < T * D; ++k) input[b * in_ld + D + k] = sparse[b * T * D + k];
  }
  const int64_t out_ld = W + 5;
  std::vector<float> out(batch * out_ld, kSentinel);
  ASSERT_TRUE(inter->Forward({input.data(), batch, D, in_ld}, {input.data() + D, batch, T * D, in_ld},
                             {out.data(), batch, W, out_ld}).ok());
  for (int64_t b = 0; b < batch; ++b) {
    const std::vector<double> want = ReferenceForward(c.kind, c.self, T, D, dense, sparse, b);
    ASSERT_EQ(static_cast<int64_t>(want.size()), W);
    for (int64_t k = 0; k < W; ++k) {
      ASSERT_NEAR(out[b * out_ld + k], want[k], 1e-5 * (1 + std::abs(want[k]))) << "sample " << b << " k " << k;
    }
    for (int64_t k = W; k < out_ld; ++k) ASSERT_EQ(out[b * out_ld + k], kSentinel);
  }
}

TEST_P(InteractionTest, BackwardMatchesFiniteDifferences) {
  const Case& c = GetParam();
  if (Skip()) GTEST_SKIP() << "no " << IsaName(GetParam().isa);
  absl::StatusOr<Interaction> inter = Make();
  ASSERT_TRUE(inter.ok()) << inter.status();
  const int64_t batch = 3, D = c.D, T = c.T, W = inter->output_width();
  std::vector<float> dense = RandomVector(batch * D, kSeed + 2);
  std::vector<float> sparse = RandomVector(batch * T * D, kSeed + 3);
  const std::vector<float> r = RandomVector(batch * W, kSeed + 4);  // loss = sum(out * r)
  // Gradients into padded matrices whose padding must survive.
  const int64_t dd_ld = D + 2, ds_ld = T * D + 2;
  std::vector<float> d_dense(batch * dd_ld, kSentinel), d_sparse(batch * ds_ld, kSentinel);
  ASSERT_TRUE(inter->Backward({dense.data(), batch, D, D}, {sparse.data(), batch, T * D, T * D}, {r.data(), batch, W, W},
                              {d_dense.data(), batch, D, dd_ld}, {d_sparse.data(), batch, T * D, ds_ld})
                  .ok());
  std::vector<float> out(batch * W);
  auto loss = [&]() {
    EXPECT_TRUE(inter->Forward({dense.data(), batch, D, D}, {sparse.data(), batch, T * D, T * D}, {out.data(), batch, W, W}).ok());
    double s = 0;
    for (size_t i = 0; i < out.size(); ++i) s += static_cast<double>(out[i]) * r[i];
    return s;
  };
  const double eps = 1e-2;  // the loss is quadratic in the inputs: exact up to rounding
  auto fd = [&](float& v) {
    const float saved = v;
    v = saved + static_cast<float>(eps);
    const double plus = loss();
    v = saved - static_cast<float>(eps);
    const double minus = loss();
    v = saved;
    return (plus - minus) / (2 * eps);
  };
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t d = 0; d < D; ++d) {
      const double want = fd(dense[b * D + d]);
      EXPECT_NEAR(d_dense[b * dd_ld + d], want, 1e-3 * (1 + std::abs(want))) << "dense b " << b << " d " << d;
    }
    for (int64_t d = D; d < dd_ld; ++d) EXPECT_EQ(d_dense[b * dd_ld + d], kSentinel);
    for (int64_t k = 0; k < T * D; ++k) {
      const double want = fd(sparse[b * T * D + k]);
      EXPECT_NEAR(d_sparse[b * ds_ld + k], want, 1e-3 * (1 + std::abs(want))) << "sparse b " << b << " k " << k;
    }
    for (int64_t k = T * D; k < ds_ld; ++k) EXPECT_EQ(d_sparse[b * ds_ld + k], kSentinel);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, InteractionTest,
    ::testing::Values(Case{InteractionKind::kDot, false, 26, 16, Isa::kGeneric},
                      Case{InteractionKind::kDot, false, 26, 16, Isa::kAvx512},
                      Case{InteractionKind::kDot, true, 26, 16, Isa::kGeneric},
                      Case{InteractionKind::kDot, true, 26, 16, Isa::kAvx512},
                      Case{InteractionKind::kDot, false, 8, 64, Isa::kAvx512},
                      Case{InteractionKind::kDot, false, 26, 16, Isa::kAvx2},
                      Case{InteractionKind::kDot, true, 26, 16, Isa::kAvx2},
                      Case{InteractionKind::kDot, false, 8, 64, Isa::kAvx2},
                      Case{InteractionKind::kDot, false, 5, 32, Isa::kAvx2},
                      Case{InteractionKind::kDot, true, 4, 128, Isa::kAvx2},
                      Case{InteractionKind::kDot, true, 3, 5, Isa::kAvx2},
                      Case{InteractionKind::kDot, false, 8, 64, Isa::kGeneric},
                      Case{InteractionKind::kDot, false, 5, 32, Isa::kAvx512},
                      Case{InteractionKind::kDot, true, 4, 128, Isa::kAvx512},
                      Case{InteractionKind::kDot, false, 17, 16, Isa::kAvx512},
                      Case{InteractionKind::kDot, false, 3, 5, Isa::kGeneric},
                      Case{InteractionKind::kDot, true, 3, 5, Isa::kAvx512},
                      Case{InteractionKind::kDot, false, 0, 4, Isa::kGeneric},
                      Case{InteractionKind::kDot, true, 0, 4, Isa::kGeneric},
                      Case{InteractionKind::kConcat, false, 4, 6, Isa::kGeneric}),
    Name);

TEST(Interaction, KaggleWidthIs367) {
  absl::StatusOr<Interaction> inter = Interaction::Create({.num_sparse = 26, .dim = 16});
  ASSERT_TRUE(inter.ok());
  EXPECT_EQ(inter->num_features(), 27);
  EXPECT_EQ(inter->output_width(), 367);
}

TEST(Interaction, HandComputedSample) {
  // F = 3, D = 2: x0 = (1, 2), x1 = (3, 4), x2 = (5, 6).
  absl::StatusOr<Interaction> inter = Interaction::Create({.num_sparse = 2, .dim = 2, .self_interaction = true});
  ASSERT_TRUE(inter.ok());
  const float dense[] = {1, 2};
  const float sparse[] = {3, 4, 5, 6};
  float out[8];
  ASSERT_TRUE(inter->Forward({dense, 1, 2, 2}, {sparse, 1, 4, 4}, {out, 1, 8, 8}).ok());
  // [x0, (0,0), (1,0), (1,1), (2,0), (2,1), (2,2)]
  EXPECT_THAT(out, ::testing::ElementsAre(1, 2, 5, 11, 25, 17, 39, 61));
}

// concat and dcn in place (the model's layout): the embedding outputs
// already in out's columns [D, F*D) stay, the dense part is copied beside
// them; backward leaves d_sparse as d_out's columns and copies d_dense.
TEST(Interaction, ConcatInPlaceCopiesOnlyTheDensePart) {
  for (InteractionKind kind : {InteractionKind::kConcat, InteractionKind::kDcn}) {
    constexpr int64_t n = 5, T = 3, D = 4, W = (T + 1) * D;
    absl::StatusOr<Interaction> in = Interaction::Create({.kind = kind, .num_sparse = T, .dim = D});
    ASSERT_TRUE(in.ok()) << in.status();
    ASSERT_EQ(in->output_width(), W);
    const std::vector<float> dense = RandomVector(n * D, 1), sparse = RandomVector(n * T * D, 2);
    std::vector<float> out(n * W, 0.0f);
    for (int64_t b = 0; b < n; ++b) {
      std::copy_n(sparse.begin() + b * T * D, T * D, out.begin() + b * W + D);
    }
    ASSERT_TRUE(in->Forward({dense.data(), n, D, D}, {out.data() + D, n, T * D, W}, {out.data(), n, W, W}).ok());
    for (int64_t b = 0; b < n; ++b) {
      for (int64_t c = 0; c < D; ++c) EXPECT_EQ(out[b * W + c], dense[b * D + c]);
      for (int64_t c = 0; c < T * D; ++c) EXPECT_EQ(out[b * W + D + c], sparse[b * T * D + c]);
    }
    const std::vector<float> d_out = RandomVector(n * W, 3);
    std::vector<float> grad = d_out, d_dense(n * D);
    ASSERT_TRUE(in->Backward({}, {}, {grad.data(), n, W, W}, {d_dense.data(), n, D, D}, {grad.data() + D, n, T * D, W})
                    .ok());
    EXPECT_EQ(grad, d_out);
    for (int64_t b = 0; b < n; ++b) {
      for (int64_t c = 0; c < D; ++c) EXPECT_EQ(d_dense[b * D + c], d_out[b * W + c]);
    }
  }
}

TEST(Interaction, ZeroBatchIsANoOp) {
  absl::StatusOr<Interaction> inter = Interaction::Create({.num_sparse = 2, .dim = 2});
  ASSERT_TRUE(inter.ok());
  EXPECT_TRUE(inter->Forward({}, {}, {}).ok());
  EXPECT_TRUE(inter->Backward({}, {}, {}, {}, {}).ok());
}

TEST(Interaction, BadViewsAndOptionsAreRejected) {
  absl::StatusOr<Interaction> inter = Interaction::Create({.num_sparse = 2, .dim = 4});
  ASSERT_TRUE(inter.ok());
  std::vector<float> buf(1000);
  absl::Status st = inter->Forward({buf.data(), 2, 4, 4}, {buf.data(), 2, 8, 7}, {buf.data(), 2, 7, 7});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("sparse has ld 7 < its width 8"));
  st = inter->Forward({nullptr, 2, 4, 4}, {buf.data(), 2, 8, 8}, {buf.data(), 2, 7, 7});
  EXPECT_THAT(st.message(), HasSubstr("dense is null"));
  EXPECT_EQ(inter->Forward({nullptr, -1, 4, 4}, {}, {}).code(), absl::StatusCode::kInvalidArgument);
  st = inter->Forward({buf.data(), 2, 4, 4}, {buf.data(), 3, 8, 8}, {buf.data(), 2, 7, 7});
  EXPECT_THAT(st.message(), HasSubstr("sparse has 3 rows, want 2"));
  st = inter->Forward({buf.data(), 2, 4, 4}, {buf.data(), 2, 8, 8}, {buf.data(), 2, 6, 7});
  EXPECT_THAT(st.message(), HasSubstr("out has 6 columns, want 7"));
  st = inter->Backward({buf.data(), 2, 4, 4}, {buf.data(), 2, 8, 8}, {buf.data(), 2, 7, 7}, {buf.data(), 1, 4, 4},
                       {buf.data(), 2, 8, 8});
  EXPECT_THAT(st.message(), HasSubstr("d_dense has 1 rows, want 2"));
  EXPECT_EQ(Interaction::Create({.num_sparse = 2, .dim = 0}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Interaction::Create({.kind = InteractionKind::kConcat, .num_sparse = 2, .dim = 2,
                                 .self_interaction = true})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cemb::dlrm
