// cemb._serve: the Python binding of serve/predictor.h, apart from cemb._cemb
// (which links the tables alone) because it links the model and oneDNN.
// Arrays cross as NumPy arrays (a CPU torch tensor's .numpy() shares its
// memory); python/cemb/serve.py is the layer that takes torch tensors too.
// Predict releases the GIL: several Python threads score at once, as the
// predictor's C++ callers do. Errors become ValueError (InvalidArgument),
// IndexError (OutOfRange), FileNotFoundError (NotFound), RuntimeError
// (FailedPrecondition) and OSError (the rest: I/O, DataLoss).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "python/status.h"
#include "serve/predictor.h"

namespace py = pybind11;

namespace cemb::serve {
namespace {

using ::cemb::python::Check;

// A C-contiguous 2-D array of `rows` x `cols`, or ValueError naming it.
void CheckShape(const py::array& a, const char* what, int64_t cols) {
  if (a.ndim() != 2 || a.shape(1) != cols) {
    throw py::value_error(absl::StrCat(what, ": shape (", a.ndim() > 0 ? a.shape(0) : 0, ", ",
                                       a.ndim() > 1 ? a.shape(1) : 0, ") where (n, ", cols, ") is needed"));
  }
}

// Table t's indices [n] from rows [n x T] (one row per table and sample),
// int32 or int64; IndexError for an index that int32 cannot hold.
template <typename Int>
void Columns(const py::array_t<Int, py::array::c_style>& rows, std::vector<int32_t>& out) {
  const int64_t n = rows.shape(0), tables = rows.shape(1);
  const Int* r = rows.data();
  out.resize(static_cast<size_t>(n * tables));
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t t = 0; t < tables; ++t) {
      const Int v = r[i * tables + t];
      if (v < 0 || v > std::numeric_limits<int32_t>::max()) {
        throw py::index_error(absl::StrCat("sparse[", i, ", ", t, "] = ", v, " is not a row"));
      }
      out[t * n + i] = static_cast<int32_t>(v);
    }
  }
}

py::array_t<float> Predict(const Predictor& p, const py::array_t<float, py::array::c_style | py::array::forcecast>& dense,
                           const py::array& sparse) {
  CheckShape(dense, "dense", p.num_dense());
  CheckShape(sparse, "sparse", p.num_tables());
  const int64_t n = dense.shape(0);
  if (sparse.shape(0) != n) {
    throw py::value_error(absl::StrCat("dense has ", n, " samples and sparse ", sparse.shape(0)));
  }
  std::vector<int32_t> indices;
  if (sparse.dtype().is(py::dtype::of<int64_t>())) {
    Columns(py::array_t<int64_t, py::array::c_style>::ensure(sparse), indices);
  } else if (sparse.dtype().is(py::dtype::of<int32_t>())) {
    Columns(py::array_t<int32_t, py::array::c_style>::ensure(sparse), indices);
  } else {
    throw py::type_error(absl::StrCat("sparse: dtype ", std::string(py::str(sparse.dtype())),
                                      " where int32 or int64 is needed"));
  }
  std::vector<int32_t> offsets(static_cast<size_t>(n + 1));
  for (int64_t i = 0; i <= n; ++i) offsets[i] = static_cast<int32_t>(i);
  std::vector<Bags<int32_t>> bags(p.num_tables());
  for (int t = 0; t < p.num_tables(); ++t) {
    bags[t] = {.offsets = offsets, .indices = std::span<const int32_t>(indices).subspan(t * n, n)};
  }
  py::array_t<float> out(n);
  const std::span<const float> d(dense.data(), static_cast<size_t>(n * p.num_dense()));
  const std::span<float> o(out.mutable_data(), static_cast<size_t>(n));
  absl::Status s;
  {
    py::gil_scoped_release release;
    s = p.Predict({.size = n, .dense = d, .bags = bags}, o);
  }
  Check(s);
  return out;
}

py::array_t<float> PredictCriteo(const Predictor& p, const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& ints,
                                 const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& ids) {
  CheckShape(ints, "integers", data::kNumDense);
  CheckShape(ids, "categorical", data::kNumCategorical);
  const int64_t n = ints.shape(0);
  if (ids.shape(0) != n) throw py::value_error(absl::StrCat("integers has ", n, " samples and categorical ", ids.shape(0)));
  std::vector<data::CriteoRow> rows(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < data::kNumDense; ++j) rows[i].dense[j] = ints.data()[i * data::kNumDense + j];
    for (int t = 0; t < data::kNumCategorical; ++t) {
      const int64_t v = ids.data()[i * data::kNumCategorical + t];
      if (v < 0 || v > std::numeric_limits<uint32_t>::max()) {
        throw py::value_error(absl::StrCat("categorical[", i, ", ", t, "] = ", v, " is not a 32-bit id"));
      }
      rows[i].categorical[t] = static_cast<uint32_t>(v);
    }
  }
  py::array_t<float> out(n);
  absl::Status s;
  {
    py::gil_scoped_release release;
    s = p.PredictCriteo(rows, std::span<float>(out.mutable_data(), static_cast<size_t>(n)));
  }
  Check(s);
  return out;
}

}  // namespace

PYBIND11_MODULE(_serve, m) {
  m.doc() = "cemb._serve: a checkpoint of dlrm-train scored from Python (serve/predictor.h)";
  py::class_<Predictor>(m, "Predictor")
      .def_static(
          "open",
          [](const std::string& path, int64_t max_batch, int contexts, int threads_per_context, bool verify,
             int64_t ssd_cache_bytes, bool serve_in_place) {
            absl::StatusOr<std::unique_ptr<Predictor>> p;
            {
              py::gil_scoped_release release;
              p = Predictor::Open(path, {.ssd_cache_bytes = ssd_cache_bytes,
                                         .max_batch = max_batch,
                                         .contexts = contexts,
                                         .threads_per_context = threads_per_context,
                                         .serve_in_place = serve_in_place,
                                         .verify_checksums = verify});
            }
            Check(p.status());
            return std::move(*p);
          },
          py::arg("path"), py::arg("max_batch") = 256, py::arg("contexts") = 0, py::arg("threads_per_context") = 0,
          py::arg("verify_checksums") = true, py::arg("ssd_cache_bytes") = PredictorOptions{}.ssd_cache_bytes,
          py::arg("serve_in_place") = true)
      .def("predict", &Predict, py::arg("dense"), py::arg("sparse"))
      .def("predict_criteo", &PredictCriteo, py::arg("integers"), py::arg("categorical"))
      .def_property_readonly("checkpoint", &Predictor::checkpoint)
      .def_property_readonly("num_dense", &Predictor::num_dense)
      .def_property_readonly("num_tables", &Predictor::num_tables)
      .def_property_readonly("precision", [](const Predictor& p) { return dlrm::PrecisionName(p.precision()); })
      .def_property_readonly("warning", &Predictor::warning)
      .def_property_readonly("table_rows", [](const Predictor& p) { return p.manifest().table_rows; })
      .def_property_readonly("interaction", [](const Predictor& p) { return p.manifest().interaction; })
      // "ok", "pending" (the background pass over the files served in
      // place), or the DataLoss it found ("DATA_LOSS: ...").
      .def_property_readonly("verification",
                             [](const Predictor& p) {
                               const absl::Status s = p.verification();
                               return s.ok() ? std::string("ok")
                                             : absl::IsUnavailable(s) ? std::string("pending") : s.ToString();
                             })
      // Model table ids served in place from their ssd snapshots, and their hit rates.
      .def_property_readonly("snapshot_tables", [](const Predictor& p) {
        py::list out;
        for (const SnapshotTableInfo& t : p.snapshot_tables()) {
          out.append(py::dict(py::arg("table") = t.table, py::arg("path") = t.path,
                              py::arg("capacity_rows") = t.capacity_rows, py::arg("hit_rate") = t.stats.hit_rate(),
                              py::arg("rows_read") = t.stats.rows_read, py::arg("reads") = t.stats.reads));
        }
        return out;
      });
}

}  // namespace cemb::serve
