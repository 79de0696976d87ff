// A fixed-size, 64-byte aligned, zero-initialised heap buffer: the storage of
// the MLP's activations, gradients and parameters. Not API.
#ifndef CEMB_DLRM_INTERNAL_ALIGNED_BUFFER_H_
#define CEMB_DLRM_INTERNAL_ALIGNED_BUFFER_H_

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>

namespace cemb::dlrm::internal {

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // Allocates `bytes` (rounded up to 64) zeroed bytes; throws std::bad_alloc.
  explicit AlignedBuffer(size_t bytes) : size_(bytes) {
    const size_t rounded = (bytes + 63) / 64 * 64;
    if (rounded == 0) return;
    void* p = std::aligned_alloc(64, rounded);
    if (p == nullptr) throw std::bad_alloc();
    std::memset(p, 0, rounded);
    data_.reset(static_cast<std::byte*>(p));
  }
  std::byte* data() const { return data_.get(); }
  size_t size() const { return size_; }
  template <typename T>
  T* as() const { return reinterpret_cast<T*>(data_.get()); }

 private:
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte, Free> data_;
  size_t size_ = 0;
};

}  // namespace cemb::dlrm::internal

#endif  // CEMB_DLRM_INTERNAL_ALIGNED_BUFFER_H_
