// Which JSON library parses dlrm-serve's infer requests: the body of a
// typical Open Inference Protocol request of the Kaggle-shaped model
// (--samples of "dense" FP32 [n, 13] and "sparse" INT64 [n, 26], flat data
// arrays, as examples/serve_client.py sends them), parsed into a float and
// an int64 vector by
//   - nlohmann::json (a DOM of std::map / std::vector nodes),
//   - simdjson's DOM (dom::parser, reused: its tape is allocated once),
//   - simdjson's On-Demand (ondemand::parser, reused).
// Reports bytes/s and the time per body; server/infer_request.cc uses the
// one this chose (docs/serving.md).
//
//   json_parse_bench [--benchmark_filter=...]     (64 and 256 samples)
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "nlohmann/json.hpp"
#include "simdjson.h"

namespace {

constexpr int kDense = 13;
constexpr int kTables = 26;

std::string Body(int64_t n) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> x(0.f, 8.f);
  std::uniform_int_distribution<int64_t> row(0, 99'999);
  std::string s = "{\"id\":\"42\",\"inputs\":[{\"name\":\"dense\",\"shape\":[" + std::to_string(n) +
                  ",13],\"datatype\":\"FP32\",\"data\":[";
  char buf[32];
  for (int64_t i = 0; i < n * kDense; ++i) {
    std::snprintf(buf, sizeof buf, "%s%.7g", i ? "," : "", x(rng));
    s += buf;
  }
  s += "]},{\"name\":\"sparse\",\"shape\":[" + std::to_string(n) + ",26],\"datatype\":\"INT64\",\"data\":[";
  for (int64_t i = 0; i < n * kTables; ++i) {
    if (i) s += ',';
    s += std::to_string(row(rng));
  }
  s += "]}]}";
  return s;
}

struct Parsed {
  std::vector<float> dense;
  std::vector<int64_t> sparse;

  // One element of input `name` (a simdjson element or value).
  template <typename V>
  void Add(std::string_view name, V v) {
    if (name == "dense") {
      dense.push_back(static_cast<float>(double(v)));
    } else {
      sparse.push_back(int64_t(v));
    }
  }
};

// Checks what the last iteration parsed; reports the bytes parsed.
void Finish(benchmark::State& state, const Parsed& p, int64_t n, size_t body_bytes) {
  if (static_cast<int64_t>(p.dense.size()) != n * kDense || static_cast<int64_t>(p.sparse.size()) != n * kTables) {
    state.SkipWithError("parsed the wrong number of values");
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(body_bytes));
}

void Nlohmann(benchmark::State& state) {
  const int64_t n = state.range(0);
  const std::string body = Body(n);
  Parsed p;
  for (auto _ : state) {
    p.dense.clear();
    p.sparse.clear();
    const nlohmann::json j = nlohmann::json::parse(body);
    for (const nlohmann::json& in : j.at("inputs")) {
      const std::string& name = in.at("name").get_ref<const std::string&>();
      for (const nlohmann::json& v : in.at("data")) {
        if (name == "dense") {
          p.dense.push_back(v.get<float>());
        } else {
          p.sparse.push_back(v.get<int64_t>());
        }
      }
    }
    benchmark::DoNotOptimize(p.dense.data());
  }
  Finish(state, p, n, body.size());
  state.counters["body_bytes"] = static_cast<double>(body.size());
}

void SimdjsonDom(benchmark::State& state) {
  const int64_t n = state.range(0);
  const std::string body = Body(n);
  simdjson::dom::parser parser;
  Parsed p;
  for (auto _ : state) {
    p.dense.clear();
    p.sparse.clear();
    simdjson::dom::element doc;
    if (parser.parse(body).get(doc) != simdjson::SUCCESS) state.SkipWithError("parse");
    for (simdjson::dom::element in : doc["inputs"].get_array()) {
      const std::string_view name = in["name"].get_string();
      for (simdjson::dom::element v : in["data"].get_array()) p.Add(name, v);
    }
    benchmark::DoNotOptimize(p.dense.data());
  }
  Finish(state, p, n, body.size());
}

void SimdjsonOnDemand(benchmark::State& state) {
  const int64_t n = state.range(0);
  const simdjson::padded_string body(Body(n));
  simdjson::ondemand::parser parser;
  Parsed p;
  for (auto _ : state) {
    p.dense.clear();
    p.sparse.clear();
    simdjson::ondemand::document doc = parser.iterate(body);
    for (simdjson::ondemand::object in : doc["inputs"].get_array()) {
      std::string_view name;
      for (simdjson::ondemand::field f : in) {
        const std::string_view key = f.unescaped_key();
        if (key == "name") {
          name = f.value().get_string();
        } else if (key == "data") {
          for (simdjson::ondemand::value v : f.value().get_array()) p.Add(name, v);
        }
      }
    }
    benchmark::DoNotOptimize(p.dense.data());
  }
  Finish(state, p, n, body.size());
}

BENCHMARK(Nlohmann)->Arg(64)->Arg(256)->Unit(benchmark::kMicrosecond);
BENCHMARK(SimdjsonDom)->Arg(64)->Arg(256)->Unit(benchmark::kMicrosecond);
BENCHMARK(SimdjsonOnDemand)->Arg(64)->Arg(256)->Unit(benchmark::kMicrosecond);

}  // namespace

int main(int argc, char** argv) {
  cemb::bench::RequireOptimizedBuild(argv[0]);
  benchmark::Initialize(&argc, argv);
  cemb::bench::AddMachineContext();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
