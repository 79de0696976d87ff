// A service that links cemb::embedding from the installed package and runs
// one pooled lookup. Exits non-zero if anything is off.
#include <cstdio>
#include <vector>

#include "embedding/kernels.h"
#include "embedding/simple_table.h"
#include "embedding/table_io.h"

int main() {
  using Table = cemb::SimpleTable<float, 64>;
  auto table = Table::Create({.name = "service", .nvectors = 1000});
  if (!table.ok()) return std::fprintf(stderr, "%s\n", table.status().ToString().c_str()), 1;
  cemb::InitUniform(*table, 42);
  auto kernels = cemb::TableKernels<Table>::Create(*table);
  if (!kernels.ok()) return 1;
  const std::vector<int32_t> offsets = {0, 2}, indices = {7, 7};
  std::vector<float> out(64);
  absl::Status s = kernels->pooled_lookup(cemb::Bags<int32_t>{offsets, indices}, cemb::MatrixView{out.data(), 1, 64, 64});
  if (!s.ok()) return 1;
  const float expected = 2 * table->rowpointer(7)[5];
  std::printf("consumer: %s; out[5] = %g (expected %g)\n", kernels->description().c_str(), out[5], expected);
  return out[5] == expected ? 0 : 1;
}
