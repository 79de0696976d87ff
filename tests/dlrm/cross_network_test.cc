// CrossNetwork against a reference written from the formula
//   x_{l+1} = x0 * (W_l x_l + b_l) + x_l,   W_l = U_l V_l (or full)
// in double precision: the forward, and every gradient checked by finite
// differences of the reference's loss. bf16 against fp32 from the same
// weights, within the bound of bf16 rounding; its split weights against an
// fp32 update.
#include "dlrm/cross_network.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "base/random.h"
#include "dlrm/precision.h"
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

// Parameter i of `net`, fp32.
std::vector<float> Get(const CrossNetwork& net, int i) {
  std::vector<float> v(net.gradient(i).size());
  EXPECT_TRUE(net.GetParameter(i, v).ok());
  return v;
}

Params Copy(const CrossNetwork& net) {
  Params out;
  for (int i = 0; i < net.num_parameters(); ++i) {
    const std::vector<float> v = Get(net, i);
    out.p.emplace_back(v.begin(), v.end());
  }
  return out;
}

// One step of the formula, in double, for x0 [n x d] (r = 0: full rank):
// y = x_L and, for a non-empty dy (the gradient of y), dx0 and every
// parameter's gradient in Parameters() order. With `magnitude`, the
// absolute values of x0, dy and the parameters are used: every sum then
// adds |terms|, which bounds the rounding errors of bf16 (BF16Bound).
struct Step {
  std::vector<double> y, dx0;
  std::vector<std::vector<double>> grads;
};
Step ReferenceStep(Params params, std::vector<double> x0, std::vector<double> dy, int64_t n, int64_t d, int64_t r,
                   int layers, bool magnitude = false) {
  if (magnitude) {
    for (std::vector<double>* v : {&x0, &dy}) {
      for (double& e : *v) e = std::abs(e);
    }
    for (std::vector<double>& p : params.p) {
      for (double& e : p) e = std::abs(e);
    }
  }
  const int per_layer = r > 0 ? 3 : 2;
  // W (full rank) is kept as U with k = d: o = t U^T + b with t = x.
  const int64_t k = r > 0 ? r : d;
  std::vector<std::vector<double>> xs{x0}, ts, os;
  for (int l = 0; l < layers; ++l) {
    const std::vector<double>& x = xs.back();
    const std::vector<double>& u = params.p[l * per_layer];  // U [d x r], or W [d x d]
    const std::vector<double>& b = params.p[l * per_layer + per_layer - 1];
    std::vector<double> t = x;
    if (r > 0) {
      const std::vector<double>& v = params.p[l * 3 + 1];  // [r x d]
      t.assign(n * r, 0.0);
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t c = 0; c < r; ++c) {
          for (int64_t j = 0; j < d; ++j) t[i * r + c] += v[c * d + j] * x[i * d + j];
        }
      }
    }
    std::vector<double> o(n * d), next(n * d);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t c = 0; c < d; ++c) {
        o[i * d + c] = b[c];
        for (int64_t j = 0; j < k; ++j) o[i * d + c] += u[c * k + j] * t[i * k + j];
        next[i * d + c] = x0[i * d + c] * o[i * d + c] + x[i * d + c];
      }
    }
    ts.push_back(std::move(t));
    os.push_back(std::move(o));
    xs.push_back(std::move(next));
  }
  Step step;
  step.y = xs.back();
  if (dy.empty()) return step;
  std::vector<double> g = dy;
  step.dx0.assign(n * d, 0.0);
  step.grads.resize(params.p.size());
  for (int l = layers - 1; l >= 0; --l) {
    const std::vector<double>& u = params.p[l * per_layer];
    std::vector<double> go(n * d), db(d, 0.0), du(d * k, 0.0), gt(n * k, 0.0);
    for (int64_t i = 0; i < n * d; ++i) {
      go[i] = g[i] * x0[i];
      step.dx0[i] += g[i] * os[l][i];
      db[i % d] += go[i];
    }
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t c = 0; c < d; ++c) {
        for (int64_t j = 0; j < k; ++j) {
          du[c * k + j] += go[i * d + c] * ts[l][i * k + j];
          gt[i * k + j] += go[i * d + c] * u[c * k + j];
        }
      }
    }
    step.grads[l * per_layer] = std::move(du);
    step.grads[l * per_layer + per_layer - 1] = std::move(db);
    if (r > 0) {  // through t = x V^T
      const std::vector<double>& v = params.p[l * 3 + 1];
      std::vector<double> dv(r * d, 0.0);
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t c = 0; c < r; ++c) {
          for (int64_t j = 0; j < d; ++j) {
            dv[c * d + j] += gt[i * r + c] * xs[l][i * d + j];
            g[i * d + j] += gt[i * r + c] * v[c * d + j];
          }
        }
      }
      step.grads[l * 3 + 1] = std::move(dv);
    } else {
      for (int64_t i = 0; i < n * d; ++i) g[i] += gt[i];
    }
  }
  for (int64_t i = 0; i < n * d; ++i) step.dx0[i] += g[i];
  return step;
}

std::vector<double> Reference(const Params& params, const std::vector<double>& x0, int64_t n, int64_t d, int64_t r,
                              int layers) {
  return ReferenceStep(params, x0, {}, n, d, r, layers).y;
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
      ASSERT_TRUE(net->SetParameter(static_cast<int>(i), Random(kWidth, 100 + i)).ok());
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
  // The reference's own backward (BF16Bound's magnitudes come from it) agrees.
  const Step step = ReferenceStep(params, x0d, {dy.begin(), dy.end()}, kBatch, kWidth, rank, layers);
  for (size_t i = 0; i < dx0.size(); ++i) EXPECT_NEAR(dx0[i], step.dx0[i], 1e-5 * (1 + std::abs(step.dx0[i])));
  for (int k = 0; k < net->num_parameters(); ++k) {
    for (size_t i = 0; i < step.grads[k].size(); ++i) {
      EXPECT_NEAR(net->gradient(k)[i], step.grads[k][i], 1e-5 * (1 + std::abs(step.grads[k][i])));
    }
  }
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
  EXPECT_EQ(net->gradient(0).size(), 24u);
  for (float b : Get(*net, 2)) EXPECT_EQ(b, 0.0f);  // zero bias, as TorchRec's
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
    const std::vector<float> after = Get(*net, k);
    for (size_t i = 0; i < before.p[k].size(); ++i) {
      EXPECT_EQ(after[i], static_cast<float>(before.p[k][i]) - 0.5f * net->gradient(k)[i]);
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
  for (int i = 0; i < a->num_parameters(); ++i) EXPECT_EQ(Get(*a, i), Get(*b, i)) << a->Parameters()[i].name;
  absl::StatusOr<CrossNetwork> wide = CrossNetwork::Create({.width = 4, .layers = 2, .rank = 2, .max_batch = 2});
  ASSERT_TRUE(wide.ok());
  const std::vector<float> before = Get(*wide, 0);
  const absl::Status s = wide->LoadNpy(dir, "cn.");
  EXPECT_THAT(s.message(), HasSubstr("cn.W_kernels.0.npy: shape (4, 3) where (4, 2) is needed")) << s;
  EXPECT_EQ(Get(*wide, 0), before);
}

// bf16 ----------------------------------------------------------------

#define SKIP_WITHOUT_BF16_MATMUL()                                                                         \
  if (DetectMatmulCpu().bf16_matmul.empty()) GTEST_SKIP() << "oneDNN has no bf16 matmul on this CPU (" \
                                                          << DetectMatmulCpu().isa << ")"

// The unit roundoff of bf16 (8 significant bits, rounded to nearest).
constexpr double kBf16U = 1.0 / 256;

// How far the bf16 network may be from the fp32 one, to first order: a
// product term of o_l carries the roundings of x_l, V_l, t_l and U_l (4u,
// 2 with full rank) and x_l's own error, so by induction x_l is within
// 4 l u of its magnitude M (the same formula on absolute values,
// ReferenceStep with `magnitude`): y within 4L u M. Going down, the
// gradient of x_l adds the roundings of go, U, gt and V per layer (4L u),
// and a parameter's gradient multiplies it with a forward term: 8L u M.
// One u more covers the fp32 accumulation and the second-order terms.
struct BF16Bound {
  double forward, backward;
};
BF16Bound BoundFor(int layers) { return {(4 * layers + 1) * kBf16U, (8 * layers + 1) * kBf16U}; }

// bf16 and fp32 networks from the same seed hold the same master weights;
// their forward and backward differ by no more than bf16 rounding allows,
// and do differ (the bf16 matmuls ran).
void ExpectBf16WithinRoundingOfFp32(int64_t d, int64_t r, int64_t n, int layers) {
  SCOPED_TRACE(testing::Message() << "d " << d << ", rank " << r << ", batch " << n << ", layers " << layers);
  CrossNetworkOptions o{.width = d, .layers = layers, .rank = r, .max_batch = n, .seed = 5};
  absl::StatusOr<CrossNetwork> fp32 = CrossNetwork::Create(o);
  o.precision = Precision::kBf16;
  absl::StatusOr<CrossNetwork> bf16 = CrossNetwork::Create(o);
  ASSERT_TRUE(fp32.ok()) << fp32.status();
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  for (int i = 0; i < fp32->num_parameters(); ++i) {
    if (fp32->Parameters()[i].name.starts_with("bias.")) {
      const std::vector<float> b = Random(d, 200 + i);
      ASSERT_TRUE(fp32->SetParameter(i, b).ok());
      ASSERT_TRUE(bf16->SetParameter(i, b).ok());
    }
    ASSERT_EQ(Get(*fp32, i), Get(*bf16, i)) << i;
  }
  const std::vector<float> x0 = Random(n * d, 21), dy = Random(n * d, 22);
  std::vector<float> dx0_fp32(n * d), dx0_bf16(n * d);
  absl::StatusOr<std::span<const float>> y32 = fp32->Forward(n, x0.data());
  absl::StatusOr<std::span<const float>> y16 = bf16->Forward(n, x0.data());
  ASSERT_TRUE(y32.ok() && y16.ok());
  ASSERT_TRUE(fp32->Backward(n, dy.data(), dx0_fp32.data()).ok());
  ASSERT_TRUE(bf16->Backward(n, dy.data(), dx0_bf16.data()).ok());

  const Step m = ReferenceStep(Copy(*fp32), {x0.begin(), x0.end()}, {dy.begin(), dy.end()}, n, d, r, layers,
                               /*magnitude=*/true);
  const BF16Bound bound = BoundFor(layers);
  // Each value within bound * magnitude (rigorous, but loose where the
  // magnitudes dwarf the values: |M| / |value| reaches 10^4 at d 160);
  // and the whole tensor within kNormU u in the 2-norm (not a bound: the
  // roundings are independent and of mean zero, so they add in quadrature;
  // seen: at most 1.3 u). Returns the relative 2-norm error.
  constexpr double kNormU = 4;
  const auto check = [](std::span<const float> got, std::span<const float> want, const std::vector<double>& mag,
                        double rel, const std::string& what) {
    double e2 = 0, w2 = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double diff = std::abs(static_cast<double>(got[i]) - want[i]);
      EXPECT_LE(diff, rel * mag[i]) << what << "[" << i << "]: bf16 " << got[i] << ", fp32 " << want[i]
                                    << ", magnitude " << mag[i];
      e2 += diff * diff;
      w2 += static_cast<double>(want[i]) * want[i];
    }
    const double norm = w2 > 0 ? std::sqrt(e2 / w2) : 0;
    EXPECT_LE(norm, kNormU * kBf16U) << what;
    return norm;
  };
  const double y_err = check(*y16, *y32, m.y, bound.forward, "y");
  double grad_err = check(dx0_bf16, dx0_fp32, m.dx0, bound.backward, "dx0");
  for (int k = 0; k < fp32->num_parameters(); ++k) {
    grad_err = std::max(grad_err, check(bf16->gradient(k), fp32->gradient(k), m.grads[k], bound.backward,
                                        fp32->Parameters()[k].name));
  }
  EXPECT_GT(y_err, 0) << "bf16 forward equals fp32: no bf16 rounding happened";
  EXPECT_GT(grad_err, 0) << "bf16 backward equals fp32: no bf16 rounding happened";
  // The top layer's go = dy * x0 is the same in both, and the bias gradient
  // sums it in fp32, before any rounding: equal.
  const int top_bias = fp32->num_parameters() - 1;
  EXPECT_TRUE(std::ranges::equal(bf16->gradient(top_bias), fp32->gradient(top_bias)));
  std::printf("d %lld rank %lld: relative 2-norm error: y %.2g u, gradients up to %.2g u\n",
              static_cast<long long>(d), static_cast<long long>(r), y_err / kBf16U, grad_err / kBf16U);
}

TEST(CrossNetworkBf16, LowRankIsWithinRoundingOfFp32) {
  SKIP_WITHOUT_BF16_MATMUL();
  ExpectBf16WithinRoundingOfFp32(37, 5, 9, 3);
  ExpectBf16WithinRoundingOfFp32(160, 48, 64, 3);
}

TEST(CrossNetworkBf16, FullRankIsWithinRoundingOfFp32) {
  SKIP_WITHOUT_BF16_MATMUL();
  ExpectBf16WithinRoundingOfFp32(37, 0, 9, 2);
}

// The split weights' master values evolve bit for bit as fp32 weights do
// under the same optimizer and gradients (SGD and Adagrad); the biases are fp32.
TEST(CrossNetworkBf16, SplitUpdateEqualsFp32UpdateBitForBit) {
  SKIP_WITHOUT_BF16_MATMUL();
  for (const DenseOptimizerKind kind : {DenseOptimizerKind::kSgd, DenseOptimizerKind::kAdagrad}) {
    SCOPED_TRACE(DenseOptimizerName(kind));
    const DenseOptimizerOptions opt{.kind = kind};
    absl::StatusOr<CrossNetwork> net = CrossNetwork::Create(
        {.width = 24, .layers = 2, .rank = 8, .max_batch = 16, .optimizer = opt, .precision = Precision::kBf16});
    ASSERT_TRUE(net.ok()) << net.status();
    std::vector<int64_t> sizes;
    for (int i = 0; i < net->num_parameters(); ++i) sizes.push_back(static_cast<int64_t>(net->gradient(i).size()));
    DenseOptimizer fp32(opt, sizes);
    const std::vector<float> x0 = Random(16 * 24, 31), dy = Random(16 * 24, 32);
    std::vector<float> dx0(16 * 24);
    const float lr = 0.37f;
    for (int step = 0; step < 3; ++step) {
      ASSERT_TRUE(net->Forward(16, x0.data()).ok());
      ASSERT_TRUE(net->Backward(16, dy.data(), dx0.data()).ok());
      std::vector<std::vector<float>> want;
      for (int i = 0; i < net->num_parameters(); ++i) {
        want.push_back(Get(*net, i));
        fp32.Update(i, want.back(), net->gradient(i), lr);
      }
      net->Update(lr);
      for (int i = 0; i < net->num_parameters(); ++i) {
        const std::vector<float> got = Get(*net, i);
        for (size_t k = 0; k < got.size(); ++k) {
          ASSERT_EQ(std::bit_cast<uint32_t>(got[k]), std::bit_cast<uint32_t>(want[i][k]))
              << "step " << step << ", " << net->Parameters()[i].name << "[" << k << "]";
        }
      }
    }
  }
}

// SaveNpy writes the master values and LoadNpy restores them exactly: a
// bf16 network loaded from another's files holds the same fp32 values and
// computes the same; an fp32 network reads the same files.
TEST(CrossNetworkBf16, SavesAndLoadsMasterValuesExactly) {
  SKIP_WITHOUT_BF16_MATMUL();
  CrossNetworkOptions o{.width = 12, .layers = 2, .rank = 4, .max_batch = 6, .precision = Precision::kBf16};
  absl::StatusOr<CrossNetwork> a = CrossNetwork::Create(o);
  o.seed = 9;
  absl::StatusOr<CrossNetwork> b = CrossNetwork::Create(o);
  o.precision = Precision::kFp32;
  absl::StatusOr<CrossNetwork> c = CrossNetwork::Create(o);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  const std::vector<float> x0 = Random(6 * 12, 41), dy = Random(6 * 12, 42);
  std::vector<float> dx0(6 * 12);
  ASSERT_TRUE(a->Forward(6, x0.data()).ok());
  ASSERT_TRUE(a->Backward(6, dy.data(), dx0.data()).ok());
  a->Update(0.1f);  // moves the biases off zero
  const std::string dir = ::testing::TempDir();
  ASSERT_TRUE(a->SaveNpy(dir, "cn16.").ok());
  ASSERT_TRUE(b->LoadNpy(dir, "cn16.").ok());
  ASSERT_TRUE(c->LoadNpy(dir, "cn16.").ok());
  int off_bf16 = 0;  // master values that bf16 does not hold exactly
  for (int i = 0; i < a->num_parameters(); ++i) {
    const std::vector<float> want = Get(*a, i);
    EXPECT_EQ(Get(*b, i), want) << a->Parameters()[i].name;
    EXPECT_EQ(Get(*c, i), want) << a->Parameters()[i].name;
    for (float w : want) off_bf16 += (std::bit_cast<uint32_t>(w) & 0xffffu) != 0;
  }
  EXPECT_GT(off_bf16, 0) << "every master value is a bf16: the low halves were not checked";
  absl::StatusOr<std::span<const float>> ya = a->Forward(6, x0.data());
  ASSERT_TRUE(ya.ok());
  const std::vector<float> want(ya->begin(), ya->end());
  absl::StatusOr<std::span<const float>> yb = b->Forward(6, x0.data());
  ASSERT_TRUE(yb.ok());
  EXPECT_TRUE(std::ranges::equal(*yb, want));
}

TEST(CrossNetwork, BadUseIsRefused) {
  EXPECT_EQ(CrossNetwork::Create({.width = 0, .layers = 1, .max_batch = 2}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CrossNetwork::Create({.width = 4, .layers = 1, .rank = -1, .max_batch = 2}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CrossNetwork::Create({.width = 4, .layers = 1, .max_batch = 2, .batch_sizes = {3}}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CrossNetwork::Create({.width = 4, .layers = 1, .max_batch = 2, .precision = Precision::kAuto})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  absl::StatusOr<CrossNetwork> net = CrossNetwork::Create({.width = 4, .layers = 1, .rank = 2, .max_batch = 3});
  ASSERT_TRUE(net.ok());
  std::vector<float> p(8);
  EXPECT_EQ(net->GetParameter(3, p).code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(net->SetParameter(0, std::span<const float>(p).first(7)).code(), absl::StatusCode::kInvalidArgument);
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
