// A snapshot written by a training table, with that table's rows beside it:
// what the SnapshotTable tests serve and compare against.
#ifndef CEMB_TESTS_SSD_SNAPSHOT_TEST_UTIL_H_
#define CEMB_TESTS_SSD_SNAPSHOT_TEST_UTIL_H_

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "ssd/ssd_table.h"
#include "tests/ssd/test_util.h"

namespace cemb::testing {

template <typename T>
struct TrainedSnapshot {
  std::string path;  // alone in a directory of its own
  int64_t nvectors = 0, featuresize = 0, written = 0;
  std::vector<T> rows;       // every row's features as the training table held them
  std::vector<int64_t> ids;  // the snapshot's row ids, in its order

  const T* row(int64_t r) const { return rows.data() + r * featuresize; }
  size_t feature_bytes() const { return static_cast<size_t>(featuresize) * sizeof(T); }

  // An SsdTable<T, D> of nvectors rows (seed: lazy rows from it, or zeros)
  // whose `written` random rows (and their state floats) are written
  // through a pool of 200 rows, so the log is scattered; then its snapshot.
  template <int64_t D>
  static absl::StatusOr<TrainedSnapshot> Make(const std::string& name, int64_t nvectors, int64_t featuresize,
                                              int64_t state_floats, std::optional<uint64_t> seed, int64_t written) {
    TrainedSnapshot s;
    s.nvectors = nvectors;
    s.featuresize = featuresize;
    s.written = written;
    const std::string dir = absl::StrCat(DiskDir(), "/snapshot_", name, "_", ::getpid());
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    s.path = dir + "/table.ssd";
    SsdOptions o;
    o.file.directory = DiskDir();
    o.init_seed = seed;
    const int64_t row_bytes = featuresize * static_cast<int64_t>(sizeof(T)) + 4 * state_floats;
    o.capacity_bytes = 200 * SlotBytes(row_bytes);
    auto t = SsdTable<T, D>::Create(
        {.name = name, .nvectors = nvectors, .featuresize = featuresize, .state_floats = state_floats}, o);
    if (!t.ok()) return t.status();
    std::vector<int64_t> order(static_cast<size_t>(nvectors));
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
    std::mt19937_64 rng(77);
    std::shuffle(order.begin(), order.end(), rng);
    for (int64_t k = 0; k < written; ++k) {
      const int64_t r = order[static_cast<size_t>(k)];
      T* p = t->rowpointer(r, Access::kWrite);
      for (int64_t c = 0; c < featuresize; ++c) {
        p[c] = FromFloat<T>(static_cast<float>(r % 1000) * 0.01f - static_cast<float>(c) * 0.003f);
      }
      float* state = RowState(p, featuresize);
      for (int64_t c = 0; c < state_floats; ++c) state[c] = 1000.0f + static_cast<float>(c);
    }
    if (absl::Status st = t->status(); !st.ok()) return st;
    if (auto saved = t->SaveSnapshot(s.path); !saved.ok()) return saved.status();
    s.rows.resize(static_cast<size_t>(nvectors * featuresize));
    for (int64_t r = 0; r < nvectors; ++r) {
      std::memcpy(s.rows.data() + r * featuresize, t->rowpointer(r, Access::kRead), s.feature_bytes());
    }
    std::ifstream in(s.path, std::ios::binary);
    in.seekg(4096);
    std::vector<uint32_t> ids(static_cast<size_t>(written));
    in.read(reinterpret_cast<char*>(ids.data()), static_cast<std::streamsize>(ids.size() * 4));
    s.ids.assign(ids.begin(), ids.end());
    return s;
  }
};

}  // namespace cemb::testing

#endif  // CEMB_TESTS_SSD_SNAPSHOT_TEST_UTIL_H_
