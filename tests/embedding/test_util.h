// Helpers shared by the embedding tests: tables with known rows, random bags,
// sentinel-padded outputs, and the ISAs this machine can run.
#ifndef CEMB_TESTS_EMBEDDING_TEST_UTIL_H_
#define CEMB_TESTS_EMBEDDING_TEST_UTIL_H_

#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/random.h"
#include "embedding/cpu.h"
#include "embedding/simple_table.h"
#include "embedding/table_io.h"
#include "gtest/gtest.h"

namespace cemb::testing {

inline constexpr float kSentinel = -12345.0f;

inline std::vector<Isa> AvailableIsas() {
  std::vector<Isa> isas;
  for (Isa isa : {Isa::kGeneric, Isa::kAvx2, Isa::kAvx512}) {
    if (IsaAvailable(isa)) isas.push_back(isa);
  }
  return isas;
}

template <typename Table>
Table MakeTable(int64_t nvectors, int64_t d, uint64_t seed, TierOptions tier = TierOptions::Dram(false)) {
  auto table = Table::Create({.name = absl::StrCat("t", seed), .nvectors = nvectors, .featuresize = d,
                              .tier = tier});
  EXPECT_TRUE(table.ok()) << table.status();
  InitUniform(*table, seed);
  return *std::move(table);
}

// CSR bags with lengths in [min_len, max_len] and uniform rows.
template <typename Index>
struct RandomBags {
  std::vector<Index> offsets, indices;
  std::vector<float> weights;
  Bags<Index> bags(bool weighted) const {
    return {offsets, indices, weighted ? std::span<const float>(weights) : std::span<const float>()};
  }
};

template <typename Index>
RandomBags<Index> MakeBags(int64_t nbags, int min_len, int max_len, int64_t nvectors, uint64_t seed) {
  Xoshiro256pp rng(seed);
  RandomBags<Index> r;
  r.offsets.push_back(0);
  for (int64_t b = 0; b < nbags; ++b) {
    const int len = min_len + static_cast<int>(rng.Below(max_len - min_len + 1));
    for (int j = 0; j < len; ++j) {
      // Half of the draws come from a few hot rows, so bags repeat rows.
      const bool hot = rng.Below(2) == 0;
      r.indices.push_back(static_cast<Index>(hot ? rng.Below(std::min<int64_t>(8, nvectors)) : rng.Below(nvectors)));
      r.weights.push_back(static_cast<float>(rng.Uniform() * 2.0 - 0.5));
    }
    r.offsets.push_back(static_cast<Index>(r.indices.size()));
  }
  return r;
}

// A rows x cols output padded with `pad` extra columns and 2 extra rows, all
// holding kSentinel.
struct PaddedMatrix {
  PaddedMatrix(int64_t rows, int64_t cols, int64_t pad = 5)
      : rows(rows), cols(cols), ld(cols + pad), data((rows + 2) * (cols + pad), kSentinel) {}
  MatrixView view() { return {data.data(), rows, cols, ld}; }
  float at(int64_t r, int64_t c) const { return data[r * ld + c]; }
  // True when nothing outside rows x cols was written.
  bool SentinelsIntact() const {
    for (int64_t r = 0; r < rows + 2; ++r) {
      for (int64_t c = 0; c < ld; ++c) {
        if ((r >= rows || c >= cols) && data[r * ld + c] != kSentinel) return false;
      }
    }
    return true;
  }
  int64_t rows, cols, ld;
  std::vector<float> data;
};

}  // namespace cemb::testing

#endif  // CEMB_TESTS_EMBEDDING_TEST_UTIL_H_
