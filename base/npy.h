// NumPy .npy files: a small reader and writer for little-endian float32,
// int32 and int64 arrays in C order, the format of `numpy.save` (versions 1.0,
// 2.0 and 3.0 are read; 1.0 is written, 2.0 when the header needs it).
//
// Model parameters are saved one tensor per file so that a model can be
// initialised from, or compared with, a PyTorch model:
//   numpy.save("bot_l.0.weight.npy", model.bot_l[0].weight.detach().numpy())
//
// Large arrays (an embedding table of billions of rows) are read and written
// in pieces by NpyReader and NpyWriter, never whole in memory.
//
// bfloat16: numpy has no such dtype. A file saved by numpy with ml_dtypes'
// bfloat16 says '<V2' (two opaque bytes; Keras and JAX read every 2-byte void
// array as bfloat16); one whose header was written from str(dtype) says
// 'bfloat16'. NpyReader reads both as bfloat16 (the upper half of an fp32).
//
// Errors: every malformed, truncated or mismatched file gives a Status that
// names the file and what is wrong (bad magic, unsupported version, header
// that does not parse, dtype or fortran_order not supported, data shorter or
// longer than the shape says); reading never crashes on bad input.
//
//   CEMB_RETURN_IF_ERROR(WriteNpy<float>("w.npy", weights, {out, in}));
//   CEMB_ASSIGN_OR_RETURN(NpyArray<float> a, ReadNpy<float>("w.npy"));
//   // a.shape == {out, in}, a.data.size() == out * in
//   CEMB_ASSIGN_OR_RETURN(NpyReader r, NpyReader::Open("emb_l.0.weight.npy"));  // f4 or bf16
//   CEMB_RETURN_IF_ERROR(r.ReadFloats(block));   // the next block.size() elements
#ifndef CEMB_BASE_NPY_H_
#define CEMB_BASE_NPY_H_

#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/file.h"

namespace cemb {

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

// The element types a .npy file may hold here.
enum class NpyDtype { kFloat32, kBfloat16, kInt32, kInt64 };
const char* NpyDtypeName(NpyDtype dtype);  // "float32", "bfloat16", "int32", "int64"

// A .npy file read front to back in pieces. Open() reads the header and
// checks it against the file's size, so a truncated file fails there, before
// the caller has used a byte of it.
// Thread safety: one user at a time.
class NpyReader {
 public:
  [[nodiscard]] static absl::StatusOr<NpyReader> Open(const std::string& path);

  const std::string& path() const { return path_; }
  NpyDtype dtype() const { return dtype_; }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t count() const { return count_; }  // product(shape)
  // "(1000, 16)", as numpy prints a shape.
  std::string shape_text() const;

  // Reads the next out.size() elements, converted to fp32 (exactly, from
  // float32 or bfloat16). Errors: another dtype, fewer elements left than
  // out.size(), I/O (each naming the file).
  [[nodiscard]] absl::Status ReadFloats(std::span<float> out);

 private:
  NpyReader() = default;
  std::string path_;
  base::File file_;
  NpyDtype dtype_ = NpyDtype::kFloat32;
  std::vector<int64_t> shape_;
  int64_t count_ = 0, read_ = 0;
  std::vector<uint16_t> bf16_;  // staging for bfloat16 files
};

// The whole float32 or bfloat16 file `path` as fp32 in `out`, if its shape
// is `shape`. Errors name the file: another dtype or shape (both shapes
// said), and NpyReader's.
[[nodiscard]] absl::Status ReadNpyFloats(const std::string& path, std::span<const int64_t> shape,
                                         std::vector<float>& out);
[[nodiscard]] inline absl::Status ReadNpyFloats(const std::string& path, std::initializer_list<int64_t> shape,
                                                std::vector<float>& out) {
  return ReadNpyFloats(path, std::span<const int64_t>(shape.begin(), shape.size()), out);
}

// A float32 .npy file of a known shape written front to back in pieces,
// through an AtomicFile: `path` holds the whole array or is left as it was.
// Thread safety: one user at a time.
class NpyWriter {
 public:
  [[nodiscard]] static absl::StatusOr<NpyWriter> Create(const std::string& path, std::span<const int64_t> shape);
  // Appends the next values.size() elements. Error: more than the shape holds.
  [[nodiscard]] absl::Status Append(std::span<const float> values);
  // Publishes the file. Error: fewer elements appended than the shape holds.
  [[nodiscard]] absl::Status Commit();

 private:
  explicit NpyWriter(base::AtomicFile file) : file_(std::move(file)) {}
  base::AtomicFile file_;
  int64_t count_ = 0, written_ = 0;
};

}  // namespace cemb

#endif  // CEMB_BASE_NPY_H_
