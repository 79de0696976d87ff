// Memory tiers: where the rows of a table live.
//
// A `Region` is one large, owned, mapped range of bytes on a tier:
//   - DRAM: anonymous memory, 64-byte aligned; by default 2 MiB aligned and
//     advised to transparent huge pages (madvise(MADV_HUGEPAGE)), which makes
//     random row gathers about 1.6x faster on the machines we measured.
//   - PMem: a file mapped through PMDK libpmem2. On device-DAX or a DAX file
//     system the mapping is byte-addressable persistent memory; on any other
//     file system it is an ordinary shared file mapping (the "slow tier" of a
//     machine without Optane or CXL), and `persist()` makes it durable through
//     libpmem2's persist function (msync underneath).
//
// Ownership: a Region owns its mapping (and, for PMem, the pmem2 config,
// source, map and file descriptor) and releases all of it on destruction.
// Regions are movable, not copyable.
//
// Thread safety: data() may be read and written from any number of threads;
// persist() may be called concurrently on disjoint ranges.
//
// Example:
//   CEMB_ASSIGN_OR_RETURN(Region r, Region::Allocate(TierOptions::Pmem("/mnt/pmem0/t0"), 1 << 30));
//   std::memcpy(r.data(), src, 4096);
//   r.persist(r.data(), 4096);
#ifndef CEMB_EMBEDDING_MEMORY_H_
#define CEMB_EMBEDDING_MEMORY_H_

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace cemb {

enum class TierKind { kDram, kPmem };

// Where and how a region is allocated.
struct TierOptions {
  TierKind kind = TierKind::kDram;
  // DRAM: align to 2 MiB and madvise(MADV_HUGEPAGE).
  bool huge_pages = true;
  // PMem: a device-DAX path, a file (created if absent, grown to the size if
  // smaller), or a directory (an unnamed temporary file is made inside it and
  // vanishes with the region).
  std::string path;
  // PMem: remove a named file when the region is destroyed.
  bool remove_on_close = false;
  // PMem on a file system without DAX (page store granularity): persist()
  // means msync, a synchronous write to the device, so it is done only when
  // the rows must survive a crash by themselves. Leave it off when the slow
  // tier is working memory (durability then comes from checkpoints). A DAX
  // mapping always persists: there it is a cache-line flush, and cheap.
  bool durable = false;

  static TierOptions Dram(bool huge_pages = true) {
    TierOptions t;
    t.huge_pages = huge_pages;
    return t;
  }
  static TierOptions Pmem(std::string path) {
    TierOptions t;
    t.kind = TierKind::kPmem;
    t.path = std::move(path);
    return t;
  }
};

// "dram", "dram(no huge pages)", "pmem:/path".
std::string TierName(const TierOptions& tier);

class Region {
 public:
  // Maps `bytes` bytes (> 0) on `tier`. The memory reads as zero.
  // Errors (never a crash): a zero size, a missing directory, no space, a
  // file that cannot be mapped; the message carries libpmem2's own words.
  [[nodiscard]] static absl::StatusOr<Region> Allocate(const TierOptions& tier,
                                                       size_t bytes);

  Region();
  ~Region();
  Region(Region&&) noexcept;
  Region& operator=(Region&&) noexcept;
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

  std::byte* data() const;  // 64-byte aligned (2 MiB with huge pages)
  size_t size() const;
  TierKind kind() const;
  // True when persist() does work: a DAX mapping, or a file region with
  // TierOptions::durable.
  bool persistent() const;

  // Makes stores to [addr, addr+len) durable. A no-op on DRAM.
  // REQUIRES: the range lies inside this region.
  void persist(const void* addr, size_t len) const;

  struct Impl;  // the tier's mapping; defined in memory.cc

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace cemb

#endif  // CEMB_EMBEDDING_MEMORY_H_
