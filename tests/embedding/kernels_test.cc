// Every kernel x {static, dynamic feature size} x {float, bfloat16} x {each
// ISA this CPU runs} against the plain reference in reference.h; static sizes
// include one the kernels are not specialised for (100).
#include "embedding/kernels.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "embedding/reindex.h"
#include "gtest/gtest.h"
#include "tests/embedding/reference.h"
#include "tests/embedding/test_util.h"

namespace cemb {
namespace {

using testing::AvailableIsas;
using testing::MakeBags;
using testing::MakeTable;
using testing::PaddedMatrix;

template <typename TableT, int64_t kD>
struct Case {
  using Table = TableT;
  static constexpr int64_t d = kD;
};

template <typename C>
class KernelsTest : public ::testing::Test {
 protected:
  using Table = typename C::Table;
  using T = typename Table::value_type;
  static constexpr int64_t kRows = 300;
};

// Updated rows are rounded to bfloat16: allow one rounding step.
template <typename T>
double UpdateTolerance(double expected) {
  return std::is_same_v<T, float> ? 1e-5 * (1 + std::abs(expected)) : std::abs(expected) / 128 + 1e-6;
}

using Cases = ::testing::Types<
    Case<SimpleTable<float, 16>, 16>, Case<SimpleTable<float, 32>, 32>, Case<SimpleTable<float, 64>, 64>,
    Case<SimpleTable<float, 128>, 128>, Case<SimpleTable<float, 256>, 256>,
    Case<SimpleTable<float, kDynamic>, 16>, Case<SimpleTable<float, kDynamic>, 128>,
    Case<SimpleTable<float, kDynamic>, 7>, Case<SimpleTable<float, kDynamic>, 33>,
    Case<SimpleTable<float, kDynamic>, 200>, Case<SimpleTable<bfloat16, 16>, 16>,
    Case<SimpleTable<bfloat16, 64>, 64>, Case<SimpleTable<bfloat16, 256>, 256>,
    Case<SimpleTable<bfloat16, kDynamic>, 32>, Case<SimpleTable<bfloat16, kDynamic>, 128>,
    Case<SimpleTable<bfloat16, kDynamic>, 24>,
    // Static sizes outside internal/feature_sizes.h: the kDynamic base's kernels.
    Case<SimpleTable<float, 100>, 100>, Case<SimpleTable<bfloat16, 100>, 100>>;

class CaseNames {
 public:
  template <typename C>
  static std::string GetName(int) {
    using T = typename C::Table::value_type;
    return std::string(std::is_same_v<T, float> ? "f32" : "bf16") +
           (C::Table::kFeatureSize == kDynamic ? "_dynamic_" : "_static_") + std::to_string(C::d);
  }
};
TYPED_TEST_SUITE(KernelsTest, Cases, CaseNames);

TYPED_TEST(KernelsTest, LookupMatchesReference) {
  using Table = typename TestFixture::Table;
  const Table table = MakeTable<Table>(this->kRows, TypeParam::d, 1);
  const reference::Rows rows = reference::Snapshot(table);
  const auto bags = MakeBags<int64_t>(97, 1, 1, this->kRows, 2);
  for (Isa isa : AvailableIsas()) {
    for (Store store : {Store::kStandard, Store::kNonTemporal}) {
      SCOPED_TRACE(IsaName(isa));
      auto kernels = TableKernels<Table>::Create(table, {.isa = isa});
      ASSERT_TRUE(kernels.ok()) << kernels.status();
      PaddedMatrix out(97, TypeParam::d);
      ASSERT_TRUE(kernels->lookup(std::span<const int64_t>(bags.indices), out.view(), {.store = store}).ok());
      for (int64_t i = 0; i < 97; ++i) {
        for (int64_t c = 0; c < TypeParam::d; ++c) {
          ASSERT_EQ(out.at(i, c), static_cast<float>(rows.at(bags.indices[i], c))) << "row " << i << " col " << c;
        }
      }
      EXPECT_TRUE(out.SentinelsIntact());
    }
  }
}

template <typename Fixture, typename Index>
void CheckPooled(Pooling pooling, bool weighted, Store store, int64_t pad) {
  using Table = typename Fixture::Table;
  constexpr int64_t d = Fixture::d;
  const Table table = MakeTable<Table>(300, d, 3);
  const reference::Rows rows = reference::Snapshot(table);
  // Lengths 0..45: empty bags, single rows and the thesis' 40 accesses.
  const auto bags = MakeBags<Index>(61, 0, 45, 300, 4);
  const std::vector<double> expected =
      reference::Pooled<Index>(rows, bags.offsets, bags.indices, weighted ? bags.weights : std::vector<float>{},
                               pooling);
  for (Isa isa : AvailableIsas()) {
    SCOPED_TRACE(IsaName(isa));
    auto kernels = TableKernels<Table>::Create(table, {.isa = isa});
    ASSERT_TRUE(kernels.ok()) << kernels.status();
    PaddedMatrix out(61, d, pad);
    ASSERT_TRUE(kernels->pooled_lookup(bags.bags(weighted), out.view(), {.pooling = pooling, .store = store}).ok());
    for (int64_t b = 0; b < 61; ++b) {
      for (int64_t c = 0; c < d; ++c) {
        const double e = expected[b * d + c];
        ASSERT_NEAR(out.at(b, c), e, 1e-5 * (1 + std::abs(e))) << "bag " << b << " col " << c;
      }
    }
    EXPECT_TRUE(out.SentinelsIntact());
  }
}

TYPED_TEST(KernelsTest, PooledSumMatchesReference) { CheckPooled<TypeParam, int32_t>(Pooling::kSum, false, Store::kStandard, 5); }
TYPED_TEST(KernelsTest, PooledSumInt64MatchesReference) { CheckPooled<TypeParam, int64_t>(Pooling::kSum, false, Store::kStandard, 3); }
TYPED_TEST(KernelsTest, PooledMeanMatchesReference) { CheckPooled<TypeParam, int32_t>(Pooling::kMean, false, Store::kStandard, 5); }
TYPED_TEST(KernelsTest, PooledWeightedMatchesReference) { CheckPooled<TypeParam, int64_t>(Pooling::kSum, true, Store::kStandard, 5); }
// ld a multiple of 16 floats: the streaming stores really run.
TYPED_TEST(KernelsTest, PooledNonTemporalMatchesReference) { CheckPooled<TypeParam, int32_t>(Pooling::kSum, true, Store::kNonTemporal, 16); }

template <typename Fixture, typename Index>
void CheckUpdate(Pooling pooling, bool weighted, bool adagrad, Store store) {
  using Table = typename Fixture::Table;
  constexpr int64_t d = Fixture::d;
  constexpr double kLr = 0.5, kEps = 1e-8;
  const auto bags = MakeBags<Index>(53, 0, 41, 300, 5);
  std::vector<float> grad(53 * (d + 3));
  Xoshiro256pp rng(6);
  for (float& g : grad) g = static_cast<float>(rng.Uniform() - 0.5);
  const ConstMatrixView gv(grad.data(), 53, d, d + 3);
  const std::span<const float> weights = weighted ? std::span<const float>(bags.weights) : std::span<const float>();
  const auto g = reference::TableGradient<Index>(d, bags.offsets, bags.indices, weights, pooling, grad.data(), d + 3);

  for (Isa isa : AvailableIsas()) {
    SCOPED_TRACE(IsaName(isa));
    const Table table = MakeTable<Table>(300, d, 7);
    reference::Rows expected = reference::Snapshot(table);
    std::vector<double> expected_state(300, 0.0);
    RowwiseAdagradState state(300);
    auto kernels = TableKernels<Table>::Create(table, {.isa = isa});
    ASSERT_TRUE(kernels.ok());
    UpdatePlan plan;
    ASSERT_TRUE(reindex(table.name(), table.nvectors(), Bags<Index>{bags.offsets, bags.indices, weights}, pooling,
                        &plan).ok());
    const UpdateOptions options{.learning_rate = static_cast<float>(kLr), .store = store,
                                .eps = static_cast<float>(kEps)};
    if (adagrad) {
      ASSERT_TRUE(kernels->rowwise_adagrad_update(plan, gv, state, options).ok());
      reference::ApplyAdagrad(expected, expected_state, g, kLr, kEps);
    } else {
      ASSERT_TRUE(kernels->sgd_update(plan, gv, options).ok());
      reference::ApplySgd(expected, g, kLr);
    }
    const reference::Rows got = reference::Snapshot(table);
    for (int64_t r = 0; r < 300; ++r) {
      for (int64_t c = 0; c < d; ++c) {
        ASSERT_NEAR(got.at(r, c), expected.at(r, c), UpdateTolerance<typename Table::value_type>(expected.at(r, c)))
            << "row " << r << " col " << c << (g.count(r) ? " (updated)" : " (untouched)");
      }
      if (adagrad) {
        ASSERT_NEAR(state.values()[r], expected_state[r], 1e-5 * (1 + expected_state[r]));
      }
    }
  }
}

TYPED_TEST(KernelsTest, SgdMatchesReference) { CheckUpdate<TypeParam, int32_t>(Pooling::kSum, false, false, Store::kStandard); }
TYPED_TEST(KernelsTest, SgdMeanWeightedMatchesReference) { CheckUpdate<TypeParam, int64_t>(Pooling::kMean, true, false, Store::kStandard); }
TYPED_TEST(KernelsTest, SgdNonTemporalMatchesReference) { CheckUpdate<TypeParam, int32_t>(Pooling::kSum, true, false, Store::kNonTemporal); }
TYPED_TEST(KernelsTest, AdagradMatchesReference) { CheckUpdate<TypeParam, int32_t>(Pooling::kSum, true, true, Store::kStandard); }

// Element-wise AdaGrad: the accumulators after each row's features, two
// updates (the second adds to the first's squares), duplicate rows' gradients
// summed first; rows and accumulators of rows not in the batch untouched.
template <typename Fixture>
void CheckElementwiseAdagrad(bool weighted, Store store = Store::kStandard) {
  using Table = typename Fixture::Table;
  constexpr int64_t d = Fixture::d;
  constexpr int64_t n = 300;
  constexpr double kLr = 0.05, kEps = 1e-8;
  for (Isa isa : AvailableIsas()) {
    SCOPED_TRACE(IsaName(isa));
    absl::StatusOr<Table> table = Table::Create({.name = "t", .nvectors = n, .featuresize = d, .state_floats = d});
    ASSERT_TRUE(table.ok()) << table.status();
    InitUniform(*table, 7);
    ASSERT_EQ(table->row_bytes(), d * sizeof(typename Table::value_type) + d * sizeof(float));
    reference::Rows expected_state{n, d, std::vector<double>(n * d, 0.0)};
    auto kernels = TableKernels<Table>::Create(*table, {.isa = isa});
    ASSERT_TRUE(kernels.ok());
    reference::Rows expected;
    for (uint64_t step = 0; step < 2; ++step) {
      expected = reference::Snapshot(*table);  // bf16: each step from the rounded rows
      const auto bags = MakeBags<int32_t>(53, 0, 41, n, 5 + step);
      std::vector<float> grad(53 * (d + 3));
      Xoshiro256pp rng(6 + step);
      for (float& g : grad) g = static_cast<float>(rng.Uniform() - 0.5);
      const ConstMatrixView gv(grad.data(), 53, d, d + 3);
      const std::span<const float> weights = weighted ? std::span<const float>(bags.weights) : std::span<const float>();
      const auto g = reference::TableGradient<int32_t>(d, bags.offsets, bags.indices, weights, Pooling::kSum,
                                                      grad.data(), d + 3);
      UpdatePlan plan;
      ASSERT_TRUE(reindex(table->name(), n, Bags<int32_t>{bags.offsets, bags.indices, weights}, Pooling::kSum, &plan).ok());
      const absl::Status s = kernels->adagrad_update(
          plan, gv, {.learning_rate = static_cast<float>(kLr), .store = store, .eps = static_cast<float>(kEps)});
      ASSERT_TRUE(s.ok()) << s;
      reference::ApplyElementwiseAdagrad(expected, expected_state, g, kLr, kEps);
      const reference::Rows got = reference::Snapshot(*table);
      for (int64_t r = 0; r < n; ++r) {
        const float* state = RowState(table->rowpointer(r, Access::kRead), d);
        for (int64_t c = 0; c < d; ++c) {
          ASSERT_NEAR(got.at(r, c), expected.at(r, c), UpdateTolerance<typename Table::value_type>(expected.at(r, c)))
              << "step " << step << " row " << r << " col " << c;
          ASSERT_NEAR(state[c], expected_state.at(r, c), 1e-5 * (1 + expected_state.at(r, c)))
              << "step " << step << " row " << r << " col " << c;
        }
      }
    }
  }
}

TYPED_TEST(KernelsTest, ElementwiseAdagradMatchesReference) { CheckElementwiseAdagrad<TypeParam>(false); }
TYPED_TEST(KernelsTest, ElementwiseAdagradWeightedMatchesReference) { CheckElementwiseAdagrad<TypeParam>(true); }
TYPED_TEST(KernelsTest, ElementwiseAdagradNonTemporalMatchesReference) {
  CheckElementwiseAdagrad<TypeParam>(true, Store::kNonTemporal);
}

// A table without an accumulator per element is refused, and left as it was.
TYPED_TEST(KernelsTest, ElementwiseAdagradNeedsTheStateWithTheRows) {
  using Table = typename TestFixture::Table;
  const Table table = MakeTable<Table>(this->kRows, TypeParam::d, 1);
  const reference::Rows before = reference::Snapshot(table);
  auto kernels = TableKernels<Table>::Create(table);
  ASSERT_TRUE(kernels.ok());
  const auto bags = MakeBags<int32_t>(4, 1, 3, this->kRows, 2);
  UpdatePlan plan;
  ASSERT_TRUE(reindex(table.name(), this->kRows, bags.bags(false), Pooling::kSum, &plan).ok());
  std::vector<float> grad(4 * TypeParam::d, 1.0f);
  const absl::Status s = kernels->adagrad_update(plan, ConstMatrixView(grad.data(), 4, TypeParam::d, TypeParam::d), {});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("element-wise AdaGrad"), std::string::npos) << s;
  EXPECT_EQ(reference::Snapshot(table).v, before.v);
}

TYPED_TEST(KernelsTest, ChoosesSpecialisedKernelForListedSizes) {
  using Table = typename TestFixture::Table;
  const Table table = MakeTable<Table>(4, TypeParam::d, 1);
  const bool common = internal::IsSpecialisedFeatureSize(TypeParam::d);
  for (Isa isa : AvailableIsas()) {
    auto kernels = TableKernels<Table>::Create(table, {.isa = isa});
    ASSERT_TRUE(kernels.ok());
    EXPECT_EQ(kernels->isa(), isa);
    EXPECT_EQ(kernels->specialised_size(), isa != Isa::kGeneric && common ? TypeParam::d : 0)
        << kernels->description();
  }
}

}  // namespace
}  // namespace cemb
