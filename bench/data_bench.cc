// Benchmarks of the data pipeline (data/):
//
//   BM_ParseLine        ParseCriteoLine over the real Kaggle sample rows, tiled
//                       in memory to 64 MB: MB/s on one core (target >= 150).
//   BM_ReadTsvFile      CriteoReader over a synthetic 128 MB TSV in a temporary
//                       directory (page cache warm), 1 and 2 threads.
//   BM_Preprocess       the whole `dlrm-data preprocess` path (read, parse,
//                       transform, split, write) over the same file.
//   BM_LoaderNext       Loader::Next() over a Kaggle-shaped binary dataset
//                       (shuffled, batch 2048 / 8192, one-hot and 20-hot):
//                       batches per second delivered to a consumer that does
//                       nothing else.
//
// Run:  build/bench/data_bench --benchmark_counters_tabular=true
//
// Rates are per wall-clock second; the CPU column is the process's CPU time
// (all threads, the loader's background thread included), so on a shared
// machine CPU-time rates (bytes / CPU time) are the stable per-core figures.
// The temporary files go to $TMPDIR (default /tmp) and are removed at exit.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "benchmark/benchmark.h"
#include "data/criteo.h"
#include "data/criteo_reader.h"
#include "data/generator.h"
#include "data/loader.h"
#include "data/preprocess.h"

namespace cemb::data {
namespace {

// Scratch files, made once per process.
class Scratch {
 public:
  static Scratch& Get() {
    static Scratch s;
    return s;
  }
  ~Scratch() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  const std::string& dir() const { return dir_; }

  // The real Kaggle sample's lines, tiled in memory to 64 MB (never written out).
  const std::vector<std::string_view>& TiledKaggleLines() {
    if (lines_.empty()) {
      const std::string path = std::string(CEMB_SHARED_DIR) + "/data/criteo/kaggle-sample-guestwalk.tsv";
      std::FILE* f = std::fopen(path.c_str(), "rb");
      if (f == nullptr) {
        std::fprintf(stderr, "cannot read %s\n", path.c_str());
        std::exit(1);
      }
      std::string sample;
      char buf[1 << 16];
      size_t n;
      while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) sample.append(buf, n);
      std::fclose(f);
      while (text_.size() < (size_t{64} << 20)) text_ += sample;
      size_t start = 0;
      while (start < text_.size()) {
        const size_t nl = text_.find('\n', start);
        lines_.emplace_back(text_.data() + start, nl - start);
        start = nl + 1;
      }
    }
    return lines_;
  }
  size_t tiled_bytes() const { return text_.size(); }

  // A synthetic Criteo TSV of about 128 MB (uniform ids over the Kaggle tables).
  const std::string& Tsv() {
    if (tsv_.empty()) {
      tsv_ = dir_ + "/synthetic.tsv";
      GeneratorOptions o;
      o.num_samples = 520'000;  // about 250 bytes a line
      if (!GenerateCriteoTsv(o, tsv_).ok()) std::exit(1);
    }
    return tsv_;
  }

  // A Kaggle-shaped binary dataset with the given hotness.
  std::shared_ptr<const Dataset> BinaryDataset(uint32_t hotness) {
    auto& d = datasets_[hotness];
    if (d == nullptr) {
      const std::string path = dir_ + "/synthetic_" + std::to_string(hotness) + ".bin";
      GeneratorOptions o;
      o.num_samples = hotness == 1 ? 1'000'000 : 200'000;
      o.hotness = {hotness};
      if (!GenerateDataset(o, path).ok()) std::exit(1);
      auto opened = Dataset::Open(path);
      if (!opened.ok()) std::exit(1);
      d = std::move(*opened);
    }
    return d;
  }

 private:
  Scratch() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base ? base : "/tmp") + "/cemb_data_bench_XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) std::exit(1);
    dir_ = pattern;
  }
  std::string dir_, text_, tsv_;
  std::vector<std::string_view> lines_;
  std::shared_ptr<const Dataset> datasets_[64];
};

void BM_ParseLine(benchmark::State& state) {
  const auto& lines = Scratch::Get().TiledKaggleLines();
  CriteoRow row;
  size_t bytes = 0;
  for (auto _ : state) {
    for (std::string_view line : lines) {
      if (!ParseCriteoLine(line, row).ok()) state.SkipWithError("parse error");
      benchmark::DoNotOptimize(row);
    }
    bytes += Scratch::Get().tiled_bytes();
  }
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
  state.counters["lines/s"] = benchmark::Counter(static_cast<double>(lines.size() * state.iterations()),
                                                 benchmark::Counter::kIsRate);
}
BENCHMARK(BM_ParseLine)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_ReadTsvFile(benchmark::State& state) {
  const std::string& path = Scratch::Get().Tsv();
  CriteoReaderOptions o;
  o.threads = static_cast<int>(state.range(0));
  uint64_t bytes = 0, rows = 0;
  for (auto _ : state) {
    auto reader = CriteoReader::Open(path, o);
    while (true) {
      auto block = (*reader)->Next();
      if (!block.ok()) state.SkipWithError("read error");
      if (!block.ok() || *block == nullptr) break;
      rows += (*block)->rows.size();
    }
    bytes += (*reader)->file_bytes();
  }
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
  state.counters["threads"] = static_cast<double>(o.threads);
  state.counters["MB/s/thread"] = benchmark::Counter(static_cast<double>(bytes) / 1e6 / o.threads,
                                                     benchmark::Counter::kIsRate);
  state.counters["lines/s"] = benchmark::Counter(static_cast<double>(rows), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_ReadTsvFile)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime()->UseRealTime();

void BM_Preprocess(benchmark::State& state) {
  const std::string& path = Scratch::Get().Tsv();
  PreprocessOptions o;
  o.inputs = {path};
  o.output_dir = Scratch::Get().dir() + "/preprocessed";
  o.reader.threads = static_cast<int>(state.range(0));
  uint64_t bytes = 0;
  for (auto _ : state) {
    auto s = Preprocess(o);
    if (!s.ok()) state.SkipWithError("preprocess error");
    bytes += s.ok() ? s->input_bytes : 0;
  }
  state.SetBytesProcessed(static_cast<int64_t>(bytes));
  state.counters["threads"] = static_cast<double>(o.reader.threads);
  state.counters["MB/s/thread"] = benchmark::Counter(static_cast<double>(bytes) / 1e6 / o.reader.threads,
                                                     benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Preprocess)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime()->UseRealTime();

void BM_LoaderNext(benchmark::State& state) {
  const uint32_t batch = static_cast<uint32_t>(state.range(0));
  const uint32_t hotness = static_cast<uint32_t>(state.range(1));
  auto ds = Scratch::Get().BinaryDataset(hotness);
  auto loader = Loader::Create(ds, {.batch_size = batch, .num_epochs = 0});
  if (!loader.ok()) {
    state.SkipWithError("loader");
    return;
  }
  uint64_t batches = 0, samples = 0;
  for (auto _ : state) {
    const Batch* b = (*loader)->Next();
    benchmark::DoNotOptimize(b->labels().data());
    samples += b->size();
    ++batches;
  }
  state.counters["batches/s"] = benchmark::Counter(static_cast<double>(batches), benchmark::Counter::kIsRate);
  state.counters["samples/s"] = benchmark::Counter(static_cast<double>(samples), benchmark::Counter::kIsRate);
  state.SetBytesProcessed(static_cast<int64_t>(samples * ds->spec().record_bytes()));
}
BENCHMARK(BM_LoaderNext)
    ->ArgNames({"batch", "hotness"})
    ->Args({2048, 1})
    ->Args({8192, 1})
    ->Args({2048, 20})
    ->Unit(benchmark::kMicrosecond)
    ->MeasureProcessCPUTime()
    ->UseRealTime();

}  // namespace
}  // namespace cemb::data

int main(int argc, char** argv) {
#ifndef NDEBUG
  std::fprintf(stderr, "data_bench: this is a debug build (NDEBUG is not defined); "
                       "benchmark a Release build instead.\n");
  return 1;
#endif
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("cpu_threads", std::to_string(std::thread::hardware_concurrency()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
