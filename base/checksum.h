// A fast 64-bit checksum for file payloads (tables, datasets, checkpoints).
// Not cryptographic: it detects truncation, torn writes and bit flips.
//
//   Checksum64 c;
//   c.Update(data, n);  // any number of times, any split of the bytes
//   uint64_t digest = c.Digest();
#ifndef CEMB_BASE_CHECKSUM_H_
#define CEMB_BASE_CHECKSUM_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace cemb {

// The digest depends only on the byte sequence, not on how Update() splits it.
class Checksum64 {
 public:
  void Update(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    while (n > 0 && fill_ != 0) {  // finish a partial word
      pending_ |= uint64_t{*p++} << (8 * fill_);
      fill_ = (fill_ + 1) & 7;
      --n;
      if (fill_ == 0) Mix(pending_), pending_ = 0;
    }
    for (; n >= 8; n -= 8, p += 8) {
      uint64_t w;
      std::memcpy(&w, p, 8);
      Mix(w);
    }
    for (; n > 0; --n) pending_ |= uint64_t{*p++} << (8 * fill_++);
  }
  uint64_t Digest() const {
    uint64_t h = h_ ^ (length_words_ * 0x9e3779b97f4a7c15ULL) ^ (fill_ * 0x632be59bd9b4e019ULL);
    h ^= pending_ * 0xc2b2ae3d27d4eb4fULL;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    return h ^ (h >> 33);
  }

 private:
  void Mix(uint64_t w) {
    w *= 0x87c37b91114253d5ULL;
    w = (w << 31) | (w >> 33);
    w *= 0x4cf5ad432745937fULL;
    h_ ^= w;
    h_ = ((h_ << 27) | (h_ >> 37)) * 5 + 0x52dce729;
    ++length_words_;
  }

  uint64_t h_ = 0x243f6a8885a308d3ULL;
  uint64_t length_words_ = 0;
  uint64_t pending_ = 0;
  unsigned fill_ = 0;
};

}  // namespace cemb

#endif  // CEMB_BASE_CHECKSUM_H_
