#include "server/protocol.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cemb::server {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A model of 3 dense features and 2 tables, and the Criteo-shaped one.
const ModelInputs kSmall{.num_dense = 3, .num_tables = 2, .table_rows = {10, 20}};
const ModelInputs kCriteo{.num_dense = 13, .num_tables = 26, .criteo = true};

std::string Input(const std::string& name, const std::string& datatype, const std::string& shape,
                  const std::string& data) {
  return absl::StrCat(R"({"name":")", name, R"(","datatype":")", datatype, R"(","shape":)", shape,
                      R"(,"data":)", data, "}");
}

std::string Body(const std::vector<std::string>& inputs, const std::string& extra = "") {
  return absl::StrCat(R"({)", extra, R"("inputs":[)", absl::StrJoin(inputs, ","), "]}");
}

std::string Dense2() { return Input("dense", "FP32", "[2,3]", "[0.5,1,2,3,4,5.25]"); }

// The status of parsing `body` with the small model; OK requests fail the test.
absl::Status Error(const std::string& body, const ModelInputs& model = kSmall, RequestLimits limits = {}) {
  absl::StatusOr<InferRequest> r = ParseInferRequest(body, model, limits);
  EXPECT_FALSE(r.ok()) << body;
  return r.status();
}

TEST(ParseInferRequest, OneIdPerTableFlatData) {
  absl::StatusOr<InferRequest> r =
      ParseInferRequest(Body({Dense2(), Input("sparse", "INT64", "[2,2]", "[7,8,9,10]")}, R"("id":"req-1",)"), kSmall);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->id, "req-1");
  EXPECT_EQ(r->form, InputForm::kPreprocessed);
  EXPECT_EQ(r->size, 2);
  EXPECT_THAT(r->dense, ElementsAre(0.5f, 1.f, 2.f, 3.f, 4.f, 5.25f));
  ASSERT_EQ(r->offsets.size(), 2u);
  EXPECT_THAT(r->offsets[0], ElementsAre(0, 1, 2));
  EXPECT_THAT(r->offsets[1], ElementsAre(0, 1, 2));
  EXPECT_THAT(r->indices[0], ElementsAre(7, 9));  // table 0: sample 0's, sample 1's
  EXPECT_THAT(r->indices[1], ElementsAre(8, 10));
}

TEST(ParseInferRequest, NestedDataEqualsFlat) {
  absl::StatusOr<InferRequest> r = ParseInferRequest(
      Body({Input("sparse", "INT32", "[2,2]", "[[7,8],[9,10]]"),
            Input("dense", "FP32", "[2,3]", "[[0.5,1,2],[3,4,5.25]]")},
           R"("parameters":{"x":1},"outputs":[{"name":"probabilities"}],)"),
      kSmall);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->id, "");
  EXPECT_THAT(r->dense, ElementsAre(0.5f, 1.f, 2.f, 3.f, 4.f, 5.25f));
  EXPECT_THAT(r->indices[0], ElementsAre(7, 9));
  EXPECT_THAT(r->indices[1], ElementsAre(8, 10));
}

TEST(ParseInferRequest, MultiHotIdsFollowTheirLengthsSampleBySample) {
  // sample 0: table 0 {1, 2}, table 1 {}; sample 1: table 0 {3}, table 1 {4, 5, 6}
  absl::StatusOr<InferRequest> r = ParseInferRequest(
      Body({Dense2(), Input("sparse_lengths", "INT64", "[2,2]", "[2,0,1,3]"),
            Input("sparse", "INT64", "[6]", "[1,2,3,4,5,6]")}),
      kSmall);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->offsets[0], ElementsAre(0, 2, 3));
  EXPECT_THAT(r->indices[0], ElementsAre(1, 2, 3));
  EXPECT_THAT(r->offsets[1], ElementsAre(0, 0, 3));
  EXPECT_THAT(r->indices[1], ElementsAre(4, 5, 6));
}

TEST(ParseInferRequest, RawCriteoHexStringsAndNulls) {
  std::vector<std::string> ints, cats;
  for (int i = 0; i < 13; ++i) ints.push_back(i == 1 ? "null" : absl::StrCat(i - 1));
  for (int c = 0; c < 26; ++c) cats.push_back(c == 3 ? R"("")" : c == 4 ? R"("FFFFFFFF")" : absl::StrCat(R"(")", absl::Hex(c * 17), R"(")"));
  absl::StatusOr<InferRequest> r = ParseInferRequest(
      Body({Input("int_features", "INT64", "[1,13]", absl::StrCat("[", absl::StrJoin(ints, ","), "]")),
            Input("cat_features", "BYTES", "[1,26]", absl::StrCat("[", absl::StrJoin(cats, ","), "]"))}),
      kCriteo);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->form, InputForm::kCriteo);
  ASSERT_EQ(r->rows.size(), 1u);
  const data::CriteoRow& row = r->rows[0];
  EXPECT_EQ(row.dense[0], -1);
  EXPECT_EQ(row.dense[12], 11);
  EXPECT_TRUE(row.dense_missing(1));
  EXPECT_FALSE(row.dense_missing(0));
  EXPECT_EQ(row.categorical[2], 34u);
  EXPECT_EQ(row.categorical[3], 0u);
  EXPECT_TRUE(row.categorical_missing(3));
  EXPECT_EQ(row.categorical[4], 0xFFFFFFFFu);
}

TEST(ParseInferRequest, RawCriteoIntegerIds) {
  std::vector<std::string> cats(26, "4294967295");
  absl::StatusOr<InferRequest> r = ParseInferRequest(
      Body({Input("int_features", "INT32", "[1,13]", absl::StrCat("[", absl::StrJoin(std::vector<std::string>(13, "5"), ","), "]")),
            Input("cat_features", "INT64", "[1,26]", absl::StrCat("[", absl::StrJoin(cats, ","), "]"))}),
      kCriteo);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->rows[0].categorical[25], 0xFFFFFFFFu);
  EXPECT_EQ(r->rows[0].dense[7], 5);
}

// --- every bad request names what is wrong --------------------------------

TEST(ParseInferRequest, MalformedJson) {
  // Where it breaks: the byte (counted from 1), line and column, and what
  // was read there; the end of a cut body is the byte after its last.
  EXPECT_THAT(Error(R"({"inputs":[)").message(),
              HasSubstr("malformed JSON at byte 12 (line 1, column 12): syntax error while parsing value - "
                        "unexpected end of input"));
  EXPECT_THAT(Error("").message(), HasSubstr("malformed JSON at byte 1 (line 1, column 1)"));
  EXPECT_THAT(Error("{\"id\":\"a\",\n \"inputs\":[tru]}").message(),
              AllOf(HasSubstr("malformed JSON at byte 26 (line 2, column 15)"), HasSubstr("invalid literal")));
  EXPECT_THAT(Error(R"({"inputs":[1,,2]})").message(), HasSubstr("at byte 14 (line 1, column 14)"));
  EXPECT_THAT(Error("{\"id\":\"\xff\"}").message(), HasSubstr("at byte 8 (line 1, column 8): syntax error while "
                                                            "parsing value - invalid string: ill-formed UTF-8 byte"));
  // What nlohmann::json accepts but simdjson does not: simdjson's own words.
  EXPECT_THAT(Error(R"({"inputs":[123456789012345678901234567890]})").message(), HasSubstr("malformed JSON: "));
  EXPECT_THAT(Error("[1,2]").message(), HasSubstr("not a JSON object"));
  EXPECT_THAT(Error(R"({"id":5,"inputs":[]})").message(), HasSubstr("'id' is an integer, not a string"));
  EXPECT_THAT(Error(R"({"inputs":{}})").message(), HasSubstr("'inputs' is an object, not an array"));
  EXPECT_THAT(Error(R"({"inputs":[]})").message(), HasSubstr("'inputs' is empty"));
  EXPECT_THAT(Error(R"({"id":"x"})").message(), HasSubstr("missing 'inputs'"));
  EXPECT_THAT(Error(R"({"inputs":[3]})").message(), HasSubstr("inputs[0] is an integer, not an object"));
  EXPECT_THAT(Error(R"({"inputs":[{"datatype":"FP32"}]})").message(), HasSubstr("inputs[0] has no string 'name'"));
  EXPECT_THAT(Error(R"({"inputs":[{"name":"dense","datatype":"FP32","shape":[2,3]}]})").message(),
              HasSubstr("input 'dense': has no array 'data'"));
  EXPECT_THAT(Error(R"({"inputs":[{"name":"dense","datatype":"FP32","shape":[2,-3],"data":[]}]})").message(),
              HasSubstr("input 'dense': 'shape' holds something other than non-negative integers"));
}

TEST(ParseInferRequest, WrongDatatype) {
  const absl::Status s = Error(Body({Input("dense", "INT64", "[2,3]", "[0,1,2,3,4,5]"),
                                     Input("sparse", "INT64", "[2,2]", "[7,8,9,10]")}));
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_THAT(s.message(), HasSubstr("input 'dense': datatype INT64, expected FP32"));
  EXPECT_THAT(Error(Body({Dense2(), Input("sparse", "FP32", "[2,2]", "[7,8,9,10]")})).message(),
              HasSubstr("input 'sparse': datatype FP32, expected INT64"));
  // An element of the wrong JSON type names its sample and table.
  EXPECT_THAT(Error(Body({Dense2(), Input("sparse", "INT64", "[2,2]", "[7,8,9.5,10]")})).message(),
              HasSubstr("input 'sparse': sample 1, table 0: a number with a fraction or an exponent, not an integer"));
  EXPECT_THAT(Error(Body({Input("dense", "FP32", "[2,3]", R"([0,1,2,3,"4",5])"),
                          Input("sparse", "INT64", "[2,2]", "[7,8,9,10]")}))
                  .message(),
              HasSubstr("input 'dense': sample 1, feature 1: a string, not a number"));
  EXPECT_THAT(Error(Body({Input("dense", "FP32", "[1,3]", "[0,1,1e39]"), Input("sparse", "INT64", "[1,2]", "[7,8]")}))
                  .message(),
              HasSubstr("input 'dense': sample 0, feature 2: 1e+39 is not a finite FP32"));
}

TEST(ParseInferRequest, WrongShape) {
  EXPECT_THAT(Error(Body({Input("dense", "FP32", "[2,4]", "[0,1,2,3,4,5,6,7]"),
                          Input("sparse", "INT64", "[2,2]", "[7,8,9,10]")}))
                  .message(),
              HasSubstr("input 'dense': shape [2, 4], expected [n, 3]"));
  EXPECT_THAT(Error(Body({Dense2(), Input("sparse", "INT64", "[3,2]", "[7,8,9,10,11,12]")})).message(),
              HasSubstr("input 'sparse': shape [3, 2] holds 3 samples, input 'dense' 2"));
  EXPECT_THAT(Error(Body({Dense2(), Input("sparse", "INT64", "[2,2]", "[7,8,9]")})).message(),
              HasSubstr("input 'sparse': 'data' holds 3 elements, not 4 for shape [2, 2]"));
  EXPECT_THAT(Error(Body({Dense2(), Input("sparse", "INT64", "[2,2]", "[7,8,9,10,11]")})).message(),
              HasSubstr("input 'sparse': 'data' holds more than 4 elements"));
  EXPECT_THAT(Error(Body({Dense2(), Input("sparse", "INT64", "[2,2]", "[[7,8],[9]]")})).message(),
              HasSubstr("input 'sparse': 'data' row 1 has 1 elements, not 2"));
  EXPECT_THAT(Error(Body({Dense2(), Input("sparse", "INT64", "[2,2]", "[[7,8],9,10]")})).message(),
              HasSubstr("mixes nested and flat elements (row 1 is an integer)"));
  EXPECT_THAT(Error(Body({Input("dense", "FP32", "[0,3]", "[]"), Input("sparse", "INT64", "[0,2]", "[]")})).message(),
              HasSubstr("a request holds at least one sample"));
  EXPECT_THAT(Error(Body({Input("dense", "FP32", "[2,3,1]", "[0,1,2,3,4,5]")})).message(),
              HasSubstr("input 'dense': 'shape' has more than 2 dimensions"));
  // A shape no body could fill is refused before anything is allocated.
  EXPECT_THAT(Error(Body({Input("dense", "FP32", "[1000000000,3]", "[]")})).message(),
              HasSubstr("holds more elements than the body has bytes"));
}

TEST(ParseInferRequest, TooManySamples) {
  const absl::Status s = Error(Body({Dense2(), Input("sparse", "INT64", "[2,2]", "[7,8,9,10]")}), kSmall,
                               {.max_samples = 1});
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("2 samples, more than a request may hold (1)"));
}

TEST(ParseInferRequest, IndexThatIsNoRowNamesSampleAndTable) {
  // kSmall's tables have 10 and 20 rows.
  EXPECT_TRUE(ParseInferRequest(Body({Dense2(), Input("sparse", "INT64", "[2,2]", "[9,19,0,0]")}), kSmall).ok());
  EXPECT_THAT(Error(Body({Dense2(), Input("sparse", "INT64", "[2,2]", "[7,8,-1,9]")})).message(),
              HasSubstr("input 'sparse': sample 1, table 0: row -1 is negative"));
  EXPECT_THAT(Error(Body({Dense2(), Input("sparse", "INT64", "[2,2]", "[7,20,9,9]")})).message(),
              HasSubstr("input 'sparse': sample 0, table 1: row 20 is out of range (the table has 20 rows)"));
  EXPECT_THAT(Error(Body({Dense2(), Input("sparse", "INT64", "[2,2]", "[7,8,9,4294967296]")})).message(),
              HasSubstr("input 'sparse': sample 1, table 1: row 4294967296 is out of range"));
  // Without the tables' rows, below 2^31.
  ModelInputs unsized = kSmall;
  unsized.table_rows.clear();
  EXPECT_TRUE(ParseInferRequest(Body({Dense2(), Input("sparse", "INT64", "[2,2]", "[7,8,9,2147483647]")}), unsized).ok());
  EXPECT_THAT(Error(Body({Dense2(), Input("sparse", "INT64", "[2,2]", "[7,8,9,2147483648]")}), unsized).message(),
              HasSubstr("sample 1, table 1: row 2147483648 is out of range (the table has 2147483648 rows)"));
  EXPECT_THAT(Error(Body({Dense2(), Input("sparse", "INT64", "[2,2]", "[7,8,9,18446744073709551615]")})).message(),
              HasSubstr("input 'sparse': sample 1, table 1: 18446744073709551615 is beyond int64"));
}

TEST(ParseInferRequest, NegativeOrInconsistentLength) {
  const std::string sparse6 = Input("sparse", "INT64", "[6]", "[1,2,3,4,5,6]");
  EXPECT_THAT(Error(Body({Dense2(), Input("sparse_lengths", "INT64", "[2,2]", "[2,0,-1,3]"), sparse6})).message(),
              HasSubstr("input 'sparse_lengths': sample 1, table 0: negative length -1"));
  EXPECT_THAT(Error(Body({Dense2(), Input("sparse_lengths", "INT64", "[2,2]", "[2,0,1,2]"), sparse6})).message(),
              HasSubstr("input 'sparse': shape [6]; with 'sparse_lengths' it is [5]"));
  EXPECT_THAT(Error(Body({Dense2(), Input("sparse_lengths", "INT64", "[2,2]", "[2,0,1,300]"), sparse6})).message(),
              HasSubstr("sample 1, table 1: length 300 is more than input 'sparse' holds (6)"));
  EXPECT_THAT(Error(Body({Dense2(), Input("sparse_lengths", "INT64", "[2,2]", "[2,0,1,3]"),
                          Input("sparse", "INT64", "[6]", "[1,2,3,4,5.5,6]")}))
                  .message(),
              HasSubstr("input 'sparse': sample 1, table 1, id 1: a number with"));
}

TEST(ParseInferRequest, MissingUnknownOrMixedInputs) {
  EXPECT_THAT(Error(Body({Dense2()})).message(), HasSubstr("missing input 'sparse'"));
  EXPECT_THAT(Error(Body({Input("sparse", "INT64", "[2,2]", "[7,8,9,10]")})).message(),
              HasSubstr("missing input 'dense'"));
  EXPECT_THAT(Error(Body({Dense2(), Input("sparse", "INT64", "[2,2]", "[7,8,9,10]"),
                          Input("weights", "FP32", "[1]", "[1]")}))
                  .message(),
              HasSubstr("input 'weights': unknown input"));
  EXPECT_THAT(Error(Body({Dense2(), Dense2()})).message(), HasSubstr("input 'dense': given twice"));
  EXPECT_THAT(Error(Body({Dense2(), Input("cat_features", "BYTES", "[2,26]", "[]")}), kCriteo).message(),
              HasSubstr("mixes the preprocessed inputs"));
  EXPECT_THAT(Error(Body({Input("int_features", "INT64", "[1,13]", "[0,0,0,0,0,0,0,0,0,0,0,0,0]")}), kCriteo).message(),
              HasSubstr("missing input 'cat_features'"));
  EXPECT_THAT(Error(Body({Input("int_features", "INT64", "[1,13]", "[0,0,0,0,0,0,0,0,0,0,0,0,0]")}), kSmall).message(),
              HasSubstr("the model takes no raw Criteo features"));
  EXPECT_THAT(Error(Body({Dense2(), Input("sparse", "INT64", "[2,2]", "[7,8,9,10]")},
                         R"("outputs":[{"name":"logits"}],)"))
                  .message(),
              HasSubstr("unknown output 'logits'"));
}

TEST(ParseInferRequest, BadCriteoValuesNameSampleAndTable) {
  std::vector<std::string> cats(26, R"("a")");
  cats[5] = R"("xyz")";
  const std::string ints = Input("int_features", "INT64", "[1,13]", "[0,0,0,0,0,0,0,0,0,0,0,0,0]");
  EXPECT_THAT(Error(Body({ints, Input("cat_features", "BYTES", "[1,26]", absl::StrCat("[", absl::StrJoin(cats, ","), "]"))}),
                    kCriteo)
                  .message(),
              HasSubstr("input 'cat_features': sample 0, table 5 (C6): 'xyz' is not an id of 1 to 8 hex digits"));
  cats[5] = R"("123456789")";
  EXPECT_THAT(Error(Body({ints, Input("cat_features", "BYTES", "[1,26]", absl::StrCat("[", absl::StrJoin(cats, ","), "]"))}),
                    kCriteo)
                  .message(),
              HasSubstr("'123456789' is not an id"));
  std::vector<std::string> ids(26, "1");
  ids[2] = "-4";
  EXPECT_THAT(Error(Body({ints, Input("cat_features", "INT64", "[1,26]", absl::StrCat("[", absl::StrJoin(ids, ","), "]"))}),
                    kCriteo)
                  .message(),
              HasSubstr("sample 0, table 2 (C3): id -4 is not in [0, 2^32)"));
  EXPECT_THAT(Error(Body({ints, Input("cat_features", "FP32", "[1,26]", "[]")}), kCriteo).message(),
              HasSubstr("input 'cat_features': datatype FP32, expected BYTES"));
}

TEST(Protocol, AnswersAreValidJson) {
  EXPECT_EQ(InferResponseJson("dlrm", "12", "", std::vector<float>{0.25f, 1.f / 3}),
            R"({"model_name":"dlrm","model_version":"12","outputs":[{"name":"probabilities","datatype":"FP32",)"
            R"("shape":[2],"data":[0.25,0.33333334]}]})");
  EXPECT_THAT(InferResponseJson("dlrm", "12", "r\"1", {}), HasSubstr(R"("id":"r\"1")"));
  // Control characters and bytes outside ASCII (perhaps invalid UTF-8) are escaped.
  EXPECT_EQ(ErrorJson("a\x01\xff\n"), R"({"error":"a\u0001\u00ff\n"})");
  EXPECT_EQ(ModelMetadataJson("m", "3", kSmall),
            R"({"name":"m","versions":["3"],"platform":"cemb_dlrm","inputs":[)"
            R"({"name":"dense","datatype":"FP32","shape":[-1,3]},{"name":"sparse","datatype":"INT64","shape":[-1,2]},)"
            R"({"name":"sparse_lengths","datatype":"INT64","shape":[-1,2]}],)"
            R"("outputs":[{"name":"probabilities","datatype":"FP32","shape":[-1]}],"parameters":{"table_rows":[10,20]}})");
  EXPECT_THAT(ModelMetadataJson("m", "3", kCriteo),
              HasSubstr(R"({"name":"cat_features","datatype":"BYTES","shape":[-1,26]})"));
}

}  // namespace
}  // namespace cemb::server
