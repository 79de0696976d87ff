// dlrm-data: preprocess Criteo logs, generate synthetic data, inspect datasets.
//
//   dlrm-data preprocess --format kaggle --input train.txt --output criteo-kaggle
//   dlrm-data preprocess --format terabyte --input day_{0..23} --output tb
//       --max-index-range 40000000     (one command line)
//   dlrm-data generate --output synthetic.bin --samples 10000000 --distribution zipf
//   dlrm-data generate --output synthetic.tsv --tsv --samples 100000
//   dlrm-data inspect criteo-kaggle/train.bin
//
// Exit status: 0 on success, 1 on a data or I/O error (the message names the
// file and line or byte), 2 on a usage error.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "base/enum_names.h"
#include "data/dataset.h"
#include "data/generator.h"
#include "data/preprocess.h"

namespace cemb::data {
namespace {

using Clock = std::chrono::steady_clock;

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "dlrm-data: %s\n", status.ToString().c_str());
  return 1;
}

// A one-line progress bar on stderr, redrawn at most 5 times a second.
class ProgressBar {
 public:
  explicit ProgressBar(bool enabled)
      : enabled_(enabled), start_(Clock::now()), pass_start_(start_) {}
  void Update(const PreprocessProgress& p) {
    if (!enabled_) return;
    const auto now = Clock::now();
    if (p.bytes_done < p.bytes_total && now - last_ < std::chrono::milliseconds(200)) return;
    last_ = now;
    if (p.pass != pass_) {
      if (pass_ != 0) pass_start_ = last_drawn_;  // the next pass started after the last draw
      pass_ = p.pass;
    }
    last_drawn_ = now;
    const double seconds = std::chrono::duration<double>(now - pass_start_).count();
    const double fraction = p.bytes_total ? double(p.bytes_done) / double(p.bytes_total) : 1.0;
    const double rate = seconds > 0 ? double(p.bytes_done) / seconds : 0.0;
    const double eta = rate > 0 ? double(p.bytes_total - p.bytes_done) / rate : 0.0;
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(fraction * kWidth);
    std::string bar(static_cast<size_t>(filled), '=');
    bar.resize(kWidth, ' ');
    std::fprintf(stderr, "\rpass %d/%d [%s] %5.1f%% %8.2f / %.2f GB %7.1f MB/s %9.0f lines/s ETA %4.0fs",
                 p.pass, p.passes, bar.c_str(), 100 * fraction, p.bytes_done / 1e9,
                 p.bytes_total / 1e9, rate / 1e6, seconds > 0 ? p.lines / seconds : 0.0, eta);
    if (p.bytes_done == p.bytes_total) std::fputc('\n', stderr);
    std::fflush(stderr);
  }
  double Seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

 private:
  bool enabled_;
  Clock::time_point start_, last_{}, pass_start_, last_drawn_{};
  int pass_ = 0;
};

// An enum option's names, for CLI11's check (the one list: base/enum_names.h).
template <typename E, size_t N>
std::vector<std::string> Names(const EnumName<E> (&names)[N]) {
  std::vector<std::string> out;
  for (const EnumName<E>& n : names) out.push_back(n.name);
  return out;
}

// The value of a name CLI11 has checked against Names(names).
template <typename E, size_t N>
E Parsed(const EnumName<E> (&names)[N], const std::string& name) {
  return *ParseName(names, name, "value");
}

struct PreprocessArgs {
  std::string format = NameOf(kCriteoFormatNames, CriteoFormat::kKaggle);
  std::vector<std::string> inputs;
  std::string output;
  std::string index_mode = NameOf(kIndexModeNames, IndexMode::kModulo);
  std::vector<uint64_t> table_sizes;
  uint64_t max_index_range = 0;
  uint32_t frequency_threshold = 1;
  std::string split = NameOf(kSplitModeNames, SplitMode::kReference);
  int threads = 0;
  bool skip_bad_lines = false;
  size_t max_line_bytes = kDefaultMaxLineBytes;
  std::string progress = "auto";
};

int RunPreprocess(const PreprocessArgs& a) {
  PreprocessOptions o;
  o.format = Parsed(kCriteoFormatNames, a.format);
  o.inputs = a.inputs;
  o.output_dir = a.output;
  o.index_mode = Parsed(kIndexModeNames, a.index_mode);
  o.table_sizes = a.table_sizes;
  o.max_index_range = a.max_index_range;
  o.frequency_threshold = a.frequency_threshold;
  o.split = Parsed(kSplitModeNames, a.split);
  o.reader.threads = a.threads;
  o.reader.bad_lines = a.skip_bad_lines ? BadLines::kSkip : BadLines::kFail;
  o.reader.max_line_bytes = a.max_line_bytes;
  o.reader.chunk_bytes = std::max(o.reader.chunk_bytes, 2 * a.max_line_bytes);
  const bool show = a.progress == "on" || (a.progress == "auto" && ::isatty(2));
  ProgressBar bar(show);
  o.progress = [&bar](const PreprocessProgress& p) { bar.Update(p); };
  absl::StatusOr<PreprocessSummary> s = Preprocess(o);
  if (!s.ok()) return Fail(s.status());
  const double seconds = bar.Seconds();
  std::printf("read %llu lines (%.2f GB) in %.1f s: %.1f MB/s\n",
              static_cast<unsigned long long>(s->lines), s->input_bytes / 1e9, seconds,
              seconds > 0 ? s->input_bytes / seconds / 1e6 : 0.0);
  std::printf("samples %llu, positive rate %.4f\n", static_cast<unsigned long long>(s->samples),
              s->samples ? double(s->positives) / double(s->samples) : 0.0);
  for (size_t i = 0; i < s->outputs.size(); ++i) {
    std::printf("wrote %s: %llu samples\n", s->outputs[i].c_str(),
                static_cast<unsigned long long>(s->output_samples[i]));
  }
  std::printf("table sizes:");
  for (uint64_t size : s->table_sizes) std::printf(" %llu", static_cast<unsigned long long>(size));
  std::printf("\n");
  if (s->bad_lines > 0) {
    std::fprintf(stderr, "dlrm-data: skipped %llu bad lines of %llu; the first:\n",
                 static_cast<unsigned long long>(s->bad_lines), static_cast<unsigned long long>(s->lines));
    for (const std::string& m : s->bad_line_messages) std::fprintf(stderr, "  %s\n", m.c_str());
  }
  return 0;
}

struct GenerateArgs {
  std::string output;
  bool tsv = false;
  GeneratorOptions options;
  std::string distribution = NameOf(kIndexDistributionNames, IndexDistribution::kUniform);
  uint64_t max_table_size = 0;
};

int RunGenerate(GenerateArgs a) {
  a.options.distribution = Parsed(kIndexDistributionNames, a.distribution);
  if (a.max_table_size != 0) {
    for (uint64_t& size : a.options.table_sizes) size = std::min(size, a.max_table_size);
  }
  if (absl::Status s = ExpandHotness(a.options.hotness, a.options.table_sizes.size(), "--hotness").status(); !s.ok()) {
    return Fail(s);
  }
  const auto start = Clock::now();
  const absl::Status s = a.tsv ? GenerateCriteoTsv(a.options, a.output) : GenerateDataset(a.options, a.output);
  if (!s.ok()) return Fail(s);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("wrote %s: %llu samples in %.1f s\n", a.output.c_str(),
              static_cast<unsigned long long>(a.options.num_samples), seconds);
  return 0;
}

int RunInspect(const std::string& path, bool header_only) {
  absl::StatusOr<std::unique_ptr<Dataset>> d =
      Dataset::Open(path, {.verify = header_only ? Verify::kHeader : Verify::kFull});
  if (!d.ok()) return Fail(d.status());
  const Dataset& ds = **d;
  double positives = 0;
  for (uint64_t i = 0; i < ds.num_samples(); ++i) positives += ds.label(i);
  std::printf("%s: format v%u, part %s\n", path.c_str(), ds.version(), PartName(ds.part()));
  std::printf("samples %llu, positive rate %.4f\n", static_cast<unsigned long long>(ds.num_samples()),
              ds.num_samples() ? positives / double(ds.num_samples()) : 0.0);
  std::printf("dense %u, tables %u, hotness %s, record %u bytes, header %llu bytes\n", ds.num_dense(),
              ds.num_tables(), HotnessText(ds.hotness()).c_str(), ds.spec().record_bytes(),
              static_cast<unsigned long long>(ds.header_bytes()));
  std::printf("table sizes:");
  for (uint64_t size : ds.table_sizes()) std::printf(" %llu", static_cast<unsigned long long>(size));
  std::printf("\npayload checksum %016llx (%s)\n", static_cast<unsigned long long>(ds.payload_checksum()),
              header_only ? "not verified" : "verified, all indices in range");
  return 0;
}

int Main(int argc, char** argv) {
  CLI::App app{"dlrm-data: Criteo preprocessing, synthetic data and dataset inspection"};
  app.require_subcommand(1);

  PreprocessArgs pre;
  CLI::App* p = app.add_subcommand("preprocess", "Criteo TSV logs -> binary train/val/test datasets");
  p->add_option("--format", pre.format, "kaggle (train.txt) or terabyte (day_0 .. day_23)")
      ->check(CLI::IsMember(Names(kCriteoFormatNames)))
      ->capture_default_str();
  p->add_option("--input", pre.inputs, "input TSV file(s), days in order for terabyte")
      ->required()
      ->expected(1, -1);
  p->add_option("--output", pre.output, "output directory (train.bin, val.bin, test.bin)")->required();
  p->add_option("--index-mode", pre.index_mode, "modulo (id % table size) or vocabulary")
      ->check(CLI::IsMember(Names(kIndexModeNames)))
      ->capture_default_str();
  p->add_option("--table-sizes", pre.table_sizes, "modulo: 26 comma-separated sizes (default: Kaggle's)")
      ->delimiter(',');
  p->add_option("--max-index-range", pre.max_index_range, "modulo: cap every table size (0 = none)")
      ->capture_default_str();
  p->add_option("--frequency-threshold", pre.frequency_threshold,
                "vocabulary: ids seen fewer times share row 0")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  p->add_option("--split", pre.split, "reference (train/val/test) or none (all.bin)")
      ->check(CLI::IsMember(Names(kSplitModeNames)))
      ->capture_default_str();
  p->add_option("--threads", pre.threads, "parsing threads (0 = all)")->capture_default_str();
  p->add_flag("--skip-bad-lines", pre.skip_bad_lines, "skip and count bad lines instead of failing");
  p->add_option("--max-line-bytes", pre.max_line_bytes, "longest accepted line")->capture_default_str();
  p->add_option("--progress", pre.progress, "progress bar on stderr: auto (if a terminal), on, off")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();

  GenerateArgs gen;
  CLI::App* g = app.add_subcommand("generate", "synthetic Criteo-shaped data with a planted label model");
  g->add_option("--output", gen.output, "output file")->required();
  g->add_flag("--tsv", gen.tsv, "write Criteo TSV instead of the binary format");
  g->add_option("--samples", gen.options.num_samples, "number of samples")->capture_default_str();
  g->add_option("--table-sizes", gen.options.table_sizes, "comma-separated table sizes (default: Kaggle's 26)")
      ->delimiter(',');
  g->add_option("--max-table-size", gen.max_table_size, "cap every table size (0 = none)");
  g->add_option("--hotness", gen.options.hotness,
                "indices per table per sample (multi-hot): one number for every table, or comma-separated, "
                "one per table (MLPerf DLRM-DCNv2: 3,2,1,2,6,1,1,1,1,7,3,8,1,6,9,5,1,1,1,12,100,27,10,3,1,1)")
      ->delimiter(',')
      ->check(CLI::Range(1u, kMaxHotness))
      ->capture_default_str();
  g->add_option("--distribution", gen.distribution, "uniform or zipf (LFSR-scrambled per table)")
      ->check(CLI::IsMember(Names(kIndexDistributionNames)))
      ->capture_default_str();
  g->add_option("--alpha", gen.options.zipf_alpha, "Zipf exponent")->capture_default_str();
  g->add_option("--seed", gen.options.seed, "random seed")->capture_default_str();
  g->add_option("--dense-signal", gen.options.dense_signal, "label model: std of the dense logit")
      ->capture_default_str();
  g->add_option("--embedding-signal", gen.options.embedding_signal, "label model: std of the row logit")
      ->capture_default_str();
  g->add_option("--bias", gen.options.bias, "label model: logit bias")->capture_default_str();
  g->add_option("--threads", gen.options.threads, "threads (0 = all)")->capture_default_str();

  std::string inspect_path;
  bool header_only = false;
  CLI::App* in = app.add_subcommand("inspect", "print a dataset's header and verify it");
  in->add_option("file", inspect_path, "dataset file")->required();
  in->add_flag("--header-only", header_only, "check the header only, not the checksum and indices");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help prints and succeeds
  }
  if (p->parsed()) return RunPreprocess(pre);
  if (g->parsed()) return RunGenerate(gen);
  return RunInspect(inspect_path, header_only);
}

}  // namespace
}  // namespace cemb::data

int main(int argc, char** argv) { return cemb::data::Main(argc, argv); }
