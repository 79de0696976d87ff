// Loader: batches from a memory-mapped Dataset, prepared on a background thread.
//
// A batch holds `size` samples: the dense features as a row-major
// [size x num_dense] float matrix, the labels as floats, and for each table
// its bags in CSR form (int32 `offsets` of size + 1 entries and int32
// `indices`; bag i of table t is indices(t)[offsets(t)[i] .. offsets(t)[i+1]),
// the table's hotness K_t indices per bag). These are the spans the
// embedding kernels take.
//
// Order: an epoch visits every sample once. With Shuffle::kWithinBlocks the
// dataset is cut into blocks of `block_samples` consecutive samples; the
// order of the full blocks and the order of the samples inside each block
// are permuted by streams seeded from (seed, epoch, block), and the partial
// last block comes last. Reads therefore stay block-local (page-cache and
// TLB friendly) while batches still mix samples. The order depends only on
// the dataset and the options.
//
// Position: the loader counts batches globally (epoch * batches_per_epoch +
// batch). position() says which batch Next() returns next; Seek() restarts
// there exactly, so a checkpoint that stores position().Serialize() after a
// training step resumes with the very next batch, in the same order.
//
// Prefetch: a background thread keeps up to `prefetch` batches ready in a
// ring of prefetch + 1 preallocated Batch buffers. Peek(n) shows the next n
// (<= prefetch) batches before Next() returns them, e.g. to prefetch their
// embedding rows into a cache.
//
// Allocation: Create() allocates every buffer; Next(), Peek() and the
// background thread allocate nothing afterwards. A training step that uses
// the batch in place allocates nothing either.
//
// Thread safety: Next(), Peek(), position() and Seek() are called from one
// thread (the trainer's). The returned Batch is read-only and valid until the
// next call of Next() or Seek(); a peeked batch stays valid until one call
// of Next() after it was returned by Next().
//
//   CEMB_ASSIGN_OR_RETURN(std::shared_ptr<const Dataset> d, Dataset::Open("train.bin"));
//   CEMB_ASSIGN_OR_RETURN(auto loader, Loader::Create(d, {.batch_size = 2048}));
//   while (const Batch* b = loader->Next()) {
//     Train(b->dense(), b->labels(), b->offsets(t), b->indices(t), ...);
//     if (time_to_checkpoint) Save(loader->position().Serialize());
//   }
#ifndef CEMB_DATA_LOADER_H_
#define CEMB_DATA_LOADER_H_

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/dataset.h"

namespace cemb::data {

enum class Shuffle { kNone, kWithinBlocks };
enum class LastBatch {
  kPartial,  // the epoch's last batch may hold fewer than batch_size samples
  kDrop,     // drop the samples that do not fill a whole batch
};

struct LoaderOptions {
  uint32_t batch_size = 2048;  // REQUIRES: >= 1
  Shuffle shuffle = Shuffle::kWithinBlocks;
  uint64_t block_samples = uint64_t{1} << 16;  // REQUIRES: >= 1 (< 2^32)
  uint64_t seed = 1;
  uint32_t prefetch = 4;    // batches prepared ahead; REQUIRES: >= 1
  LastBatch last_batch = LastBatch::kPartial;
  uint64_t num_epochs = 1;  // 0 = endless
  // Data-parallel training: the loaders of `ranks` processes,
  // made with the same options but their own `rank`, visit the same batches
  // in the same order, and each one's Batch holds only its slice of every
  // batch (BatchSlice). The position and its fingerprint do not depend on
  // them, so a checkpoint resumes on another number of ranks.
  // REQUIRES: rank < ranks.
  uint32_t rank = 0;
  uint32_t ranks = 1;
};

// Rank `rank`'s samples of a batch of `size` on `ranks` ranks: the rank-th
// contiguous part, size / ranks samples, one more for the first size % ranks
// ranks (as distributed::EmbeddingExchange orders a global batch).
struct BatchSlice {
  uint32_t offset = 0;
  uint32_t size = 0;
};
BatchSlice SliceOf(uint32_t size, uint32_t rank, uint32_t ranks);

// One batch. Its buffers are sized for batch_size at Create() and reused.
class Batch {
 public:
  uint32_t size() const { return size_; }  // this rank's samples (LoaderOptions::rank)
  uint32_t global_size() const { return global_size_; }  // the batch's samples on every rank
  uint64_t epoch() const { return epoch_; }
  uint64_t index() const { return index_; }  // within the epoch
  uint32_t num_dense() const { return num_dense_; }
  uint32_t num_tables() const { return static_cast<uint32_t>(offsets_.size()); }
  std::span<const float> dense() const { return {dense_.data(), size_t{size_} * num_dense_}; }
  std::span<const float> labels() const { return {labels_.data(), size_}; }
  std::span<const int32_t> offsets(uint32_t t) const { return {offsets_[t].data(), size_t{size_} + 1}; }
  std::span<const int32_t> indices(uint32_t t) const {
    return {indices_[t].data(), static_cast<size_t>(offsets_[t][size_])};
  }

 private:
  friend class Loader;
  uint32_t size_ = 0, global_size_ = 0;
  uint64_t epoch_ = 0, index_ = 0;
  uint32_t num_dense_ = 0;
  std::vector<float> dense_, labels_;
  std::vector<std::vector<int32_t>> offsets_, indices_;
};

// Where a loader is: the next batch Next() returns, and a fingerprint of the
// dataset and the options that fix the order.
struct LoaderPosition {
  uint64_t epoch = 0;
  uint64_t batch = 0;
  uint64_t fingerprint = 0;

  // "cemb-loader-position v1 epoch=E batch=B fingerprint=F" (F in hex).
  std::string Serialize() const;
  [[nodiscard]] static absl::StatusOr<LoaderPosition> Parse(std::string_view text);
  friend bool operator==(const LoaderPosition&, const LoaderPosition&) = default;
};

class Loader {
 public:
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Loader>> Create(
      std::shared_ptr<const Dataset> dataset, const LoaderOptions& options);
  ~Loader();  // stops and joins the background thread
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // The next batch, or nullptr after the last batch of the last epoch.
  // Blocks until the background thread has it ready. Allocates nothing.
  const Batch* Next();

  // The next min(n, prefetch, batches left) batches, in order, without
  // consuming them; blocks until they are ready. Allocates nothing.
  // NOTE: the span is valid until the next call of Peek(), Next() or Seek().
  std::span<const Batch* const> Peek(size_t n);

  LoaderPosition position() const;
  // Continues at `p`. InvalidArgument when p's fingerprint is not this
  // loader's (another dataset, seed, batch size, shuffle or block size) or p
  // is past the end. Invalidates batches returned before.
  [[nodiscard]] absl::Status Seek(const LoaderPosition& p);

  uint64_t batches_per_epoch() const { return batches_per_epoch_; }
  // The samples that the first `global_batches` batches hold: a partial
  // last batch of an epoch counts its own samples.
  uint64_t samples_before(uint64_t global_batches) const;
  const LoaderOptions& options() const { return options_; }
  const Dataset& dataset() const { return *dataset_; }

  // The dataset sample at position `p` (0-based) of epoch `epoch`'s order.
  // For tests and tools; O(block_samples) when the block changes.
  uint64_t SampleAt(uint64_t epoch, uint64_t p);

 private:
  Loader(std::shared_ptr<const Dataset> dataset, const LoaderOptions& options);
  void Start(uint64_t global_batch);
  void Stop();
  void Run();
  void Fill(uint64_t global_batch, Batch& batch);

  // The epoch order, with caches of the current block order and block
  // permutation. The producer and SampleAt() each own one.
  struct Order {
    std::vector<uint64_t> block_order;
    std::vector<uint32_t> block_perm;
    uint64_t order_epoch = ~uint64_t{0};
    uint64_t perm_epoch = ~uint64_t{0}, perm_block = ~uint64_t{0};
    uint64_t Sample(const Loader& loader, uint64_t epoch, uint64_t p);
  };

  std::shared_ptr<const Dataset> dataset_;
  LoaderOptions options_;
  uint64_t batches_per_epoch_ = 0;
  uint64_t samples_per_epoch_ = 0;
  uint64_t end_ = 0;  // global batch count over all epochs
  uint64_t fingerprint_ = 0;

  uint64_t full_blocks_ = 0;
  Order producer_order_;  // used by the background thread only
  Order query_order_;     // used by SampleAt() only

  std::vector<Batch> slots_;
  std::vector<const Batch*> peeked_;
  mutable std::mutex mu_;
  std::condition_variable produced_cv_, consumed_cv_;
  uint64_t next_produce_ = 0;  // global batch the producer fills next
  uint64_t next_consume_ = 0;  // global batch Next() returns next
  bool holding_ = false;       // the consumer holds batch next_consume_ - 1
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace cemb::data

#endif  // CEMB_DATA_LOADER_H_
