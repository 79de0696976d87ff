// Helpers shared by the ssd tests: directories for block files, aligned
// buffers, and running a batch of requests to completion.
#ifndef CEMB_TESTS_SSD_TEST_UTIL_H_
#define CEMB_TESTS_SSD_TEST_UTIL_H_

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "ssd/block_io.h"

namespace cemb::testing {

// A directory on a disk file system (ext4 here: O_DIRECT works) and one on tmpfs.
inline std::string DiskDir() {
  std::string d = ::testing::TempDir();
  if (!d.empty() && d.back() == '/') d.pop_back();
  return d;
}
inline std::string TmpfsDir() { return "/dev/shm"; }

struct AlignedDeleter {
  void operator()(void* p) const { std::free(p); }
};
using AlignedBytes = std::unique_ptr<unsigned char[], AlignedDeleter>;

inline AlignedBytes AlignedAlloc(size_t bytes) {
  return AlignedBytes(static_cast<unsigned char*>(std::aligned_alloc(kIoAlignment, bytes)));
}

// Submits `requests` and reaps until each has completed; completions by tag.
inline std::vector<int64_t> RunAll(BlockIo& io, std::span<const BlockRequest> requests, uint64_t ntags) {
  std::vector<int64_t> result(ntags, 1);  // 1: never completed
  absl::Status s = io.Submit(requests);
  EXPECT_TRUE(s.ok()) << s;
  std::vector<BlockCompletion> done;
  s = io.Reap(io.in_flight(), &done);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(io.in_flight(), 0);
  for (const BlockCompletion& c : done) result.at(c.tag) = c.result;
  return result;
}

}  // namespace cemb::testing

#endif  // CEMB_TESTS_SSD_TEST_UTIL_H_
