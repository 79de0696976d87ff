// A service that links cemb::embedding and cemb::cache from the installed
// package: one pooled lookup on a DRAM table and the same on a cached table
// whose rows live on a slow-tier file. Exits non-zero if anything is off.
#include <cstdio>
#include <filesystem>
#include <vector>

#include "cache/cached_table.h"
#include "embedding/kernels.h"
#include "embedding/simple_table.h"
#include "embedding/table_io.h"

namespace {

// Pools bag {7, 7} and checks the result is twice row 7.
template <typename Table>
bool PoolTwice(Table& table) {
  cemb::InitUniform(table, 42);
  auto kernels = cemb::TableKernels<Table>::Create(table);
  if (!kernels.ok()) return std::fprintf(stderr, "%s\n", kernels.status().ToString().c_str()), false;
  const std::vector<int32_t> offsets = {0, 2}, indices = {7, 7};
  std::vector<float> out(64);
  absl::Status s = kernels->pooled_lookup(cemb::Bags<int32_t>{offsets, indices},
                                          cemb::MatrixView{out.data(), 1, 64, 64});
  if (!s.ok()) return std::fprintf(stderr, "%s\n", s.ToString().c_str()), false;
  const float expected = 2 * table.rowpointer(7)[5];
  std::printf("consumer: %s; out[5] = %g (expected %g)\n", kernels->description().c_str(), out[5],
              expected);
  return out[5] == expected;
}

}  // namespace

int main() {
  auto dram = cemb::SimpleTable<float, 64>::Create({.name = "service", .nvectors = 1000});
  if (!dram.ok()) return std::fprintf(stderr, "%s\n", dram.status().ToString().c_str()), 1;
  const std::string dir = std::filesystem::temp_directory_path().string();
  auto cached = cemb::CachedTable<float, 64>::Create(
      {.name = "service_cached", .nvectors = 1000, .tier = cemb::TierOptions::Pmem(dir)},
      {.lower = cemb::CacheSize::Fraction(0.1)});
  if (!cached.ok()) return std::fprintf(stderr, "%s\n", cached.status().ToString().c_str()), 1;
  return PoolTwice(*dram) && PoolTwice(*cached) ? 0 : 1;
}
