// CrossNetwork against a reference written from the formula
//   x_{l+1} = x0 * (W_l x_l + b_l) + x_l,   W_l = U_l V_l (or full)
// in double precision: the forward, and every gradient checked by finite
// differences of the reference's loss.
#include "dlrm/cross_network.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "base/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cemb::dlrm {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kWidth = 7, kBatch = 5;

std::vector<float> Random(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  FillNormal(v, 0.5, seed);
  return v;
}

// The network's parameters as doubles, per Parameters() order.
struct Params {
  std::vector<std::vector<double>> p;
};

Params Copy(CrossNetwork& net) {
  Params out;
  for (size_t i = 0; i < net.Parameters().size(); ++i) {
    std::span<float> s = net.parameter(static_cast<int>(i));
    out.p.emplace_back(s.begin(), s.end());
  }
  return out;
}

// The formula, in double: y = x_L for x0 [n x d]; r = 0 full rank.
std::vector<double> Reference(const Params& params, const std::vector<double>& x0, int64_t n, int64_t d, int64_t r,
                              int layers) {
  std::vector<double> x = x0;
  const int per_layer = r > 0 ? 3 : 2;
  for (int l = 0; l < layers; ++l) {
    const std::vector<double>& b = params.p[l * per_layer + per_layer - 1];
    std::vector<double> next(x.size());
    for (int64_t i = 0; i < n; ++i) {
      const double* xi = &x[i * d];
      std::vector<double> o(d);
      if (r > 0) {
        const std::vector<double>& u = params.p[l * 3];      // [d x r]
        const std::vector<double>& v = params.p[l * 3 + 1];  // [r x d]
        std::vector<double> t(r, 0.0);
        for (int64_t k = 0; k < r; ++k) {
          for (int64_t j = 0; j < d; ++j) t[k] += v[k * d + j] * xi[j];
        }
        for (int64_t c = 0; c < d; ++c) {
          o[c] = b[c];
          for (int64_t k = 0; k < r; ++k) o[c] += u[c * r + k] * t[k];
        }
      } else {
        const std::vector<double>& w = params.p[l * 2];  // [d x d]
        for (int64_t c = 0; c < d; ++c) {
          o[c] = b[c];
          for (int64_t j = 0; j < d; ++j) o[c] += w[c * d + j] * xi[j];
        }
      }
      for (int64_t c = 0; c < d; ++c) next[i * d + c] = x0[i * d + c] * o[c] + xi[c];
    }
    x = std::move(next);
  }
  return x;
}

// Loss = sum(y * dy): its gradient with respect to y is dy.
double Loss(const std::vector<double>& y, const std::vector<float>& dy) {
  double s = 0;
  for (size_t i = 0; i < y.size(); ++i) s += y[i] * dy[i];
  return s;
}

void ExpectMatchesReference(int64_t rank, int layers) {
  SCOPED_TRACE(testing::Message() << "rank " << rank << ", layers " << layers);
  absl::StatusOr<CrossNetwork> net = CrossNetwork::Create(
      {.width = kWidth, .layers = layers, .rank = rank, .max_batch = kBatch, .batch_sizes = {3}, .seed = 11});
  ASSERT_TRUE(net.ok()) << net.status();
  // Non-zero biases, so that their path is exercised.
  for (size_t i = 0; i < net->Parameters().size(); ++i) {
    if (net->Parameters()[i].name.starts_with("bias.")) {
      const std::vector<float> b = Random(kWidth, 100 + i);
      std::copy(b.begin(), b.end(), net->parameter(static_cast<int>(i)).begin());
    }
  }
  const std::vector<float> x0 = Random(kBatch * kWidth, 1);
  const std::vector<float> dy = Random(kBatch * kWidth, 2);
  absl::StatusOr<std::span<const float>> y = net->Forward(kBatch, x0.data());
  ASSERT_TRUE(y.ok()) << y.status();
  const Params params = Copy(*net);
  const std::vector<double> x0d(x0.begin(), x0.end());
  const std::vector<double> ref = Reference(params, x0d, kBatch, kWidth, rank, layers);
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR((*y)[i], ref[i], 1e-5 * (1 + std::abs(ref[i]))) << i;

  std::vector<float> dx0(kBatch * kWidth);
  ASSERT_TRUE(net->Backward(kBatch, dy.data(), dx0.data()).ok());
  constexpr double kH = 1e-6;
  const auto expect_fd = [&](double analytic, const auto& perturbed_loss, const std::string& what) {
    const double fd = (perturbed_loss(kH) - perturbed_loss(-kH)) / (2 * kH);
    EXPECT_NEAR(analytic, fd, 1e-4 * (1 + std::abs(fd))) << what;
  };
  for (size_t i = 0; i < x0d.size(); ++i) {
    expect_fd(dx0[i], [&](double h) {
      std::vector<double> x = x0d;
      x[i] += h;
      return Loss(Reference(params, x, kBatch, kWidth, rank, layers), dy);
    }, "dx0[" + std::to_string(i) + "]");
  }
  const std::vector<ParameterInfo> infos = net->Parameters();
  for (size_t k = 0; k < infos.size(); ++k) {
    std::span<const float> grad = net->gradient(static_cast<int>(k));
    ASSERT_EQ(grad.size(), params.p[k].size()) << infos[k].name;
    for (size_t i = 0; i < grad.size(); ++i) {
      expect_fd(grad[i], [&](double h) {
        Params q = params;
        q.p[k][i] += h;
        return Loss(Reference(q, x0d, kBatch, kWidth, rank, layers), dy);
      }, infos[k].name + "[" + std::to_string(i) + "]");
    }
  }
}

TEST(CrossNetwork, LowRankMatchesTheFormulaAndFiniteDifferences) { ExpectMatchesReference(3, 3); }
TEST(CrossNetwork, FullRankMatchesTheFormulaAndFiniteDifferences) { ExpectMatchesReference(0, 2); }
TEST(CrossNetwork, OneLayer) { ExpectMatchesReference(2, 1); }

TEST(CrossNetwork, ParametersHaveTorchRecNamesAndShapes) {
  absl::StatusOr<CrossNetwork> net = CrossNetwork::Create({.width = 6, .layers = 2, .rank = 4, .max_batch = 2});
  ASSERT_TRUE(net.ok());
  std::vector<std::string> names;
  for (const ParameterInfo& p : net->Parameters()) names.push_back(p.name);
  EXPECT_THAT(names, ::testing::ElementsAre("W_kernels.0", "V_kernels.0", "bias.0", "W_kernels.1", "V_kernels.1",
                                            "bias.1"));
  EXPECT_EQ(net->Parameters()[0].shape, (std::vector<int64_t>{6, 4}));
  EXPECT_EQ(net->Parameters()[1].shape, (std::vector<int64_t>{4, 6}));
  EXPECT_EQ(net->parameter(0).size(), 24u);
  for (float b : net->parameter(2)) EXPECT_EQ(b, 0.0f);  // zero bias, as TorchRec's
}

TEST(CrossNetwork, SgdStepSubtractsTheGradient) {
  absl::StatusOr<CrossNetwork> net = CrossNetwork::Create({.width = 4, .layers = 1, .rank = 2, .max_batch = 3});
  ASSERT_TRUE(net.ok());
  const std::vector<float> x0 = Random(12, 3), dy = Random(12, 4);
  std::vector<float> dx0(12);
  ASSERT_TRUE(net->Forward(3, x0.data()).ok());
  ASSERT_TRUE(net->Backward(3, dy.data(), dx0.data()).ok());
  const Params before = Copy(*net);
  net->Update(0.5f);
  for (int k = 0; k < 3; ++k) {
    for (size_t i = 0; i < before.p[k].size(); ++i) {
      EXPECT_EQ(net->parameter(k)[i], static_cast<float>(before.p[k][i]) - 0.5f * net->gradient(k)[i]);
    }
  }
}

// gradients() is every gradient(i), in order, each at a 16-float boundary;
// a Backward with dx0 == dy gives what separate buffers give.
TEST(CrossNetwork, GradientsAreOneBufferAndDx0MayBeDy) {
  absl::StatusOr<CrossNetwork> net = CrossNetwork::Create({.width = 5, .layers = 2, .rank = 3, .max_batch = 4});
  ASSERT_TRUE(net.ok());
  const std::vector<float> x0 = Random(20, 5), dy = Random(20, 6);
  std::vector<float> dx0(20), in_place = dy;
  ASSERT_TRUE(net->Forward(4, x0.data()).ok());
  ASSERT_TRUE(net->Backward(4, dy.data(), dx0.data()).ok());
  ASSERT_TRUE(net->Backward(4, in_place.data(), in_place.data()).ok());
  EXPECT_EQ(in_place, dx0);
  const std::span<float> all = net->gradients();
  size_t at = 0;
  for (int i = 0; i < net->num_parameters(); ++i) {
    const std::span<const float> g = net->gradient(i);
    ASSERT_EQ(g.data(), all.data() + at) << i;
    at += (g.size() + 15) / 16 * 16;
  }
  EXPECT_EQ(at, all.size());
}

// SaveNpy / LoadNpy: the parameters round-trip under their names; a file of
// the wrong shape is named and changes nothing.
TEST(CrossNetwork, SavesAndLoadsNpyFiles) {
  absl::StatusOr<CrossNetwork> a = CrossNetwork::Create({.width = 4, .layers = 2, .rank = 3, .max_batch = 2});
  absl::StatusOr<CrossNetwork> b =
      CrossNetwork::Create({.width = 4, .layers = 2, .rank = 3, .max_batch = 2, .seed = 9});
  ASSERT_TRUE(a.ok() && b.ok());
  const std::string dir = ::testing::TempDir();
  ASSERT_TRUE(a->SaveNpy(dir, "cn.").ok());
  ASSERT_TRUE(b->LoadNpy(dir, "cn.").ok());
  for (int i = 0; i < a->num_parameters(); ++i) {
    EXPECT_TRUE(std::ranges::equal(a->parameter(i), b->parameter(i))) << a->Parameters()[i].name;
  }
  absl::StatusOr<CrossNetwork> wide = CrossNetwork::Create({.width = 4, .layers = 2, .rank = 2, .max_batch = 2});
  ASSERT_TRUE(wide.ok());
  const std::vector<float> before(wide->parameter(0).begin(), wide->parameter(0).end());
  const absl::Status s = wide->LoadNpy(dir, "cn.");
  EXPECT_THAT(s.message(), HasSubstr("cn.W_kernels.0.npy: shape (4, 3) where (4, 2) is needed")) << s;
  EXPECT_TRUE(std::ranges::equal(wide->parameter(0), before));
}

TEST(CrossNetwork, BadUseIsRefused) {
  EXPECT_EQ(CrossNetwork::Create({.width = 0, .layers = 1, .max_batch = 2}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CrossNetwork::Create({.width = 4, .layers = 1, .rank = -1, .max_batch = 2}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CrossNetwork::Create({.width = 4, .layers = 1, .max_batch = 2, .batch_sizes = {3}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<CrossNetwork> net = CrossNetwork::Create({.width = 4, .layers = 1, .rank = 2, .max_batch = 3});
  ASSERT_TRUE(net.ok());
  std::vector<float> x(12), dx(12);
  EXPECT_EQ(net->Backward(3, x.data(), dx.data()).code(), absl::StatusCode::kFailedPrecondition);
  absl::StatusOr<std::span<const float>> y = net->Forward(2, x.data());
  EXPECT_EQ(y.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(y.status().message(), HasSubstr("batch 2 was not planned"));
  ASSERT_TRUE(net->Forward(3, x.data()).ok());
  EXPECT_EQ(net->Backward(2, x.data(), dx.data()).code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace cemb::dlrm
