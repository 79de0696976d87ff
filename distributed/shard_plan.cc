#include "distributed/shard_plan.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/human.h"
#include "data/loader.h"

namespace cemb::distributed {
namespace {

absl::Status CheckCosts(std::span<const TableCost> tables, int num_ranks) {
  if (num_ranks < 1) return absl::InvalidArgumentError(absl::StrCat("ShardPlan: ", num_ranks, " ranks"));
  for (size_t t = 0; t < tables.size(); ++t) {
    if (tables[t].bytes < 0 || !(tables[t].lookups_per_step >= 0) || !std::isfinite(tables[t].lookups_per_step)) {
      return absl::InvalidArgumentError(absl::StrCat("ShardPlan: table ", t, " has bytes ", tables[t].bytes,
                                                     " and lookups per step ", tables[t].lookups_per_step));
    }
  }
  return absl::OkStatus();
}

// Each table's shares of all bytes and of all lookups.
void Shares(std::span<const TableCost> tables, std::vector<double>* b, std::vector<double>* l) {
  double bytes = 0, lookups = 0;
  for (const TableCost& c : tables) {
    bytes += static_cast<double>(c.bytes);
    lookups += c.lookups_per_step;
  }
  b->resize(tables.size());
  l->resize(tables.size());
  for (size_t t = 0; t < tables.size(); ++t) {
    (*b)[t] = bytes > 0 ? static_cast<double>(tables[t].bytes) / bytes : 0.0;
    (*l)[t] = lookups > 0 ? tables[t].lookups_per_step / lookups : 0.0;
  }
}

}  // namespace

absl::StatusOr<ShardPlan> ShardPlan::Create(std::span<const TableCost> tables, int num_ranks) {
  if (absl::Status s = CheckCosts(tables, num_ranks); !s.ok()) return s;
  std::vector<double> b, l;
  Shares(tables, &b, &l);
  std::vector<int> order(tables.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) {
    const double mx = std::max(b[x], l[x]), my = std::max(b[y], l[y]);
    if (mx != my) return mx > my;
    return b[x] + l[x] > b[y] + l[y];  // stable: then the lower index
  });
  std::vector<double> rank_b(num_ranks, 0.0), rank_l(num_ranks, 0.0);
  std::vector<int> owners(tables.size(), 0);
  for (int t : order) {
    int best = 0;
    double best_max = 0, best_sum = 0;
    for (int r = 0; r < num_ranks; ++r) {
      const double m = std::max(rank_b[r] + b[t], rank_l[r] + l[t]);
      const double s = rank_b[r] + rank_l[r];
      if (r == 0 || m < best_max || (m == best_max && s < best_sum)) {
        best = r;
        best_max = m;
        best_sum = s;
      }
    }
    owners[t] = best;
    rank_b[best] += b[t];
    rank_l[best] += l[t];
  }
  return ShardPlan(tables, std::move(owners), num_ranks);
}

absl::StatusOr<ShardPlan> ShardPlan::FromOwners(std::span<const TableCost> tables, std::span<const int> owners,
                                                int num_ranks) {
  if (absl::Status s = CheckCosts(tables, num_ranks); !s.ok()) return s;
  if (owners.size() != tables.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ShardPlan: ", owners.size(), " owners for ", tables.size(), " tables"));
  }
  for (size_t t = 0; t < owners.size(); ++t) {
    if (owners[t] < 0 || owners[t] >= num_ranks) {
      return absl::InvalidArgumentError(
          absl::StrCat("ShardPlan: table ", t, " owned by rank ", owners[t], " of ", num_ranks));
    }
  }
  return ShardPlan(tables, std::vector<int>(owners.begin(), owners.end()), num_ranks);
}

ShardPlan::ShardPlan(std::span<const TableCost> tables, std::vector<int> owners, int num_ranks)
    : costs_(tables.begin(), tables.end()), owner_(std::move(owners)), local_index_(owner_.size()),
      tables_of_(num_ranks) {
  for (int t = 0; t < num_tables(); ++t) {
    local_index_[t] = static_cast<int>(tables_of_[owner_[t]].size());
    tables_of_[owner_[t]].push_back(t);
  }
}

int64_t ShardPlan::bytes_of(int rank) const {
  int64_t bytes = 0;
  for (int t : tables_of_[rank]) bytes += costs_[t].bytes;
  return bytes;
}

double ShardPlan::lookup_share(int rank) const {
  double mine = 0, all = 0;
  for (int t = 0; t < num_tables(); ++t) {
    all += costs_[t].lookups_per_step;
    if (owner_[t] == rank) mine += costs_[t].lookups_per_step;
  }
  return all > 0 ? mine / all : 0.0;
}

std::string ShardPlan::Describe(int rank) const {
  if (tables_of_[rank].empty()) return absl::StrCat("rank ", rank, ": no tables");
  return absl::StrFormat("rank %d: table%s %s (%s, %.0f%% of lookups)", rank, tables_of_[rank].size() > 1 ? "s" : "",
                         absl::StrJoin(tables_of_[rank], ","), HumanBytes(static_cast<double>(bytes_of(rank))),
                         100.0 * lookup_share(rank));
}

absl::StatusOr<std::vector<int64_t>> LocalBatchSizes(std::span<const int64_t> global_sizes, int ranks) {
  std::vector<int64_t> sizes;
  for (int64_t g : global_sizes) {
    if (g < ranks) {
      return absl::InvalidArgumentError(absl::StrCat("a batch of ", g, " samples cannot be split over ", ranks,
                                                     " ranks: every rank needs a sample"));
    }
    for (int r : {0, ranks - 1}) {  // the largest slice and the smallest
      sizes.push_back(data::SliceOf(static_cast<uint32_t>(g), static_cast<uint32_t>(r), static_cast<uint32_t>(ranks)).size);
    }
  }
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  return sizes;
}

std::vector<TableCost> TableCosts(std::span<const uint64_t> rows, int64_t row_bytes, int64_t batch_size,
                                  std::span<const uint32_t> hotness) {
  std::vector<TableCost> costs;
  for (size_t t = 0; t < rows.size(); ++t) {
    const auto n = static_cast<int64_t>(rows[t]);
    costs.push_back({.bytes = n * row_bytes,
                     .lookups_per_step = static_cast<double>(batch_size) * hotness[t]});
  }
  return costs;
}

}  // namespace cemb::distributed
