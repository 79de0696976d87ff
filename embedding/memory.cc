#include "embedding/memory.h"

#include <fcntl.h>
#include <libpmem2.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/file.h"

namespace cemb {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

std::string Pmem2Error() { return pmem2_errormsg(); }

// base::ErrnoStatus (its code and its words) with the tier in front:
// "pmem: <path>: cannot <what>: <strerror>".
absl::Status PmemErrno(int err, const std::string& path, const std::string& what) {
  const absl::Status s = base::ErrnoStatus(err, path, what.c_str());
  return absl::Status(s.code(), absl::StrCat("pmem: ", s.message()));
}

}  // namespace

struct Region::Impl {
  virtual ~Impl() = default;
  virtual void persist(const void* addr, size_t len) const {}
  std::byte* data = nullptr;
  size_t size = 0;
  TierKind kind = TierKind::kDram;
  bool persistent = false;
};

namespace {

// Anonymous memory. With huge pages the mapping is over-allocated by 2 MiB and
// trimmed so that it starts on a 2 MiB boundary.
struct DramImpl final : Region::Impl {
  ~DramImpl() override {
    if (map_base != nullptr) munmap(map_base, map_size);
  }
  void* map_base = nullptr;
  size_t map_size = 0;
};

absl::StatusOr<std::unique_ptr<Region::Impl>> MapDram(size_t bytes, bool huge_pages) {
  auto impl = std::make_unique<DramImpl>();
  const size_t align = huge_pages ? kHugePage : 4096;
  const size_t size = RoundUp(bytes, align);
  const size_t map_size = size + (huge_pages ? kHugePage : 0);
  void* base = mmap(nullptr, map_size, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("dram: cannot map ", bytes, " bytes: ", std::strerror(errno)));
  }
  auto* begin = static_cast<std::byte*>(base);
  auto* aligned = reinterpret_cast<std::byte*>(
      RoundUp(reinterpret_cast<uintptr_t>(begin), align));
  if (huge_pages) {
    // Give back the unaligned head and the tail beyond the aligned range.
    if (aligned > begin) munmap(begin, aligned - begin);
    std::byte* end = begin + map_size;
    if (end > aligned + size) munmap(aligned + size, end - (aligned + size));
    impl->map_base = aligned;
    impl->map_size = size;
    madvise(aligned, size, MADV_HUGEPAGE);  // advice only: ignore failure
  } else {
    impl->map_base = base;
    impl->map_size = map_size;
  }
  impl->data = aligned;
  impl->size = bytes;
  impl->kind = TierKind::kDram;
  return impl;
}

// A file (or device-DAX) mapped through libpmem2.
struct PmemImpl final : Region::Impl {
  ~PmemImpl() override {
    if (map != nullptr) pmem2_map_delete(&map);
    if (source != nullptr) pmem2_source_delete(&source);
    if (config != nullptr) pmem2_config_delete(&config);
    if (fd >= 0) close(fd);
    if (!remove_path.empty()) unlink(remove_path.c_str());
  }
  void persist(const void* addr, size_t len) const override {
    if (persistent) persist_fn(const_cast<void*>(addr), len);
  }
  pmem2_config* config = nullptr;
  pmem2_source* source = nullptr;
  pmem2_map* map = nullptr;
  pmem2_persist_fn persist_fn = nullptr;
  int fd = -1;
  std::string remove_path;
};

// An unnamed file in the directory `dir`: O_TMPFILE, or where the file system
// lacks it, mkstemp and unlink at once. -1 with errno set on failure.
int OpenTemporaryFile(const std::string& dir) {
  const int fd = open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)) return fd;
  std::string name = dir + "/.cemb-slow-tier-XXXXXX";
  const int named = mkostemp(name.data(), O_CLOEXEC);
  if (named >= 0) unlink(name.c_str());
  return named;
}

// Opens the PMem file the tier names (memory.h) into impl.fd; `*devdax` says
// it is a device-DAX device. A named file made here goes into
// impl.remove_path, so that a failed allocation removes it again.
absl::Status OpenPmemFile(const TierOptions& tier, PmemImpl& impl, bool* devdax) {
  const std::string& path = tier.path;
  *devdax = false;
  if (!tier.file.has_value()) {
    // Pmem(dir): an existing directory (or a device), never a file made here.
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) return PmemErrno(errno, path, "open the slow-tier directory");
    if (S_ISDIR(st.st_mode)) {
      impl.fd = OpenTemporaryFile(path);
      if (impl.fd < 0) return PmemErrno(errno, path, "make a temporary file in");
      return absl::OkStatus();
    }
    if (!S_ISCHR(st.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "pmem: ", path, ": not a directory (TierOptions::Pmem takes a directory or a device-DAX device; "
          "a named file is TierOptions::PmemFile)"));
    }
    *devdax = true;
    impl.fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (impl.fd < 0) return PmemErrno(errno, path, "open");
    return absl::OkStatus();
  }
  const FileMode mode = *tier.file;
  if (mode != FileMode::kReopen) {
    impl.fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_CREAT | O_EXCL, 0600);
    if (impl.fd >= 0) {
      impl.remove_path = path;
    } else if (errno != EEXIST || mode == FileMode::kCreate) {
      return PmemErrno(errno, path, "create");
    }
  }
  if (impl.fd < 0) {
    impl.fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (impl.fd < 0) return PmemErrno(errno, path, "open");
  }
  struct stat st {};
  if (fstat(impl.fd, &st) != 0) return PmemErrno(errno, path, "stat");
  *devdax = S_ISCHR(st.st_mode);
  if (!*devdax && !S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat("pmem: ", path, ": not a regular file or a device"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Region::Impl>> MapPmem(const TierOptions& tier, size_t bytes) {
  auto impl = std::make_unique<PmemImpl>();
  const std::string& path = tier.path;
  if (path.empty()) return absl::InvalidArgumentError("pmem: no path given");
  bool is_devdax = false;
  if (absl::Status s = OpenPmemFile(tier, *impl, &is_devdax); !s.ok()) return s;
  if (pmem2_source_from_fd(&impl->source, impl->fd) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("pmem: source '", path, "': ", Pmem2Error()));
  }
  // The mapping covers whole units of the source's alignment (a page for a
  // file, 2 MiB for device-DAX); the region reports the size asked for.
  size_t alignment = 4096;
  if (pmem2_source_alignment(impl->source, &alignment) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("pmem: alignment of '", path, "': ", Pmem2Error()));
  }
  const size_t map_bytes = RoundUp(bytes, alignment);
  if (!is_devdax) {
    struct stat fst {};
    if (fstat(impl->fd, &fst) != 0) return PmemErrno(errno, path, "stat");
    if (static_cast<size_t>(fst.st_size) < map_bytes) {
      // posix_fallocate reserves the blocks now, so a full file system fails
      // here with ENOSPC instead of with SIGBUS at the first store.
      const int err = posix_fallocate(impl->fd, 0, static_cast<off_t>(map_bytes));
      if (err != 0) return PmemErrno(err, path, absl::StrCat("size the file to ", map_bytes, " bytes"));
    }
  }
  if (pmem2_config_new(&impl->config) != 0 ||
      pmem2_config_set_required_store_granularity(impl->config, PMEM2_GRANULARITY_PAGE) != 0 ||
      pmem2_config_set_length(impl->config, map_bytes) != 0) {
    return absl::InternalError(absl::StrCat("pmem: config for '", path, "': ", Pmem2Error()));
  }
  size_t source_size = 0;
  if (pmem2_source_size(impl->source, &source_size) != 0 || source_size < map_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pmem: '", path, "' holds ", source_size, " bytes, ", map_bytes, " needed: ", Pmem2Error()));
  }
  if (pmem2_map_new(&impl->map, impl->config, impl->source) != 0) {
    return absl::ResourceExhaustedError(absl::StrCat("pmem: map '", path, "': ", Pmem2Error()));
  }
  impl->persist_fn = pmem2_get_persist_fn(impl->map);
  impl->data = static_cast<std::byte*>(pmem2_map_get_address(impl->map));
  if (is_devdax && !tier.file.has_value()) {
    // A device keeps what the last user wrote; Pmem() promises zeros.
    pmem2_get_memset_fn(impl->map)(impl->data, 0, map_bytes, PMEM2_F_MEM_NONTEMPORAL);
  }
  // Mapped: a file made here stays, unless the tier asks for its removal.
  const bool remove = tier.remove_on_close && tier.file.has_value() && !is_devdax;
  impl->remove_path = remove ? path : std::string();
  impl->size = bytes;
  impl->kind = TierKind::kPmem;
  impl->persistent = tier.durable || pmem2_map_get_store_granularity(impl->map) != PMEM2_GRANULARITY_PAGE;
  return impl;
}

}  // namespace

std::string TierName(const TierOptions& tier) {
  if (tier.kind == TierKind::kPmem) return absl::StrCat(tier.file ? "pmem-file:" : "pmem:", tier.path);
  return tier.huge_pages ? "dram" : "dram(no huge pages)";
}

absl::StatusOr<Region> Region::Allocate(const TierOptions& tier, size_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("region: size must be > 0");
  absl::StatusOr<std::unique_ptr<Impl>> impl =
      tier.kind == TierKind::kDram ? MapDram(bytes, tier.huge_pages) : MapPmem(tier, bytes);
  if (!impl.ok()) return impl.status();
  Region region;
  region.impl_ = *std::move(impl);
  return region;
}

Region::Region() = default;
Region::~Region() = default;
Region::Region(Region&&) noexcept = default;
Region& Region::operator=(Region&&) noexcept = default;

std::byte* Region::data() const { return impl_ ? impl_->data : nullptr; }
size_t Region::size() const { return impl_ ? impl_->size : 0; }
TierKind Region::kind() const { return impl_ ? impl_->kind : TierKind::kDram; }
bool Region::persistent() const { return impl_ && impl_->persistent; }
void Region::persist(const void* addr, size_t len) const {
  if (impl_) impl_->persist(addr, len);
}

}  // namespace cemb
