// NumPy .npy files: a small reader and writer for little-endian float32,
// int32 and int64 arrays in C order, the format of `numpy.save` (versions 1.0,
// 2.0 and 3.0 are read; 1.0 is written, 2.0 when the header needs it).
//
// Model parameters are saved one tensor per file so that a model can be
// initialised from, or compared with, a PyTorch model:
//   numpy.save("bot_l.0.weight.npy", model.bot_l[0].weight.detach().numpy())
//
// Errors: every malformed, truncated or mismatched file gives a Status that
// names the file and what is wrong (bad magic, unsupported version, header
// that does not parse, dtype or fortran_order not supported, data shorter or
// longer than the shape says); reading never crashes on bad input.
//
//   CEMB_RETURN_IF_ERROR(WriteNpy<float>("w.npy", weights, {out, in}));
//   CEMB_ASSIGN_OR_RETURN(NpyArray<float> a, ReadNpy<float>("w.npy"));
//   // a.shape == {out, in}, a.data.size() == out * in
#ifndef CEMB_DLRM_NPY_H_
#define CEMB_DLRM_NPY_H_

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cemb::dlrm {

template <typename T>
struct NpyArray {
  std::vector<int64_t> shape;  // empty for a scalar (one element)
  std::vector<T> data;         // C order, product(shape) elements
};

// Writes `data` with `shape` to `path` (through "<path>.tmp" and a rename, so
// a reader never sees a half-written file). T is float, int32_t or int64_t.
// REQUIRES: data.size() == product(shape).
template <typename T>
[[nodiscard]] absl::Status WriteNpy(const std::string& path, std::span<const T> data,
                                    std::span<const int64_t> shape);
template <typename T>
[[nodiscard]] absl::Status WriteNpy(const std::string& path, std::span<const T> data,
                                    std::initializer_list<int64_t> shape) {
  return WriteNpy<T>(path, data, std::span<const int64_t>(shape.begin(), shape.size()));
}

// Reads the whole file. The file's dtype must be exactly T's ('<f4', '<i4',
// '<i8'; '|' or '=' byte orders are accepted on this little-endian machine).
template <typename T>
[[nodiscard]] absl::StatusOr<NpyArray<T>> ReadNpy(const std::string& path);

// Parses an in-memory .npy image (what ReadNpy does after reading the file);
// `name` is used in error messages.
template <typename T>
[[nodiscard]] absl::StatusOr<NpyArray<T>> ParseNpy(std::string_view bytes, const std::string& name);

}  // namespace cemb::dlrm

#endif  // CEMB_DLRM_NPY_H_
