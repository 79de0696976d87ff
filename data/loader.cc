#include "data/loader.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/random.h"

namespace cemb::data {
namespace {

constexpr uint64_t kBlockOrderSalt = 0xb10c0bde5ULL;
constexpr uint64_t kBlockPermSalt = 0x9e2b10c5ULL;
constexpr std::string_view kPositionTag = "cemb-loader-position v1";

template <typename T>
void FisherYates(T* v, uint64_t n, uint64_t seed) {
  Xoshiro256pp rng(seed);
  for (uint64_t i = n; i > 1; --i) std::swap(v[i - 1], v[rng.Below(i)]);
}

bool ParseField(std::string_view text, std::string_view key, int base, uint64_t& out) {
  if (text.substr(0, key.size()) != key || text.size() == key.size()) return false;
  text.remove_prefix(key.size());
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out, base);
  return ec == std::errc() && end == text.data() + text.size();
}

}  // namespace

// ---------------------------------------------------------------- position

std::string LoaderPosition::Serialize() const {
  return absl::StrCat(absl::string_view(kPositionTag.data(), kPositionTag.size()), " epoch=", epoch,
                      " batch=", batch, " fingerprint=", absl::Hex(fingerprint));
}

absl::StatusOr<LoaderPosition> LoaderPosition::Parse(std::string_view text) {
  const absl::string_view t(text.data(), text.size());
  auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat("not a loader position: '", t.substr(0, 100), "'"));
  };
  if (text.substr(0, kPositionTag.size()) != kPositionTag) return bad();
  std::vector<absl::string_view> parts =
      absl::StrSplit(t.substr(kPositionTag.size()), ' ', absl::SkipEmpty());
  LoaderPosition p;
  if (parts.size() != 3) return bad();
  auto sv = [](absl::string_view s) { return std::string_view(s.data(), s.size()); };
  if (!ParseField(sv(parts[0]), "epoch=", 10, p.epoch) || !ParseField(sv(parts[1]), "batch=", 10, p.batch) ||
      !ParseField(sv(parts[2]), "fingerprint=", 16, p.fingerprint)) {
    return bad();
  }
  return p;
}

// ---------------------------------------------------------------- order

uint64_t Loader::Order::Sample(const Loader& loader, uint64_t epoch, uint64_t p) {
  const LoaderOptions& o = loader.options_;
  if (o.shuffle == Shuffle::kNone) return p;
  const uint64_t b = o.block_samples;
  const uint64_t blk = p / b, within = p % b;
  uint64_t block_id = blk, len = b;
  if (blk < loader.full_blocks_) {
    if (order_epoch != epoch) {
      block_order.resize(loader.full_blocks_);  // no-op once sized
      std::iota(block_order.begin(), block_order.end(), uint64_t{0});
      FisherYates(block_order.data(), block_order.size(),
                  SplitMix64::Mix(o.seed ^ kBlockOrderSalt, epoch));
      order_epoch = epoch;
    }
    block_id = block_order[blk];
  } else {
    len = loader.dataset_->num_samples() - blk * b;  // the partial last block
  }
  if (perm_epoch != epoch || perm_block != block_id) {
    block_perm.resize(std::max<uint64_t>(block_perm.size(), len));
    std::iota(block_perm.begin(), block_perm.begin() + static_cast<ptrdiff_t>(len), uint32_t{0});
    FisherYates(block_perm.data(), len,
                SplitMix64::Mix(SplitMix64::Mix(o.seed ^ kBlockPermSalt, epoch), block_id));
    perm_epoch = epoch;
    perm_block = block_id;
  }
  return block_id * b + block_perm[within];
}

// ---------------------------------------------------------------- loader

Loader::Loader(std::shared_ptr<const Dataset> dataset, const LoaderOptions& options)
    : dataset_(std::move(dataset)), options_(options) {}

absl::StatusOr<std::unique_ptr<Loader>> Loader::Create(std::shared_ptr<const Dataset> dataset,
                                                       const LoaderOptions& options) {
  if (dataset == nullptr) return absl::InvalidArgumentError("Loader: no dataset");
  if (options.batch_size == 0) return absl::InvalidArgumentError("Loader: batch_size must be >= 1");
  if (options.prefetch == 0) return absl::InvalidArgumentError("Loader: prefetch must be >= 1");
  if (options.rank >= options.ranks) {
    return absl::InvalidArgumentError(absl::StrCat("Loader: rank ", options.rank, " of ", options.ranks, " ranks"));
  }
  if (options.block_samples == 0 || options.block_samples > (uint64_t{1} << 32)) {
    return absl::InvalidArgumentError("Loader: block_samples must be in [1, 2^32]");
  }
  const std::span<const uint32_t> hotness = dataset->hotness();
  const uint64_t most = *std::max_element(hotness.begin(), hotness.end());
  if (uint64_t{options.batch_size} * most > uint64_t{INT32_MAX}) {
    return absl::InvalidArgumentError("Loader: batch_size * hotness does not fit int32 offsets");
  }
  std::unique_ptr<Loader> l(new Loader(std::move(dataset), options));
  const uint64_t n = l->dataset_->num_samples();
  const uint64_t bs = options.batch_size;
  l->batches_per_epoch_ = options.last_batch == LastBatch::kDrop ? n / bs : (n + bs - 1) / bs;
  l->samples_per_epoch_ = options.last_batch == LastBatch::kDrop ? l->batches_per_epoch_ * bs : n;
  l->end_ = l->batches_per_epoch_ == 0 ? 0
           : options.num_epochs == 0 ? ~uint64_t{0}
                                     : options.num_epochs * l->batches_per_epoch_;
  l->full_blocks_ = n / options.block_samples;

  uint64_t f = SplitMix64::Mix(l->dataset_->payload_checksum(), n);
  f = SplitMix64::Mix(f, bs);
  f = SplitMix64::Mix(f, static_cast<uint64_t>(options.last_batch));
  f = SplitMix64::Mix(f, static_cast<uint64_t>(options.shuffle));
  if (options.shuffle == Shuffle::kWithinBlocks) {
    f = SplitMix64::Mix(f, options.block_samples);
    f = SplitMix64::Mix(f, options.seed);
  }
  l->fingerprint_ = f;

  // Every buffer, once.
  if (options.shuffle == Shuffle::kWithinBlocks) {
    l->producer_order_.block_order.resize(l->full_blocks_);
    l->producer_order_.block_perm.resize(std::min(options.block_samples, n));
  }
  const uint32_t d = l->dataset_->num_dense();
  const uint32_t tables = l->dataset_->num_tables();
  l->slots_.resize(size_t{options.prefetch} + 1);
  for (Batch& b : l->slots_) {
    b.num_dense_ = d;
    b.dense_.resize(bs * d);
    b.labels_.resize(bs);
    b.offsets_.assign(tables, std::vector<int32_t>(bs + 1, 0));
    b.indices_.resize(tables);
    for (uint32_t t = 0; t < tables; ++t) b.indices_[t].assign(bs * hotness[t], 0);
  }
  l->peeked_.resize(options.prefetch);
  l->Start(0);
  return l;
}

Loader::~Loader() { Stop(); }

void Loader::Start(uint64_t global_batch) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    next_produce_ = next_consume_ = global_batch;
    holding_ = false;
    stop_ = false;
  }
  thread_ = std::thread([this] { Run(); });
}

void Loader::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  consumed_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Loader::Run() {
  const uint64_t slots = slots_.size();
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    consumed_cv_.wait(lock, [&] {
      const uint64_t floor = holding_ ? next_consume_ - 1 : next_consume_;
      return stop_ || (next_produce_ < end_ && next_produce_ < floor + slots);
    });
    if (stop_) return;
    const uint64_t g = next_produce_;
    lock.unlock();
    Fill(g, slots_[g % slots]);
    lock.lock();
    ++next_produce_;
    produced_cv_.notify_all();
  }
}

BatchSlice SliceOf(uint32_t size, uint32_t rank, uint32_t ranks) {
  const uint32_t base = size / ranks, extra = size % ranks;
  return {.offset = rank * base + std::min(rank, extra), .size = base + (rank < extra ? 1 : 0)};
}

void Loader::Fill(uint64_t global_batch, Batch& batch) {
  const uint64_t epoch = global_batch / batches_per_epoch_;
  const uint64_t index = global_batch % batches_per_epoch_;
  const uint64_t first = index * options_.batch_size;
  const uint32_t global_size =
      static_cast<uint32_t>(std::min<uint64_t>(options_.batch_size, samples_per_epoch_ - first));
  const BatchSlice slice = SliceOf(global_size, options_.rank, options_.ranks);
  const uint32_t size = slice.size;
  const Dataset& ds = *dataset_;
  const uint32_t d = ds.num_dense(), tables = ds.num_tables();
  const std::span<const uint32_t> hotness = ds.hotness(), first_index = ds.index_offsets();
  batch.size_ = size;
  batch.global_size_ = global_size;
  batch.epoch_ = epoch;
  batch.index_ = index;
  for (uint32_t i = 0; i < size; ++i) {
    const uint64_t s = producer_order_.Sample(*this, epoch, first + slice.offset + i);
    const float* r = ds.record(s);
    batch.labels_[i] = r[0];
    std::memcpy(batch.dense_.data() + size_t{i} * d, r + 1, size_t{d} * sizeof(float));
    const auto* idx = reinterpret_cast<const int32_t*>(r + 1 + d);
    for (uint32_t t = 0; t < tables; ++t) {
      const uint32_t k = hotness[t];
      if (k == 1) {
        batch.indices_[t][i] = idx[first_index[t]];
      } else {
        std::memcpy(batch.indices_[t].data() + size_t{i} * k, idx + first_index[t], k * sizeof(int32_t));
      }
    }
  }
  for (uint32_t t = 0; t < tables; ++t) {
    const uint32_t k = hotness[t];
    int32_t* off = batch.offsets_[t].data();
    for (uint32_t i = 0; i <= size; ++i) off[i] = static_cast<int32_t>(i * k);
  }
}

const Batch* Loader::Next() {
  std::unique_lock<std::mutex> lock(mu_);
  if (holding_) {
    holding_ = false;
    consumed_cv_.notify_one();
  }
  if (next_consume_ >= end_) return nullptr;
  produced_cv_.wait(lock, [&] { return next_produce_ > next_consume_; });
  const Batch* b = &slots_[next_consume_ % slots_.size()];
  ++next_consume_;
  holding_ = true;
  return b;
}

std::span<const Batch* const> Loader::Peek(size_t n) {
  std::unique_lock<std::mutex> lock(mu_);
  n = std::min<uint64_t>({n, options_.prefetch, end_ - std::min(end_, next_consume_)});
  produced_cv_.wait(lock, [&] { return next_produce_ >= next_consume_ + n; });
  for (size_t i = 0; i < n; ++i) peeked_[i] = &slots_[(next_consume_ + i) % slots_.size()];
  return {peeked_.data(), n};
}

uint64_t Loader::samples_before(uint64_t global_batches) const {
  if (batches_per_epoch_ == 0) return 0;
  const uint64_t epochs = global_batches / batches_per_epoch_, batches = global_batches % batches_per_epoch_;
  return epochs * samples_per_epoch_ + std::min<uint64_t>(batches * options_.batch_size, samples_per_epoch_);
}

LoaderPosition Loader::position() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (batches_per_epoch_ == 0) return {0, 0, fingerprint_};
  return {next_consume_ / batches_per_epoch_, next_consume_ % batches_per_epoch_, fingerprint_};
}

absl::Status Loader::Seek(const LoaderPosition& p) {
  if (p.fingerprint != fingerprint_) {
    return absl::InvalidArgumentError(
        absl::StrCat("Loader: the position was saved for another dataset or loader options "
                     "(fingerprint ", absl::Hex(p.fingerprint), ", this loader's is ",
                     absl::Hex(fingerprint_), ")"));
  }
  const uint64_t bpe = batches_per_epoch_;
  if ((bpe == 0 && (p.epoch != 0 || p.batch != 0)) || (bpe != 0 && p.batch >= bpe)) {
    return absl::InvalidArgumentError(absl::StrCat("Loader: batch ", p.batch, " is past the epoch's ",
                                                   bpe, " batches"));
  }
  const uint64_t global = p.epoch * bpe + p.batch;
  if (bpe != 0 && (global / bpe != p.epoch || global > end_)) {
    return absl::InvalidArgumentError(absl::StrCat("Loader: epoch ", p.epoch, " is past the last epoch"));
  }
  Stop();
  Start(global);
  return absl::OkStatus();
}

uint64_t Loader::SampleAt(uint64_t epoch, uint64_t p) { return query_order_.Sample(*this, epoch, p); }

}  // namespace cemb::data
