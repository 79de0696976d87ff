// The Python modules' one mapping of an absl::Status to a Python exception:
// InvalidArgument -> ValueError, OutOfRange -> IndexError, NotFound ->
// FileNotFoundError, FailedPrecondition -> RuntimeError, anything else ->
// OSError, each with the engine's message.
#ifndef CEMB_PYTHON_STATUS_H_
#define CEMB_PYTHON_STATUS_H_

#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>

#include "absl/status/status.h"

namespace cemb::python {

inline void Check(const absl::Status& s) {
  namespace py = pybind11;
  if (s.ok()) return;
  const std::string message(s.message());
  switch (s.code()) {
    case absl::StatusCode::kInvalidArgument:
      throw py::value_error(message);
    case absl::StatusCode::kOutOfRange:
      throw py::index_error(message);
    case absl::StatusCode::kNotFound:
      PyErr_SetString(PyExc_FileNotFoundError, message.c_str());
      throw py::error_already_set();
    case absl::StatusCode::kFailedPrecondition:
      throw std::runtime_error(message);
    default:
      PyErr_SetString(PyExc_OSError, message.c_str());
      throw py::error_already_set();
  }
}

}  // namespace cemb::python

#endif  // CEMB_PYTHON_STATUS_H_
