// cemb._cemb: the Python binding of python/collection.h. Arrays cross as
// NumPy arrays through the buffer protocol (a CPU torch tensor's .numpy()
// shares its memory), so the module needs no libtorch and does not depend on
// its C++ ABI; python/cemb/torch.py is the PyTorch layer over it. Every call
// that does work releases the GIL; a mutex per collection makes calls from
// several Python threads on one collection take turns. A Status that is not
// OK becomes a Python exception carrying its message: ValueError
// (InvalidArgument), IndexError (OutOfRange), FileNotFoundError (NotFound),
// RuntimeError (FailedPrecondition), OSError (everything else: I/O).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"
#include "python/status.h"
#include "python/collection.h"

namespace py = pybind11;

namespace cemb::python {
namespace {


// A 1-D C-contiguous int32 or int64 array, or TypeError / ValueError naming it.
IndexArray Indices(const py::handle& h, const std::string& what) {
  if (!py::isinstance<py::array>(h)) throw py::type_error(absl::StrCat(what, ": not an array"));
  py::array a = py::reinterpret_borrow<py::array>(h);
  IndexArray out{.data = a.data(), .size = a.size()};
  if (a.dtype().is(py::dtype::of<int32_t>())) {
    out.type = IndexType::kInt32;
  } else if (a.dtype().is(py::dtype::of<int64_t>())) {
    out.type = IndexType::kInt64;
  } else {
    throw py::type_error(absl::StrCat(what, ": dtype ", std::string(py::str(a.dtype())), " where int32 or int64 is needed"));
  }
  if (a.ndim() != 1) throw py::value_error(absl::StrCat(what, ": ", a.ndim(), "-D where 1-D is needed"));
  if (!(a.flags() & py::array::c_style)) throw py::value_error(absl::StrCat(what, ": not contiguous"));
  return out;
}

// A 1-D C-contiguous float32 array, or TypeError / ValueError naming it.
std::span<const float> Weights(const py::handle& h, const std::string& what) {
  if (!py::isinstance<py::array>(h)) throw py::type_error(absl::StrCat(what, ": not an array"));
  py::array a = py::reinterpret_borrow<py::array>(h);
  if (!a.dtype().is(py::dtype::of<float>())) {
    throw py::type_error(absl::StrCat(what, ": dtype ", std::string(py::str(a.dtype())), " where float32 is needed"));
  }
  if (a.ndim() != 1) throw py::value_error(absl::StrCat(what, ": ", a.ndim(), "-D where 1-D is needed"));
  if (!(a.flags() & py::array::c_style)) throw py::value_error(absl::StrCat(what, ": not contiguous"));
  return {static_cast<const float*>(a.data()), static_cast<size_t>(a.size())};
}

// weights: None (unweighted) or a list of one float32 array per feature.
FeatureArrays Features(const std::vector<std::string>& names, const py::list& values, const py::list& splits,
                       bool lengths, const py::object& weights = py::none()) {
  if (values.size() != names.size() || splits.size() != names.size()) {
    throw py::value_error(absl::StrCat("features: ", values.size(), " values and ", splits.size(), " ",
                                       lengths ? "lengths" : "offsets", " where the collection has ", names.size(),
                                       " features"));
  }
  FeatureArrays f{.lengths = lengths};
  for (size_t i = 0; i < names.size(); ++i) {
    f.values.push_back(Indices(values[i], absl::StrCat("feature '", names[i], "' values")));
    f.splits.push_back(Indices(splits[i], absl::StrCat("feature '", names[i], "' ", lengths ? "lengths" : "offsets")));
  }
  if (!weights.is_none()) {
    const py::list w = weights.cast<py::list>();
    if (w.size() != names.size()) {
      throw py::value_error(absl::StrCat("features: ", w.size(), " weights arrays where the collection has ",
                                         names.size(), " features"));
    }
    for (size_t i = 0; i < names.size(); ++i) {
      f.weights.push_back(Weights(w[i], absl::StrCat("feature '", names[i], "' weights")));
    }
  }
  return f;
}

// A 2-D C-contiguous float32 array as a matrix.
template <typename Array>
auto Matrix(Array& a, const char* what) {
  if (!a.dtype().is(py::dtype::of<float>())) {
    throw py::type_error(absl::StrCat(what, ": dtype ", std::string(py::str(a.dtype())), " where float32 is needed"));
  }
  if (a.ndim() != 2) throw py::value_error(absl::StrCat(what, ": ", a.ndim(), "-D where 2-D is needed"));
  if (!(a.flags() & py::array::c_style)) throw py::value_error(absl::StrCat(what, ": not contiguous"));
  if constexpr (std::is_const_v<Array>) {
    return ConstMatrixView(static_cast<const float*>(a.data()), a.shape(0), a.shape(1), a.shape(1));
  } else {
    if (!a.writeable()) throw py::value_error(absl::StrCat(what, ": read-only"));
    return MatrixView{static_cast<float*>(a.mutable_data()), a.shape(0), a.shape(1), a.shape(1)};
  }
}

// The collection and the mutex its callers take turns on.
struct PyCollection {
  std::unique_ptr<Collection> c;
  std::mutex mu;

  template <typename F>
  void Run(F&& f) {
    absl::Status s;
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mu);
      s = f(*c);
    }
    Check(s);
  }
};

StorageKind Storage(const std::string& name) {
  absl::StatusOr<StorageKind> kind = ParseStorageKind(name);
  Check(kind.status());
  return *kind;
}

// A table's "pooling": "sum" or "mean"; "sum" when the spec has none.
Pooling PoolingOf(const py::dict& table) {
  if (!table.contains("pooling")) return Pooling::kSum;
  absl::StatusOr<Pooling> pooling = ParseName(
      kPoolingNames, table["pooling"].cast<std::string>(),
      absl::StrCat("table '", table["name"].cast<std::string>(), "' pooling"));
  Check(pooling.status());
  return *pooling;
}

std::unique_ptr<PyCollection> Make(const py::list& tables, int64_t dram_budget, int64_t batch_size, int64_t bag_size,
                                   int prefetch_batches, int max_open_steps, const std::string& optimizer,
                                   float adagrad_eps, int threads, uint64_t seed, const py::list& traffic_sample) {
  CollectionOptions o{.dram_budget = dram_budget, .batch_size = batch_size, .bag_size = bag_size,
                      .prefetch_batches = prefetch_batches, .max_open_steps = max_open_steps,
                      .adagrad_eps = adagrad_eps, .threads = threads, .seed = seed};
  absl::StatusOr<EmbeddingOptimizer> opt = ParseName(kEmbeddingOptimizerNames, optimizer, "optimizer");
  Check(opt.status());
  o.optimizer = *opt;
  for (const py::handle& h : tables) {
    const py::dict d = py::reinterpret_borrow<py::dict>(h);
    o.tables.push_back({.name = d["name"].cast<std::string>(),
                        .rows = d["num_embeddings"].cast<int64_t>(),
                        .dim = d["embedding_dim"].cast<int64_t>(),
                        .features = d["feature_names"].cast<std::vector<std::string>>(),
                        .bf16 = d["bf16"].cast<bool>(),
                        .pooling = PoolingOf(d),
                        .storage = Storage(d["storage"].cast<std::string>()),
                        .directory = d["directory"].cast<std::string>()});
  }
  // The sample's batches: (values, lengths) lists in the tables' feature order.
  std::vector<std::string> names;
  for (const CollectionTable& table : o.tables) names.insert(names.end(), table.features.begin(), table.features.end());
  for (const py::handle& h : traffic_sample) {
    const py::tuple batch = py::reinterpret_borrow<py::tuple>(h);
    o.traffic_sample.push_back(Features(names, batch[0].cast<py::list>(), batch[1].cast<py::list>(), /*lengths=*/true));
  }
  auto p = std::make_unique<PyCollection>();
  absl::StatusOr<std::unique_ptr<Collection>> c;
  {
    py::gil_scoped_release release;
    c = Collection::Create(o);
  }
  Check(c.status());
  p->c = *std::move(c);
  return p;
}

py::dict ReportOf(const TableReport& r) {
  py::dict d;
  d["name"] = r.name;
  d["rows"] = r.rows;
  d["storage"] = r.storage;
  d["kernel"] = r.kernel;
  d["dram_bytes"] = r.dram_bytes;
  if (r.cached) {
    d["lookups"] = r.stats.lookups();
    d["misses"] = r.stats.misses();
  }
  if (r.ssd) {
    const SsdStats& s = r.ssd_stats;
    d["prefetch_rows"] = s.prefetch_rows;
    d["hit_rate"] = s.hit_rate();
    d["fetched_rows"] = s.fetched_rows;
    d["sync_fetches"] = s.sync_fetches;
    d["block_reads"] = s.fetch_reads;
    d["rows_written"] = s.rows_written;
    d["bytes_written"] = s.io.bytes_written;
    d["write_amplification"] = s.write_amplification(r.row_bytes);
    d["file_bytes"] = s.file_bytes;
    d["live_rows"] = s.live_rows;
    d["cpu_us_per_request"] = s.cpu_us_per_request();
  }
  return d;
}

}  // namespace
}  // namespace cemb::python

PYBIND11_MODULE(_cemb, m) {
  using cemb::python::PyCollection;
  namespace cp = cemb::python;
  m.doc() = "CachedEmbeddings' table collection (the engine under cemb.torch.EmbeddingBagCollection)";
  py::class_<PyCollection>(m, "Collection")
      .def(py::init(&cp::Make), py::arg("tables"), py::arg("dram_budget") = 0, py::arg("batch_size") = 0,
           py::arg("bag_size") = 1, py::arg("prefetch_batches") = 1, py::arg("max_open_steps") = 4,
           py::arg("optimizer") = "sgd",
           py::arg("adagrad_eps") = 1e-8f, py::arg("threads") = 0, py::arg("seed") = 1,
           py::arg("traffic_sample") = py::list())
      .def_property_readonly("features", [](PyCollection& p) { return p.c->features(); })
      .def_property_readonly("output_width", [](PyCollection& p) { return p.c->output_width(); })
      .def("prefetch",
           [](PyCollection& p, const py::list& values, const py::list& splits, bool lengths,
              const py::object& weights) {
             const cp::FeatureArrays f = cp::Features(p.c->features(), values, splits, lengths, weights);
             p.Run([&](cp::Collection& c) { return c.Prefetch(f); });
           },
           py::arg("values"), py::arg("splits"), py::arg("lengths"), py::arg("weights") = py::none())
      .def_property_readonly("open_steps", [](PyCollection& p) {
        std::lock_guard<std::mutex> lock(p.mu);
        return p.c->open_steps();
      })
      // Returns the step's id: under training, for backward or release.
      // weights: None, or one float32 array per feature (pooled by weighted sum).
      .def("forward",
           [](PyCollection& p, const py::list& values, const py::list& splits, bool lengths, py::array out,
              bool train, const py::object& weights) {
             const cp::FeatureArrays f = cp::Features(p.c->features(), values, splits, lengths, weights);
             const cemb::MatrixView view = cp::Matrix(out, "forward's output");
             int64_t step = -1;
             p.Run([&](cp::Collection& c) -> absl::Status {
               absl::StatusOr<int64_t> s = c.Forward(f, view, train);
               if (s.ok()) step = *s;
               return s.status();
             });
             return step;
           },
           py::arg("values"), py::arg("splits"), py::arg("lengths"), py::arg("out"), py::arg("train"),
           py::arg("weights") = py::none())
      .def("backward",
           [](PyCollection& p, int64_t step, const py::array& grad, float lr) {
             const cemb::ConstMatrixView view = cp::Matrix(grad, "backward's gradient");
             p.Run([&](cp::Collection& c) { return c.Backward(step, view, lr); });
           })
      .def("release", [](PyCollection& p, int64_t step) { p.Run([&](cp::Collection& c) { return c.Release(step); }); })
      .def("save", [](PyCollection& p, const std::string& dir) { p.Run([&](cp::Collection& c) { return c.Save(dir); }); })
      .def("load", [](PyCollection& p, const std::string& dir) { p.Run([&](cp::Collection& c) { return c.Load(dir); }); })
      .def("export_npy",
           [](PyCollection& p, const std::string& dir, const std::string& prefix) {
             p.Run([&](cp::Collection& c) { return c.Export(dir, prefix); });
           })
      .def("import_npy",
           [](PyCollection& p, const std::string& dir, const std::string& prefix) {
             p.Run([&](cp::Collection& c) { return c.Import(dir, prefix); });
           })
      .def("read_table",
           [](PyCollection& p, int table, py::array out) {
             const cemb::MatrixView m = cp::Matrix(out, "read_table's output");
             p.Run([&](cp::Collection& c) {
               return c.ReadTable(table, std::span<float>(m.data, static_cast<size_t>(m.rows * m.cols)));
             });
           })
      .def("write_table",
           [](PyCollection& p, int table, const py::array& rows) {
             const cemb::ConstMatrixView m = cp::Matrix(rows, "write_table's rows");
             p.Run([&](cp::Collection& c) {
               return c.WriteTable(table, std::span<const float>(m.data, static_cast<size_t>(m.rows * m.cols)));
             });
           })
      .def("report", [](PyCollection& p) {
        std::vector<cemb::TableReport> reports;
        {
          py::gil_scoped_release release;
          std::lock_guard<std::mutex> lock(p.mu);
          reports = p.c->Report();
        }
        py::list out;
        for (const cemb::TableReport& r : reports) out.append(cp::ReportOf(r));
        return out;
      });
}
