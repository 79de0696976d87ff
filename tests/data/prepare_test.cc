#include "data/prepare.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "data/generator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/data/test_util.h"

namespace cemb::data {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::TempDir;

// PrepareData with its log collected.
struct Prepared {
  absl::StatusOr<PreparedData> data;
  std::string log;
};

Prepared Prepare(PrepareOptions o) {
  Prepared run;
  o.log = [&run](std::string_view line) { absl::StrAppend(&run.log, std::string(line), "\n"); };
  run.data = PrepareData(o);
  return run;
}

PrepareOptions Synthetic(const std::string& work_dir) {
  PrepareOptions o;
  o.data.source = DataSource::kSynthetic;
  o.data.samples = 3000;
  o.data.validation_fraction = 0.1;
  o.data.seed = 7;
  o.data.work_dir = work_dir;
  o.table_sizes = {100, 50, 20};
  o.threads = 2;
  return o;
}

// The only directory a run made under work_dir.
std::string MadeDir(const std::string& work_dir) {
  std::vector<std::string> dirs;
  for (const auto& e : fs::directory_iterator(work_dir)) dirs.push_back(e.path().string());
  EXPECT_EQ(dirs.size(), 1u) << absl::StrJoin(dirs, " ");
  return dirs.empty() ? "" : dirs[0];
}

TEST(PrepareData, SyntheticIsReusedWhenNothingChanged) {
  TempDir dir;
  Prepared first = Prepare(Synthetic(dir.path()));
  ASSERT_TRUE(first.data.ok()) << first.data.status();
  EXPECT_THAT(first.log, HasSubstr("data: generating 3000 synthetic samples"));
  EXPECT_EQ(first.data->train->num_samples(), 2700u);
  ASSERT_NE(first.data->validation, nullptr);
  EXPECT_EQ(first.data->validation->num_samples(), 300u);
  const std::string made = MadeDir(dir.path());
  const auto written = fs::last_write_time(made + "/train.bin");

  Prepared again = Prepare(Synthetic(dir.path()));
  ASSERT_TRUE(again.data.ok()) << again.data.status();
  EXPECT_EQ(again.log, absl::StrCat("data: reusing ", made, "\n"));
  EXPECT_EQ(fs::last_write_time(made + "/train.bin"), written);  // not written again
  EXPECT_EQ(again.data->train->payload_checksum(), first.data->train->payload_checksum());
  EXPECT_EQ(again.data->validation->payload_checksum(), first.data->validation->payload_checksum());
}

TEST(PrepareData, SyntheticIsMadeAgainWhenAParameterChanges) {
  TempDir dir;
  Prepared first = Prepare(Synthetic(dir.path()));
  ASSERT_TRUE(first.data.ok()) << first.data.status();
  PrepareOptions other = Synthetic(dir.path());
  other.data.seed = 8;
  Prepared second = Prepare(other);
  ASSERT_TRUE(second.data.ok()) << second.data.status();
  EXPECT_THAT(second.log, HasSubstr("data: generating 3000 synthetic samples"));
  EXPECT_THAT(second.log, Not(HasSubstr("reusing")));
  EXPECT_NE(second.data->train->payload_checksum(), first.data->train->payload_checksum());
  EXPECT_NE(second.data->train->path(), first.data->train->path());  // both kept

  PrepareOptions capped = Synthetic(dir.path());
  capped.data.max_ind_range = 30;
  Prepared third = Prepare(capped);
  ASSERT_TRUE(third.data.ok()) << third.data.status();
  EXPECT_THAT(third.log, HasSubstr("data: generating"));
  EXPECT_EQ(std::vector<uint64_t>(third.data->train->table_sizes().begin(), third.data->train->table_sizes().end()),
            (std::vector<uint64_t>{30, 30, 20}));
}

TEST(PrepareData, TruncatedPreparedFileIsMadeAgainNamingIt) {
  TempDir dir;
  ASSERT_TRUE(Prepare(Synthetic(dir.path())).data.ok());
  const std::string val = MadeDir(dir.path()) + "/val.bin";
  fs::resize_file(val, fs::file_size(val) - 1);
  Prepared again = Prepare(Synthetic(dir.path()));
  ASSERT_TRUE(again.data.ok()) << again.data.status();
  EXPECT_THAT(again.log, HasSubstr(absl::StrCat("data: ", val)));
  EXPECT_THAT(again.log, HasSubstr("preparing again\ndata: generating 3000"));
  EXPECT_EQ(again.data->validation->num_samples(), 300u);
}

TEST(PrepareData, DamagedRecipeIsMadeAgainNamingIt) {
  TempDir dir;
  ASSERT_TRUE(Prepare(Synthetic(dir.path())).data.ok());
  const std::string recipe = MadeDir(dir.path()) + "/RECIPE";
  std::ofstream(recipe) << "cemb-recipe v1\nsomething else\n";
  Prepared again = Prepare(Synthetic(dir.path()));
  ASSERT_TRUE(again.data.ok()) << again.data.status();
  EXPECT_THAT(again.log,
              HasSubstr(absl::StrCat("data: ", recipe, ":2: cannot read 'something else': preparing again")));
  EXPECT_THAT(Prepare(Synthetic(dir.path())).log, HasSubstr("data: reusing"));  // recorded anew
}

TEST(PrepareData, TsvIsPreprocessedAgainWhenTheSourceChanges) {
  TempDir dir;
  GeneratorOptions g;
  g.num_samples = 700;
  g.table_sizes.assign(kKaggleCardinalities.begin(), kKaggleCardinalities.end());
  for (uint64_t& s : g.table_sizes) s = std::min<uint64_t>(s, 1000);
  const std::string tsv = dir.File("day.tsv");
  ASSERT_TRUE(GenerateCriteoTsv(g, tsv).ok());
  PrepareOptions o;
  o.data.source = DataSource::kTsv;
  o.data.paths = {tsv};
  o.data.split = DataSplit::kNone;
  o.data.max_ind_range = 1000;
  o.data.work_dir = dir.File("work");
  Prepared first = Prepare(o);
  ASSERT_TRUE(first.data.ok()) << first.data.status();
  EXPECT_THAT(first.log, HasSubstr(absl::StrCat("data: preprocessing ", tsv)));
  EXPECT_EQ(first.data->train->num_samples(), 700u);
  Prepared same = Prepare(o);
  ASSERT_TRUE(same.data.ok()) << same.data.status();
  EXPECT_THAT(same.log, HasSubstr("data: reusing"));

  const uint64_t before = fs::file_size(tsv);
  g.num_samples = 800;
  ASSERT_TRUE(GenerateCriteoTsv(g, tsv).ok());
  Prepared changed = Prepare(o);
  ASSERT_TRUE(changed.data.ok()) << changed.data.status();
  EXPECT_THAT(changed.log, HasSubstr(absl::StrCat("/RECIPE: made from ", tsv, " of ", before, " bytes, now ",
                                                  fs::file_size(tsv), " bytes: preparing again")));
  EXPECT_EQ(changed.data->train->num_samples(), 800u);
}

TEST(PrepareData, BinaryIsSplitOnceAndAgainWhenTheSourceChanges) {
  TempDir dir;
  GeneratorOptions g;
  g.num_samples = 1000;
  g.table_sizes = {40, 30};
  const std::string file = dir.File("all.bin");
  ASSERT_TRUE(GenerateDataset(g, file).ok());
  PrepareOptions o;
  o.data.source = DataSource::kBinary;
  o.data.paths = {file};
  o.data.validation_fraction = 0.25;
  o.data.work_dir = dir.File("work");
  Prepared first = Prepare(o);
  ASSERT_TRUE(first.data.ok()) << first.data.status();
  EXPECT_THAT(first.log, HasSubstr("data: holding out the last 250 samples of " + file));
  EXPECT_EQ(first.data->train->num_samples(), 750u);
  EXPECT_EQ(first.data->validation->num_samples(), 250u);
  EXPECT_THAT(Prepare(o).log, HasSubstr("data: reusing"));

  // Other samples of the same size: told apart by the modification time
  // (set here, so that no clock granularity decides).
  const auto then = fs::last_write_time(file);
  g.seed = 2;
  ASSERT_TRUE(GenerateDataset(g, file).ok());
  fs::last_write_time(file, then + std::chrono::seconds(1));
  Prepared changed = Prepare(o);
  ASSERT_TRUE(changed.data.ok()) << changed.data.status();
  EXPECT_THAT(changed.log, HasSubstr(absl::StrCat("/RECIPE: made from ", file, " modified ")));
  EXPECT_THAT(changed.log, HasSubstr(": preparing again\ndata: holding out the last 250 samples"));
  EXPECT_NE(changed.data->validation->payload_checksum(), first.data->validation->payload_checksum());

  o.table_sizes = {40, 31};
  absl::StatusOr<PreparedData> other_sizes = PrepareData(o);
  EXPECT_THAT(std::string(other_sizes.status().message()),
              HasSubstr("table 1 has 30 rows in the dataset but 31 in the config"));
}

// Synthetic data takes data.hotness per table; a binary dataset must have
// the config's hotness when the config gives one (its own otherwise), and a
// difference names the file, the key and both lists.
TEST(PrepareData, HotnessPerTableAndTheDatasetsMustMatchTheConfigs) {
  TempDir dir;
  PrepareOptions o = Synthetic(dir.File("work"));
  o.config_name = "x.yaml: data";
  o.data.hotness = {3, 1, 10};
  Prepared synthetic = Prepare(o);
  ASSERT_TRUE(synthetic.data.ok()) << synthetic.data.status();
  EXPECT_THAT(synthetic.data->train->hotness(), ::testing::ElementsAre(3, 1, 10));
  o.data.hotness = {3, 1};
  EXPECT_THAT(std::string(PrepareData(o).status().message()),
              HasSubstr("x.yaml: data.hotness: 2 entries for 3 tables"));

  GeneratorOptions g;
  g.num_samples = 100;
  g.table_sizes = {40, 30};
  g.hotness = {4, 2};
  const std::string file = dir.File("all.bin");
  ASSERT_TRUE(GenerateDataset(g, file).ok());
  PrepareOptions b;
  b.data.source = DataSource::kBinary;
  b.data.paths = {file};
  b.data.split = DataSplit::kNone;
  b.data.work_dir = dir.File("work2");
  b.config_name = "x.yaml: data";
  Prepared own = Prepare(b);  // not given: the dataset's
  ASSERT_TRUE(own.data.ok()) << own.data.status();
  EXPECT_THAT(own.data->train->hotness(), ::testing::ElementsAre(4, 2));
  b.data.hotness = {4, 2};
  EXPECT_TRUE(PrepareData(b).ok());
  b.data.hotness = {1};
  EXPECT_THAT(std::string(PrepareData(b).status().message()),
              HasSubstr("all.bin: table 0 has hotness 4 in the dataset but 1 in x.yaml: data.hotness "
                        "(dataset: 4,2; x.yaml: data.hotness: 1)"));
}

TEST(PrepareData, MissingInputIsNamedBeforeAnythingIsWritten) {
  TempDir dir;
  PrepareOptions o;
  o.data.source = DataSource::kTsv;
  o.data.paths = {dir.File("nope.tsv")};
  o.data.work_dir = dir.File("work");
  o.config_name = "x.yaml: data";
  absl::StatusOr<PreparedData> r = PrepareData(o);
  EXPECT_TRUE(absl::IsNotFound(r.status())) << r.status();
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("x.yaml: data.path: " + dir.File("nope.tsv") + ": no such file"));
  EXPECT_FALSE(fs::exists(dir.File("work")));
}

TEST(PrepareData, TemporaryWorkDirectoryGoesWithThePreparedData) {
  PrepareOptions o = Synthetic("");
  std::string work_dir;
  {
    absl::StatusOr<PreparedData> d = PrepareData(o);
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_TRUE(d->temporary_work_dir);
    work_dir = d->work_dir;
    PreparedData moved = *std::move(d);
    EXPECT_TRUE(fs::exists(work_dir));
    EXPECT_EQ(moved.train->num_samples(), 2700u);
  }
  EXPECT_FALSE(work_dir.empty());
  EXPECT_FALSE(fs::exists(work_dir));
}

// The check itself, on a hand-made directory.
TEST(ReuseCheck, NamesWhatDiffers) {
  TempDir dir;
  GeneratorOptions g;
  g.num_samples = 100;
  g.table_sizes = {10};
  ASSERT_TRUE(GenerateDataset(g, dir.File("train.bin")).ok());
  const std::string input = dir.File("input.txt");
  std::ofstream(input) << "12345";
  Recipe recipe;
  recipe.settings = {{"source", "test"}, {"seed", "1"}};
  recipe.inputs.push_back(*InputFile::Stat(input));

  absl::StatusOr<std::vector<PreparedFile>> none = ReuseCheck(dir.path(), recipe);
  EXPECT_TRUE(absl::IsNotFound(none.status())) << none.status();
  EXPECT_THAT(std::string(none.status().message()), HasSubstr(dir.File("RECIPE") + ": nothing prepared yet"));

  ASSERT_TRUE(WriteRecipe(dir.path(), recipe, {"train.bin"}).ok());
  absl::StatusOr<std::vector<PreparedFile>> same = ReuseCheck(dir.path(), recipe);
  ASSERT_TRUE(same.ok()) << same.status();
  ASSERT_EQ(same->size(), 1u);
  EXPECT_EQ((*same)[0].name, "train.bin");
  EXPECT_EQ((*same)[0].samples, 100u);

  Recipe seed2 = recipe;
  seed2.settings[1].second = "2";
  EXPECT_EQ(ReuseCheck(dir.path(), seed2).status().message(), dir.File("RECIPE") + ": made with seed=1, now seed=2");

  Recipe touched = recipe;
  touched.inputs[0].modified_ns += 1;
  const absl::Status t = ReuseCheck(dir.path(), touched).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(t)) << t;
  EXPECT_THAT(std::string(t.message()), HasSubstr(absl::StrCat("made from ", recipe.inputs[0].path, " modified ")));

  Recipe grown = recipe;
  grown.inputs[0].bytes = 6;
  EXPECT_THAT(std::string(ReuseCheck(dir.path(), grown).status().message()),
              HasSubstr(absl::StrCat("made from ", recipe.inputs[0].path, " of 5 bytes, now 6 bytes")));

  // An output replaced by other samples is not the one recorded.
  g.seed = 2;
  ASSERT_TRUE(GenerateDataset(g, dir.File("train.bin")).ok());
  EXPECT_THAT(std::string(ReuseCheck(dir.path(), recipe).status().message()),
              HasSubstr(dir.File("train.bin") + " holds 100 samples (payload checksum "));
  fs::remove(dir.File("train.bin"));
  EXPECT_THAT(std::string(ReuseCheck(dir.path(), recipe).status().message()), HasSubstr(dir.File("train.bin")));
}

}  // namespace
}  // namespace cemb::data
