// Helpers for the data tests: a scratch directory and small file utilities.
#ifndef CEMB_TESTS_DATA_TEST_UTIL_H_
#define CEMB_TESTS_DATA_TEST_UTIL_H_

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "gtest/gtest.h"

namespace cemb::data::testing {

inline std::string KaggleSample() {
  return std::string(CEMB_SHARED_DIR) + "/data/criteo/kaggle-sample-guestwalk.tsv";
}
inline std::string TerabyteSample() {
  return std::string(CEMB_SHARED_DIR) + "/data/criteo/terabyte-sample-hillview.tsv";
}

// A fresh directory under $TMPDIR, removed with its contents at destruction.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base ? base : "/tmp") + "/cemb_data_test_XXXXXX";
    path_ = ::mkdtemp(pattern.data()) ? pattern : "";
    EXPECT_FALSE(path_.empty());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline void WriteFile(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary);
  out << content;
  ASSERT_TRUE(out.good()) << path;
}

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A valid line with label `label`, dense I_k = k, ids C_k = k (hex).
inline std::string ValidLine(int label = 1) {
  std::string s = std::to_string(label);
  for (int i = 1; i <= 13; ++i) {
    s += '\t';
    s += std::to_string(i);
  }
  for (int i = 1; i <= 26; ++i) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "\t%08x", i);
    s += buf;
  }
  return s;
}

}  // namespace cemb::data::testing

#endif  // CEMB_TESTS_DATA_TEST_UTIL_H_
