#include "serve/embedding_source.h"

#include <cstdint>
#include <mutex>

#include "base/status_macros.h"

namespace cemb::serve {
namespace {

class SharedLayerSource final : public EmbeddingSource {
 public:
  explicit SharedLayerSource(const EmbeddingLayer& layer) : layer_(layer) {}
  absl::Status Lookup(std::span<const Bags<int32_t>> bags, MatrixView out, int threads) override {
    return layer_.LookupShared(bags, out, threads);
  }
  bool serialised() const override { return false; }

 private:
  const EmbeddingLayer& layer_;
};

// The training tier's step protocol, one request at a time.
class SteppedLayerSource final : public EmbeddingSource {
 public:
  explicit SteppedLayerSource(EmbeddingLayer& layer) : layer_(layer) {}
  absl::Status Lookup(std::span<const Bags<int32_t>> bags, MatrixView out, int /*threads*/) override {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t id = next_id_++;
    absl::Status s;
    for (int t = 0; t < static_cast<int>(bags.size()) && s.ok(); ++t) s = layer_.Prefetch(id, t, bags[t]);
    if (s.ok()) s = layer_.BeginStep(id).status();
    if (s.ok()) s = layer_.Lookup(bags, out);
    // Unpins whatever was pinned, even after a failure.
    absl::Status end = layer_.EndStep(id).status();
    CEMB_RETURN_IF_ERROR(s);
    return end;
  }
  bool serialised() const override { return true; }

 private:
  EmbeddingLayer& layer_;
  std::mutex mu_;
  int64_t next_id_ = 0;
};

}  // namespace

std::unique_ptr<EmbeddingSource> MakeLayerSource(EmbeddingLayer& layer) {
  if (layer.has_ssd_tables()) return std::make_unique<SteppedLayerSource>(layer);
  return std::make_unique<SharedLayerSource>(layer);
}

}  // namespace cemb::serve
