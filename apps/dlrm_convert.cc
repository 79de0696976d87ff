// dlrm-convert: a model that dlrm-train wrote, its tables converted into
// smaller rows for serving (serve/convert.h, docs/serving.md "Smaller rows
// for serving"): int8 row-wise (FBGEMM's layout), fp16, bf16 (or fp32).
//
//   dlrm-convert --checkpoint runs/ck --format int8 --out runs/ck-int8
//   dlrm-serve --checkpoint runs/ck-int8
//
// Prints a line per table and the new checkpoint's path. Exit status 1:
// the checkpoint cannot be read or the new one written (the message says
// why); 2: a usage error.
#include <cstdio>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "base/enum_names.h"
#include "serve/convert.h"

namespace cemb::serve {
namespace {

int Main(int argc, char** argv) {
  CLI::App app{"dlrm-convert: convert a trained DLRM checkpoint's tables into smaller rows for serving"};
  std::string in, out, format = "int8";
  ConvertOptions o;
  app.add_option("--checkpoint", in, "the trained checkpoint (a directory with LATEST, or a step-N directory)")
      ->required();
  app.add_option("--out", out, "the directory of the converted checkpoint (step-N and LATEST are written there)")
      ->required();
  app.add_option("--format", format, absl::StrCat("the rows' format: ", JoinNames(kRowFormatNames)))
      ->capture_default_str();
  app.add_option("--ssd_cache_bytes", o.ssd_cache_bytes, "DRAM for reading the tables that trained on ssd")
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  absl::StatusOr<RowFormat> parsed = ParseName(kRowFormatNames, format, "--format");
  if (!parsed.ok()) {
    std::fprintf(stderr, "dlrm-convert: %s\n", std::string(parsed.status().message()).c_str());
    return 2;
  }
  o.format = *parsed;
  o.log = [](std::string_view line) { std::printf("%.*s\n", static_cast<int>(line.size()), line.data()); };
  absl::StatusOr<std::string> path = ConvertCheckpoint(in, out, o);
  if (!path.ok()) {
    std::fprintf(stderr, "dlrm-convert: %s\n", std::string(path.status().message()).c_str());
    return 1;
  }
  std::printf("dlrm-convert: wrote %s\n", path->c_str());
  return 0;
}

}  // namespace
}  // namespace cemb::serve

int main(int argc, char** argv) { return cemb::serve::Main(argc, argv); }
