// Where one embedding table's rows live, chosen per table: one list of the
// storage kinds, and MakeStoredTable, which turns a kind and its sizes into
// a table.
//
//   "dram"     SimpleTable in DRAM                      (no slow tier)
//   "simple"   SimpleTable on the slow tier             (thesis policy "simple": no cache, no indirection)
//   "static"   CachedTable, policy kStatic, on the slow tier: fill it after initialising
//              the rows (fill_random(seed), or fill(profiler.hottest(capacity_rows())))
//   "dynamic"  CachedTable, policy kDynamic, on the slow tier: flush_dirty() when isfull()
//   "ssd"      SsdTable (ssd/ssd_table.h): rows in a file under the slow tier's directory,
//              read and written in blocks with io_uring; DRAM holds ssd.capacity_bytes of
//              slots. Each step Prefetch(k, rows) before the lookups, WaitResident(k),
//              Unpin(k) after the update (tables/step_cycle.h does it for a table set).
//
// StoredTable<T, D> is a std::variant of the three table types; std::visit
// reaches the table (all satisfy RowTable). cache/ and ssd/ are siblings
// that know nothing of each other; this layer names them both.
//
// Example:
//   CEMB_ASSIGN_OR_RETURN(StorageKind kind, ParseStorageKind(yaml["storage"]));
//   StorageConfig config{.kind = kind, .slow_tier = TierOptions::Pmem("/mnt/pmem0"),
//                        .cache = {.lower = CacheSize::Fraction(0.1)}};
//   CEMB_ASSIGN_OR_RETURN(auto table, (MakeStoredTable<float, 128>({.name = "t0", .nvectors = n}, config)));
//   CEMB_RETURN_IF_ERROR(std::visit([&](auto& t) { return ensemble.add(t); }, table));
//   if (auto* c = std::get_if<CachedTable<float, 128>>(&table); c && c->isfull()) c->flush_dirty();
#ifndef CEMB_TABLES_STORAGE_H_
#define CEMB_TABLES_STORAGE_H_

#include <optional>
#include <string_view>
#include <variant>

#include "absl/status/statusor.h"
#include "base/enum_names.h"
#include "cache/cached_table.h"
#include "embedding/simple_table.h"
#include "ssd/ssd_table.h"

namespace cemb {

enum class StorageKind { kDram, kSimple, kStatic, kDynamic, kSsd };

inline constexpr EnumName<StorageKind> kStorageKindNames[] = {{StorageKind::kDram, "dram"},
                                                              {StorageKind::kSimple, "simple"},
                                                              {StorageKind::kStatic, "static"},
                                                              {StorageKind::kDynamic, "dynamic"},
                                                              {StorageKind::kSsd, "ssd"}};
inline const char* StorageKindName(StorageKind kind) { return NameOf(kStorageKindNames, kind); }
inline absl::StatusOr<StorageKind> ParseStorageKind(std::string_view name) {
  return ParseName(kStorageKindNames, name, "table storage");
}

struct StorageConfig {
  StorageKind kind = StorageKind::kDram;
  TierOptions slow_tier;  // simple, static, dynamic
  CacheOptions cache;     // static, dynamic (its policy is set from kind)
  SsdOptions ssd;         // ssd: capacity_bytes (the DRAM slots), file.directory, init_seed
};

// The DRAM cache of a static or dynamic storage: config.cache with its
// policy from the kind. None for the other kinds.
inline std::optional<CacheOptions> CacheOptionsOf(const StorageConfig& config) {
  if (config.kind != StorageKind::kStatic && config.kind != StorageKind::kDynamic) return std::nullopt;
  CacheOptions cache = config.cache;
  cache.policy = config.kind == StorageKind::kStatic ? CachePolicy::kStatic : CachePolicy::kDynamic;
  return cache;
}

template <StorageType T, int64_t D = kDynamic>
using StoredTable = std::variant<SimpleTable<T, D>, CachedTable<T, D>, SsdTable<T, D>>;

// `table.tier` is ignored: the config says where the rows live.
template <StorageType T, int64_t D = kDynamic>
[[nodiscard]] absl::StatusOr<StoredTable<T, D>> MakeStoredTable(TableOptions table, const StorageConfig& config) {
  if (config.kind == StorageKind::kSsd) {
    absl::StatusOr<SsdTable<T, D>> t = SsdTable<T, D>::Create(table, config.ssd);
    if (!t.ok()) return t.status();
    return StoredTable<T, D>(std::in_place_index<2>, *std::move(t));
  }
  table.tier = config.kind == StorageKind::kDram ? TierOptions::Dram() : config.slow_tier;
  if (config.kind == StorageKind::kDram || config.kind == StorageKind::kSimple) {
    absl::StatusOr<SimpleTable<T, D>> t = SimpleTable<T, D>::Create(table);
    if (!t.ok()) return t.status();
    return StoredTable<T, D>(std::in_place_index<0>, *std::move(t));
  }
  absl::StatusOr<CachedTable<T, D>> t = CachedTable<T, D>::Create(table, *CacheOptionsOf(config));
  if (!t.ok()) return t.status();
  return StoredTable<T, D>(std::in_place_index<1>, *std::move(t));
}

}  // namespace cemb

#endif  // CEMB_TABLES_STORAGE_H_
