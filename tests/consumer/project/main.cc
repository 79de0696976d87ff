// A service that links cemb::embedding, cemb::cache and cemb::tables from
// the installed package: one pooled lookup on a DRAM table and the same on a
// cached table whose rows live on a slow-tier file; then a table set of
// three storage kinds (DRAM, a dynamic cache, the ssd tier) looked up and
// updated through the step protocol, against the same set all in DRAM.
// Exits non-zero if anything is off.
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cache/cached_table.h"
#include "embedding/kernels.h"
#include "embedding/simple_table.h"
#include "embedding/table_io.h"
#include "tables/embedding_layer.h"
#include "tables/step_cycle.h"

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

// Three steps of a made-up gradient on a set of `kinds`; returns table 2's
// row 9 (or nothing on an error, which it prints).
std::vector<float> TrainSet(const std::string& dir, bool all_dram) {
  cemb::EmbeddingLayerOptions o{.dim = 16, .threads = 1};
  for (cemb::StorageKind kind : {cemb::StorageKind::kDram, cemb::StorageKind::kDynamic, cemb::StorageKind::kSsd}) {
    cemb::StorageConfig s{.kind = all_dram ? cemb::StorageKind::kDram : kind,
                          .slow_tier = cemb::TierOptions::Pmem(dir),
                          .cache = {.lower = cemb::CacheSize::Fraction(0.1)}};
    s.ssd.capacity_bytes = 64 * 16 * 4;
    s.ssd.file.directory = dir;
    o.tables.push_back({.rows = 1000, .storage = s});
  }
  auto layer = cemb::EmbeddingLayer::Create(o);
  if (!layer.ok()) return std::fprintf(stderr, "%s\n", layer.status().ToString().c_str()), std::vector<float>{};
  cemb::StepCycle cycle(layer->get(), /*prefetch_batches=*/0);
  const std::vector<int32_t> offsets = {0, 2, 3};
  std::vector<float> out(2 * 3 * 16), row(16);
  for (int step = 0; step < 3; ++step) {
    const std::vector<int32_t> indices = {9, static_cast<int32_t>(100 + step), 9};
    const std::vector<cemb::Bags<int32_t>> bags(3, cemb::Bags<int32_t>{offsets, indices});
    absl::StatusOr<cemb::CheckedBatch> batch = cycle.Begin(step, bags, {});
    absl::Status s = batch.status();
    if (s.ok()) s = (*layer)->Lookup(*batch, cemb::MatrixView{out.data(), 2, 48, 48});
    if (s.ok()) s = (*layer)->Update(*batch, cemb::ConstMatrixView{out.data(), 2, 48, 48}, 0.5f);
    if (s.ok()) s = cycle.End(step);
    if (!s.ok()) return std::fprintf(stderr, "%s\n", s.ToString().c_str()), std::vector<float>{};
  }
  if (absl::Status s = (*layer)->ReadRow(2, 9, row); !s.ok()) {
    return std::fprintf(stderr, "%s\n", s.ToString().c_str()), std::vector<float>{};
  }
  return row;
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
  if (!PoolTwice(*dram) || !PoolTwice(*cached)) return 1;
  const std::vector<float> mixed = TrainSet(dir, false), in_dram = TrainSet(dir, true);
  std::printf("consumer: table set of dram, dynamic, ssd; ssd row 9[0] = %g (all in DRAM: %g)\n",
              mixed.empty() ? 0.0f : mixed[0], in_dram.empty() ? 0.0f : in_dram[0]);
  return !mixed.empty() && mixed == in_dram ? 0 : 1;
}
