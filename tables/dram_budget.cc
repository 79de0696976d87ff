#include "tables/dram_budget.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/human.h"

namespace cemb {
namespace {

std::string Human(int64_t b) { return HumanBytes(static_cast<double>(b)); }

// One table taking part, in rows of DRAM.
struct Part {
  int table = 0;
  bool ssd = false;
  int64_t rows = 0;        // the table's
  int64_t unit = 0;        // DRAM bytes of one row held (ssd: the slot)
  int64_t cost = 0;        // unit + per-slot metadata
  int64_t fixed = 0;       // metadata bytes whatever the size
  int64_t per_batch = 0;   // distinct rows a batch may look up: batch_size x hotness
  int64_t held = 0;        // rows it holds (the result)
  int64_t by_traffic = 0;  // of which by traffic
  const std::vector<uint32_t>* counts = nullptr;  // sampled, hottest first
};

}  // namespace

absl::StatusOr<DramSplit> SplitDramBudget(const DramBudgetRequest& request, const TableTraffic* traffic,
                                          std::span<const BudgetTable> tables) {
  if (!request.hotness.empty() && request.hotness.size() != tables.size()) {
    return absl::InvalidArgumentError(absl::StrCat(request.where, "a hotness for ", request.hotness.size(),
                                                   " tables, but ", tables.size(), " tables"));
  }
  std::vector<Part> parts;
  int64_t given_caches = 0;  // cached tables whose size the config gives
  for (size_t t = 0; t < tables.size(); ++t) {
    const EmbeddingTableSpec& spec = *tables[t].spec;
    const int64_t row_bytes = tables[t].row_bytes;
    const StorageKind kind = spec.storage.kind;
    const bool cached = kind == StorageKind::kStatic || kind == StorageKind::kDynamic;
    const bool given = t < request.cache_size_given.size() && request.cache_size_given[t];
    if (cached && given) {
      const int64_t bytes = spec.rows * row_bytes;
      given_caches += spec.storage.cache.lower.Resolve(bytes) + spec.storage.cache.slack.Resolve(bytes) +
                      CacheFixedDramBytes(spec.rows);
      continue;
    }
    if (kind != StorageKind::kSsd && !cached) continue;
    const uint32_t hotness = request.hotness.empty() ? 1 : std::max<uint32_t>(1, request.hotness[t]);
    Part p{.table = static_cast<int>(t), .ssd = kind == StorageKind::kSsd, .rows = spec.rows,
           .per_batch = request.batch_size * static_cast<int64_t>(hotness)};
    p.unit = SlotBytes(row_bytes);  // a cache counts its rows in slots too
    if (p.ssd) {
      p.cost = p.unit + kSsdSlotMetadataBytes;
      p.held = std::min(spec.rows, (request.prefetch_batches + 1) * p.per_batch);
      p.fixed = SsdFixedDramBytes(spec.rows, row_bytes, spec.storage.ssd, /*evicts=*/p.held < spec.rows);
    } else {
      p.cost = p.unit + kCacheSlotMetadataBytes;
      p.fixed = CacheFixedDramBytes(spec.rows);
      p.held = std::min(spec.rows, p.per_batch + 1);
    }
    if (traffic != nullptr && t < traffic->counts.size()) p.counts = &traffic->counts[t];
    parts.push_back(p);
  }
  DramSplit split;
  if (parts.empty()) return split;

  // 1. What every table needs.
  int64_t need = given_caches;
  for (const Part& p : parts) need += p.fixed + p.held * p.cost;
  if (request.budget < need) {
    int nssd = 0;
    int64_t ssd_batch = 0, cached_batch = 0;  // the most rows a batch looks up in one table
    for (const Part& p : parts) {
      if (p.ssd) {
        ++nssd;
        ssd_batch = std::max(ssd_batch, p.per_batch);
      } else {
        cached_batch = std::max(cached_batch, p.per_batch);
      }
    }
    const size_t ncached = parts.size() - static_cast<size_t>(nssd);
    std::vector<std::string> what;
    if (nssd > 0) {
      what.push_back(absl::StrCat("the rows that ", nssd, " ssd table(s) pin at once: ", request.prefetch_name, " + 1 = ",
                                  request.prefetch_batches + 1, " batches of up to ", ssd_batch,
                                  " distinct rows (batch_size x hotness) per table, plus their maps and log buffers"));
    }
    if (ncached > 0) {
      what.push_back(absl::StrCat(ncached, " cached table(s) without a cache size: ", cached_batch + 1,
                                  " rows each (a batch of admissions and one more), plus their pointer words"));
    }
    if (given_caches > 0) what.push_back(absl::StrCat("the caches the config sizes (", Human(given_caches), ")"));
    return absl::InvalidArgumentError(absl::StrCat(request.where, Human(request.budget), " (", request.budget,
                                                   " bytes", request.budget_text, ") cannot hold ",
                                                   absl::StrJoin(what, "; and "), ": it needs at least ", need,
                                                   " bytes (", Human(need), ")"));
  }
  int64_t left = request.budget - need;

  // 2. By traffic: sampled rows hottest first, by lookups per byte. The
  // rows already held (step 1) count as the table's hottest.
  if (traffic != nullptr && traffic->samples > 0) {
    split.sampled = traffic->samples;
    struct Candidate {
      double value;  // sampled lookups per DRAM byte
      size_t part;
    };
    std::vector<Candidate> candidates;
    for (size_t i = 0; i < parts.size(); ++i) {
      const Part& p = parts[i];
      if (p.counts == nullptr) continue;
      for (size_t k = static_cast<size_t>(p.held); k < p.counts->size() && static_cast<int64_t>(k) < p.rows; ++k) {
        candidates.push_back({static_cast<double>((*p.counts)[k]) / static_cast<double>(p.cost), i});
      }
    }
    // Equal values keep table order (a stable sort), so the result does
    // not depend on the sort's implementation.
    std::stable_sort(candidates.begin(), candidates.end(),
                     [](const Candidate& a, const Candidate& b) { return a.value > b.value; });
    for (const Candidate& c : candidates) {
      Part& p = parts[c.part];
      if (left < p.cost) break;
      left -= p.cost;
      ++p.held;
      ++p.by_traffic;
    }
  }

  // 3. The rest by size, capped at every row (water-filling).
  for (int round = 0; round < 64; ++round) {
    double weight = 0;
    for (const Part& p : parts) {
      if (p.held < p.rows && left >= p.cost) weight += static_cast<double>(p.rows * p.unit);
    }
    if (weight == 0) break;
    int64_t handed = 0;
    const int64_t pot = left;
    for (Part& p : parts) {
      if (p.held >= p.rows || left < p.cost) continue;
      const double share = static_cast<double>(pot) * static_cast<double>(p.rows * p.unit) / weight;
      const int64_t add = std::min({std::max<int64_t>(1, static_cast<int64_t>(share) / p.cost), p.rows - p.held,
                                    left / p.cost});
      p.held += add;
      left -= add * p.cost;
      handed += add;
    }
    if (handed == 0) break;
  }

  for (const Part& p : parts) {
    StorageConfig& s = tables[static_cast<size_t>(p.table)].spec->storage;
    DramShare share{.table = p.table, .bytes = p.held * p.unit, .by_traffic = p.by_traffic * p.unit,
                    .sampled_hit_rate = NAN};
    if (p.ssd) {
      s.ssd.capacity_bytes = share.bytes;
    } else {
      // The slack holds one batch's admissions; the rest (at least a row)
      // is the lower mark.
      const int64_t slack = std::min(p.held - 1, p.per_batch);
      s.cache.lower = CacheSize::Bytes((p.held - slack) * p.unit);
      s.cache.slack = CacheSize::Bytes(slack * p.unit);
    }
    if (p.counts != nullptr && !p.counts->empty()) {
      uint64_t covered = 0, all = 0;
      for (size_t k = 0; k < p.counts->size(); ++k) {
        all += (*p.counts)[k];
        if (static_cast<int64_t>(k) < p.held) covered += (*p.counts)[k];
      }
      share.sampled_hit_rate = static_cast<double>(covered) / static_cast<double>(all);
    }
    split.used += p.fixed + p.held * p.cost;
    split.shares.push_back(share);
  }
  split.used += given_caches;
  return split;
}

absl::StatusOr<DramSplit> SplitDramBudget(const DramBudgetRequest& request, const TableTraffic* traffic,
                                          EmbeddingLayerOptions& emb) {
  const int64_t row_bytes = EmbeddingRowBytes(emb.dim, emb.bf16_rows, emb.optimizer);
  std::vector<BudgetTable> tables;
  for (EmbeddingTableSpec& spec : emb.tables) tables.push_back({.spec = &spec, .row_bytes = row_bytes});
  return SplitDramBudget(request, traffic, tables);
}

}  // namespace cemb
