// Memory tiers: where the rows of a table live.
//
// A `Region` is one large, owned, mapped range of bytes on a tier:
//   - DRAM: anonymous memory, 64-byte aligned; by default 2 MiB aligned and
//     advised to transparent huge pages (madvise(MADV_HUGEPAGE)), which makes
//     random row gathers faster (docs/library.md, "Tiers").
//   - PMem: a file mapped through PMDK libpmem2. On device-DAX or a DAX file
//     system the mapping is byte-addressable persistent memory; on any other
//     file system it is an ordinary shared file mapping (the "slow tier" of a
//     machine without Optane or CXL), and `persist()` makes it durable through
//     libpmem2's persist function (msync underneath).
//     The file is one of two kinds, and never a guess from the path:
//       TierOptions::Pmem(dir)          an unnamed temporary file (O_TMPFILE)
//                                       in an existing directory: reads as
//                                       zero, vanishes with the region, leaves
//                                       nothing behind. `dir` may also be a
//                                       device-DAX device, zeroed when mapped.
//       TierOptions::PmemFile(path, m)  a file the user names on purpose, to
//                                       reopen a table: FileMode m says whether
//                                       it is made new (reads as zero) or
//                                       reopened (its contents are kept).
//     A path that does not exist is NotFound for Pmem(); no named file is
//     ever made from a mistyped directory.
//
// Ownership: a Region owns its mapping (and, for PMem, the pmem2 config,
// source, map and file descriptor) and releases all of it on destruction.
// Regions are movable, not copyable.
//
// Thread safety: data() may be read and written from any number of threads;
// persist() may be called concurrently on disjoint ranges.
//
// Example:
//   CEMB_ASSIGN_OR_RETURN(Region r, Region::Allocate(TierOptions::Pmem("/mnt/pmem0"), 1 << 30));
//   std::memcpy(r.data(), src, 4096);
//   r.persist(r.data(), 4096);
//   // A table to reopen in the next run: contents kept, made on the first run.
//   TierOptions t0 = TierOptions::PmemFile("/mnt/pmem0/t0.rows", FileMode::kCreateOrReopen);
#ifndef CEMB_EMBEDDING_MEMORY_H_
#define CEMB_EMBEDDING_MEMORY_H_

#include <cstddef>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace cemb {

enum class TierKind { kDram, kPmem };

// A named PMem file (TierOptions::PmemFile): made new, or reopened.
enum class FileMode {
  kCreate,          // must not exist (AlreadyExists otherwise); reads as zero
  kReopen,          // must exist (NotFound otherwise); its contents are kept,
                    // and a file shorter than the region is grown with zeros
  kCreateOrReopen,  // kReopen when it exists, kCreate when it does not
};

// Where and how a region is allocated.
struct TierOptions {
  TierKind kind = TierKind::kDram;
  // DRAM: align to 2 MiB and madvise(MADV_HUGEPAGE).
  bool huge_pages = true;
  // PMem without `file`: an existing directory (an unnamed temporary file is
  // made inside it) or a device-DAX device. With `file`: a named file (or a
  // device-DAX device to reopen); its directory must exist.
  std::string path;
  // PMem: set by PmemFile(); empty for Pmem().
  std::optional<FileMode> file;
  // PMem with `file`: remove the named file when the region is destroyed.
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
  // DRAM for a region of `bytes`: on huge pages when it fills one (a
  // smaller region would hold most of a 2 MiB page for nothing).
  static TierOptions DramFor(size_t bytes) { return Dram(/*huge_pages=*/bytes >= (size_t{2} << 20)); }
  // An unnamed temporary file in the existing directory `dir` (or a
  // device-DAX device): rows read as zero, nothing is left behind.
  static TierOptions Pmem(std::string dir) {
    TierOptions t;
    t.kind = TierKind::kPmem;
    t.path = std::move(dir);
    return t;
  }
  // The named file `path`, made or reopened as `mode` says (a reopenable
  // table; pair it with durable = true, or SaveRows/checkpoints, when the
  // rows must survive a crash).
  static TierOptions PmemFile(std::string path, FileMode mode) {
    TierOptions t = Pmem(std::move(path));
    t.file = mode;
    return t;
  }
};

// "dram", "dram(no huge pages)", "pmem:/dir", "pmem-file:/path".
std::string TierName(const TierOptions& tier);

class Region {
 public:
  // Maps `bytes` bytes (> 0) on `tier`. The memory reads as zero, except a
  // file reopened through PmemFile(), whose contents are kept.
  // Errors (never a crash), naming the path, with the errno's code
  // (base::ErrnoStatus): a zero size (InvalidArgument); a path that does not
  // exist (NotFound: Pmem()'s directory, or PmemFile()'s directory or, for
  // kReopen, the file); a Pmem() path that is neither a directory nor a
  // device (FailedPrecondition); a kCreate file that exists (AlreadyExists);
  // no permission (PermissionDenied); no space (ResourceExhausted); a file
  // that cannot be mapped (libpmem2's own words). A file that kCreate made is
  // removed again when the allocation fails.
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
