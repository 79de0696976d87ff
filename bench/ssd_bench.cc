// The ssd tier against the disk's own limit, in one run:
//   1. load:  every row written once through the table (appended to the log
//             as the pool evicts), so that later reads hit the device (a row
//             never written is computed, never read);
//   2. limit: random 4 KiB O_DIRECT reads of the same file through the same
//             io_uring backend at the table's queue depth (the machine's own
//             limit, measured here, not quoted), and the process CPU each
//             read costs (cpu:);
//   3. steps: a training-like loop: batch k+1 is prefetched while batch k is
//             read (kForward) and updated (kUpdate), then unpinned; reports
//             steps/s, blocks read/s against the limit, the time waited, the
//             hit rate, read amplification and queue depth;
//   4. snapshot: SaveSnapshot and LoadSnapshot of the table (every row
//             written by the load) to DIR/ssd_bench.ssd, twice (removed
//             afterwards; the load reads a file the save just wrote, mostly
//             from the page cache).
// Run it under ../shared/tools/memlimit to make the table larger than memory:
//   memlimit 2G ./build/bench/ssd_bench --dir /work/tmp --rows 33554432 --pool_mib 512
// Flags: --dir DIR (required), --rows N, --pool_mib M, --batch B (rows per
// batch, uniform), --steps S, --queue_depth Q, --limit_only 1 (only the
// disk's limit: the file is written with sequential 1 MiB writes, then read
// at random; bench/run_ssd_dlrm.sh takes its I/O floor from it).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/random.h"
#include "base/timer.h"
#include "ssd/ssd_table.h"

namespace cemb {
namespace {

using Clock = std::chrono::steady_clock;
using Table = SsdTable<float, 64>;  // 256-byte rows: 16 per block

struct Flags {
  std::string dir;
  int64_t rows = int64_t{1} << 24;  // 4 GiB of rows
  int64_t pool_mib = 256;
  int64_t batch = 16384;
  int64_t steps = 50;
  int queue_depth = 64;
  bool limit_only = false;
};

double Seconds(Clock::time_point since) { return std::chrono::duration<double>(Clock::now() - since).count(); }

bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--dir") f->dir = v;
    else if (k == "--rows") f->rows = std::atoll(v);
    else if (k == "--pool_mib") f->pool_mib = std::atoll(v);
    else if (k == "--batch") f->batch = std::atoll(v);
    else if (k == "--steps") f->steps = std::atoll(v);
    else if (k == "--queue_depth") f->queue_depth = std::atoi(v);
    else if (k == "--limit_only") f->limit_only = std::atoi(v) != 0;
    else return false;
  }
  return !f->dir.empty() && f->rows > 0 && f->pool_mib > 0 && f->batch > 0 && f->steps > 0;
}

void Check(const absl::Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "ssd_bench: %s\n", s.ToString().c_str());
    std::exit(1);
  }
}

// The drive's random-read limit and what each read costs the CPU.
struct ReadLimit {
  double reads_per_s = 0;
  // Process CPU (user + system: the kernel's submission and completion
  // path, most of it) per read: what a reader pays beside the drive.
  double cpu_us_per_read = 0;
};

// Random 4 KiB reads over the file for about `seconds`, queue_depth in
// flight, with unregistered buffers (as the serving path's reads).
ReadLimit RawReadLimit(const BlockFile& file, int queue_depth, double seconds) {
  BlockIo& io = file.io();
  const uint64_t nblocks = file.size() / kIoAlignment;
  auto* buffers = static_cast<unsigned char*>(std::aligned_alloc(kIoAlignment, size_t{kIoAlignment} * queue_depth));
  Xoshiro256pp rng(SplitMix64::Mix(99, 1));
  std::vector<BlockRequest> requests;
  std::vector<BlockCompletion> done;
  int64_t reads = 0;
  const Clock::time_point start = Clock::now();
  const double cpu_start = ProcessCpuSeconds();
  std::vector<uint64_t> free_tags;
  for (int i = 0; i < queue_depth; ++i) free_tags.push_back(static_cast<uint64_t>(i));
  while (Seconds(start) < seconds) {
    requests.clear();
    for (uint64_t tag : free_tags) {
      requests.push_back({.op = IoOp::kRead, .offset = rng.Below(nblocks) * kIoAlignment,
                          .buffer = buffers + tag * kIoAlignment, .bytes = kIoAlignment, .tag = tag});
    }
    free_tags.clear();
    if (absl::Status s = io.Submit(requests); !s.ok()) {
      std::fprintf(stderr, "ssd_bench: %s\n", s.ToString().c_str());
      std::exit(1);
    }
    done.clear();
    if (absl::Status s = io.Reap(1, &done); !s.ok()) {
      std::fprintf(stderr, "ssd_bench: %s\n", s.ToString().c_str());
      std::exit(1);
    }
    for (const BlockCompletion& c : done) free_tags.push_back(c.tag);
    reads += static_cast<int64_t>(done.size());
  }
  done.clear();
  (void)io.Reap(io.in_flight(), &done);
  reads += static_cast<int64_t>(done.size());
  const double rate = static_cast<double>(reads) / Seconds(start);
  const double cpu_s = ProcessCpuSeconds() - cpu_start;
  std::free(buffers);
  return {rate, reads > 0 ? cpu_s * 1e6 / static_cast<double>(reads) : 0.0};
}

// RawReadLimit for 5 s, printed ("limit:" and "cpu:" lines): reads/s.
double MeasureReadLimit(const BlockFile& file, int queue_depth) {
  const ReadLimit limit = RawReadLimit(file, queue_depth, 5.0);
  std::printf("limit: %.0f random 4 KiB reads/s at queue depth %d (%.0f MiB/s)\n", limit.reads_per_s, queue_depth,
              limit.reads_per_s * 4096 / (1 << 20));
  std::printf("cpu:   %.2f us of process CPU per read (user + system)\n", limit.cpu_us_per_read);
  return limit.reads_per_s;
}

// Writes the whole file with sequential 1 MiB writes, `depth` in flight (a
// block never written reads as zeros without reaching the device).
void WriteWholeFile(const BlockFile& file, int depth) {
  constexpr uint32_t kChunk = uint32_t{1} << 20;
  auto* buffer = static_cast<unsigned char*>(std::aligned_alloc(kIoAlignment, kChunk));
  std::memset(buffer, 0x5a, kChunk);
  BlockIo& io = file.io();
  std::vector<BlockRequest> requests;
  std::vector<BlockCompletion> done;
  for (uint64_t offset = 0; offset < file.size();) {
    requests.clear();
    for (int i = 0; i < depth && offset < file.size(); ++i, offset += kChunk) {
      requests.push_back({.op = IoOp::kWrite, .offset = offset, .buffer = buffer,
                          .bytes = static_cast<uint32_t>(std::min<uint64_t>(kChunk, file.size() - offset)), .tag = 0});
    }
    Check(io.Submit(requests));
    done.clear();
    Check(io.Reap(io.in_flight(), &done));
    for (const BlockCompletion& c : done) {
      if (c.result < 0) Check(absl::InternalError(absl::StrCat("write failed: ", std::strerror(static_cast<int>(-c.result)))));
    }
  }
  std::free(buffer);
}

// --limit_only: the disk's sequential write rate (the whole file in 1 MiB
// writes) and its random 4 KiB read rate over that file of `rows` x 256
// bytes, nothing else.
int LimitOnly(const Flags& f) {
  absl::StatusOr<BlockFile> file = BlockFile::Create(
      {.directory = f.dir, .bytes = static_cast<uint64_t>(f.rows) * 256, .queue_depth = f.queue_depth});
  Check(file.status());
  const Clock::time_point t0 = Clock::now();
  WriteWholeFile(*file, 8);
  const double write_s = Seconds(t0);
  std::printf("file:  %.2f GiB in %s (%s), written in %.1f s\n", static_cast<double>(file->size()) / (1 << 30),
              f.dir.c_str(), file->direct() ? "O_DIRECT" : "buffered", write_s);
  std::printf("seqwrite: %.0f MiB/s in 1 MiB writes, 8 in flight\n",
              static_cast<double>(file->size()) / (1 << 20) / write_s);
  MeasureReadLimit(*file, f.queue_depth);
  return 0;
}

int Main(const Flags& f) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (f.limit_only) return LimitOnly(f);
  SsdOptions options;
  options.capacity_bytes = f.pool_mib << 20;
  options.file.directory = f.dir;
  options.file.queue_depth = f.queue_depth;
  options.init_seed = 1;
  absl::StatusOr<Table> table = Table::Create({.name = "bench", .nvectors = f.rows}, options);
  Check(table.status());
  const double table_gib = static_cast<double>(f.rows * table->row_bytes()) / (1 << 30);
  std::printf("table %lld rows x 256 B = %.2f GiB in %s (%s), pool %lld MiB (%.1f%% of the rows), batch %lld uniform rows\n",
              static_cast<long long>(f.rows), table_gib, f.dir.c_str(), table->file().direct() ? "O_DIRECT" : "buffered",
              static_cast<long long>(f.pool_mib), 100.0 * static_cast<double>(f.pool_mib << 20) / (table_gib * (1 << 30)),
              static_cast<long long>(f.batch));

  // 1. Load: every row written once (kWrite), a batch of consecutive rows
  // at a time, so that evictions write back in batches (a row that was
  // never prefetched would be a synchronous miss at queue depth 1).
  Clock::time_point t0 = Clock::now();
  int64_t batch_id = 0;
  std::vector<int64_t> rows;
  for (int64_t begin = 0; begin < f.rows; begin += f.batch, ++batch_id) {
    rows.clear();
    for (int64_t r = begin; r < std::min(f.rows, begin + f.batch); ++r) rows.push_back(r);
    Check(table->Prefetch(batch_id, rows));
    Check(table->WaitResident(batch_id).status());
    for (int64_t r : rows) table->rowpointer(r, Access::kWrite)[0] += 1.0f;
    Check(table->Unpin(batch_id));
  }
  Check(table->FlushDirty());
  const double load_s = Seconds(t0);
  std::printf("load:  %.1f s, %.0f MiB/s written\n", load_s,
              static_cast<double>(table->stats().io.bytes_written) / (1 << 20) / load_s);

  // 2. The device's limit, same file, same backend, same queue depth.
  const double limit = MeasureReadLimit(table->file(), f.queue_depth);

  // 3. Steps.
  std::vector<std::vector<int64_t>> batches(static_cast<size_t>(f.steps));
  Xoshiro256pp rng(SplitMix64::Mix(7, 2));
  for (auto& b : batches) {
    b.resize(static_cast<size_t>(f.batch));
    for (int64_t& r : b) r = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(f.rows)));
  }
  const SsdStats before = table->stats();
  t0 = Clock::now();
  double sum = 0;
  const int64_t first = batch_id;  // batch ids go on from the load's
  Check(table->Prefetch(first, batches[0]));
  for (int64_t k = 0; k < f.steps; ++k) {
    if (k + 1 < f.steps) Check(table->Prefetch(first + k + 1, batches[static_cast<size_t>(k + 1)]));
    Check(table->WaitResident(first + k).status());
    for (int64_t r : batches[static_cast<size_t>(k)]) {
      const float* row = table->rowpointer(r, Access::kForward);
      for (int j = 0; j < 64; ++j) sum += row[j];
    }
    for (int64_t r : batches[static_cast<size_t>(k)]) table->rowpointer(r, Access::kUpdate)[0] -= 1e-3f;
    Check(table->Unpin(first + k));
  }
  const double steps_s = Seconds(t0);
  const SsdStats after = table->stats();
  const double reads = static_cast<double>(after.io.reads - before.io.reads);
  const double waited = absl::ToDoubleSeconds(after.waited - before.waited);
  // The steps' own figures (the load's are not mixed in).
  const double hit_rate = static_cast<double>(after.prefetch_hits - before.prefetch_hits) /
                          static_cast<double>(after.prefetch_rows - before.prefetch_rows);
  const double amplification = static_cast<double>(after.io.bytes_read - before.io.bytes_read) /
                               static_cast<double>((after.fetched_rows - before.fetched_rows) * table->row_bytes());
  const double depth = static_cast<double>(after.io.depth_sum - before.io.depth_sum) /
                       static_cast<double>(after.io.submissions - before.io.submissions);
  std::printf("steps: %lld in %.2f s (%.1f ms/step), %.0f block reads/s = %.2fx the limit, %.0f writes/s, "
              "waited %.1f%% of the time, hit rate %.3f, read amplification %.1f, queue depth %.1f (checksum %g)\n",
              static_cast<long long>(f.steps), steps_s, 1e3 * steps_s / static_cast<double>(f.steps), reads / steps_s,
              reads / steps_s / limit, static_cast<double>(after.io.writes - before.io.writes) / steps_s,
              100.0 * waited / steps_s, hit_rate, amplification, depth, sum);

  // 4. Snapshots, after a flush of the steps' dirty rows (timed apart, so
  // both saves copy the same blocks and nothing else).
  t0 = Clock::now();
  Check(table->FlushDirty());
  std::printf("flush: %.2f s\n", Seconds(t0));
  const std::string path = f.dir + "/ssd_bench.ssd";
  for (int round = 0; round < 2; ++round) {
    absl::StatusOr<SnapshotInfo> saved = table->SaveSnapshot(path);
    Check(saved.status());
    absl::StatusOr<SnapshotInfo> loaded = table->LoadSnapshot(path);
    Check(loaded.status());
    const double gib = static_cast<double>(saved->file_bytes) / (1 << 30);
    std::printf("snapshot: %.2f GiB, %lld rows; save %.2f s (%.2f GiB/s, fsync included), "
                "load %.2f s (%.2f GiB/s)\n",
                gib, static_cast<long long>(saved->rows),
                absl::ToDoubleSeconds(saved->took), gib / absl::ToDoubleSeconds(saved->took),
                absl::ToDoubleSeconds(loaded->took), gib / absl::ToDoubleSeconds(loaded->took));
  }
  std::remove(path.c_str());
  return 0;
}

}  // namespace
}  // namespace cemb

int main(int argc, char** argv) {
  cemb::Flags flags;
  if (!cemb::ParseFlags(argc, argv, &flags)) {
    std::fprintf(stderr,
                 "usage: ssd_bench --dir DIR [--rows N] [--pool_mib M] [--batch B] [--steps S] [--queue_depth Q] [--limit_only 1]\n");
    return 2;
  }
  return cemb::Main(flags);
}
