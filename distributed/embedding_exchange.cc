#include "distributed/embedding_exchange.h"

#include <chrono>
#include <climits>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "distributed/internal/mpi_status.h"

// Message layout (int32 words; rank s to owner r): for each of r's tables in
// order, the n_s bag lengths; then each table's indices. A first
// MPI_Alltoall carries {n_s, words} per pair, and n_s = -1 when rank s found
// its bags malformed: then every rank returns that rank's error
// (Comm::AgreeOnStatus), at no cost to a step that succeeds. Pooled rows and
// gradients travel as fp32, one MPI_Ialltoallv each, in one contiguous
// block per pair: an owner's rows of rank s are rows [first_s, first_s +
// n_s) of owned_output / owned_grad as they are; on rank s they are
// unpacked into emb's columns (WaitPooled) or packed from d_emb's
// (StartGradients). That copy costs less than letting MPI scatter them
// with derived datatypes (MPI_Ialltoallw), which takes Open MPI off its
// single-copy path (docs/distributed.md has the figures).

namespace cemb::distributed {
namespace {

using internal::MpiStatus;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Adds the seconds from its construction to its end to *sum.
class ScopedSeconds {
 public:
  explicit ScopedSeconds(double* sum) : sum_(sum), start_(Now()) {}
  ~ScopedSeconds() { *sum_ += Now() - start_; }

 private:
  double* sum_;
  double start_;
};

// The columns of `tables` (dim each) of m's rows, from / into a block that
// holds them row after row: block row i = [table 0's dim | table 1's | ...].
void ScatterColumns(const float* block, std::span<const int> tables, int64_t dim, MatrixView m) {
  for (int64_t i = 0; i < m.rows; ++i) {
    float* row = m.row(i);
    for (int t : tables) {
      std::memcpy(row + t * dim, block, dim * sizeof(float));
      block += dim;
    }
  }
}

void GatherColumns(ConstMatrixView m, std::span<const int> tables, int64_t dim, float* block) {
  for (int64_t i = 0; i < m.rows; ++i) {
    const float* row = m.row(i);
    for (int t : tables) {
      std::memcpy(block, row + t * dim, dim * sizeof(float));
      block += dim;
    }
  }
}

absl::Status OutOfOrder(const char* call) {
  return absl::FailedPreconditionError(absl::StrCat("EmbeddingExchange::", call, " called out of order"));
}

}  // namespace

void EmbeddingExchange::Counts::Resize(int ranks) {
  send_counts.assign(ranks, 0);
  send_displs.assign(ranks, 0);
  recv_counts.assign(ranks, 0);
  recv_displs.assign(ranks, 0);
}

absl::StatusOr<std::unique_ptr<EmbeddingExchange>> EmbeddingExchange::Create(const Comm& comm,
                                                                             const ShardPlan& plan,
                                                                             const ExchangeOptions& options) {
  if (plan.num_ranks() != comm.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("EmbeddingExchange: a plan for ", plan.num_ranks(), " ranks on ", comm.size()));
  }
  if (options.dim < 1 || options.max_local_batch < 1) {
    return absl::InvalidArgumentError(absl::StrCat("EmbeddingExchange: dim ", options.dim, " and max_local_batch ",
                                                   options.max_local_batch, " must be >= 1"));
  }
  // MPI counts and displacements are ints: the largest owned block
  // ([N x K*dim] floats) and a rank's received rows must fit.
  const int64_t max_global = options.max_local_batch * comm.size();
  for (int r = 0; r < plan.num_ranks(); ++r) {
    const int64_t floats = max_global * static_cast<int64_t>(plan.tables_of(r).size()) * options.dim;
    if (floats > INT_MAX || options.max_local_batch * plan.num_tables() * options.dim > INT_MAX) {
      return absl::InvalidArgumentError(absl::StrCat(
          "EmbeddingExchange: rank ", r, "'s pooled rows of a global batch of ", max_global, " are ", floats,
          " floats, more than MPI's int counts reach (", INT_MAX, "); use a smaller batch or more ranks"));
    }
  }
  return std::unique_ptr<EmbeddingExchange>(new EmbeddingExchange(comm, plan, options));
}

EmbeddingExchange::EmbeddingExchange(const Comm& comm, const ShardPlan& plan, const ExchangeOptions& options)
    : comm_(comm), plan_(plan), options_(options), rank_(comm.rank()), ranks_(comm.size()),
      owned_(static_cast<int>(plan.tables_of(comm.rank()).size())) {
  const int64_t max_global = options.max_local_batch * ranks_;
  local_.assign(ranks_, 0);
  first_.assign(ranks_, 0);
  meta_send_.assign(2 * ranks_, 0);
  meta_recv_.assign(2 * ranks_, 0);
  words_.Resize(ranks_);
  rows_.Resize(ranks_);
  grads_.Resize(ranks_);
  column_of_.assign(ranks_, 0);
  for (int r = 1; r < ranks_; ++r) {
    column_of_[r] = column_of_[r - 1] + static_cast<int64_t>(plan.tables_of(r - 1).size());
  }
  owned_offsets_.assign(owned_, std::vector<int32_t>(max_global + 1, 0));
  owned_indices_.resize(owned_);
  owned_bags_.resize(owned_);
  owned_output_.assign(max_global * owned_ * options.dim, 0.0f);
  owned_grad_.assign(max_global * owned_ * options.dim, 0.0f);
  rows_recv_.assign(options.max_local_batch * plan.num_tables() * options.dim, 0.0f);
  grads_send_.assign(options.max_local_batch * plan.num_tables() * options.dim, 0.0f);
}

absl::Status EmbeddingExchange::CheckBags(std::span<const Bags<int32_t>> bags) const {
  if (static_cast<int>(bags.size()) != plan_.num_tables()) {
    return absl::InvalidArgumentError(
        absl::StrCat("EmbeddingExchange: ", bags.size(), " tables' bags for ", plan_.num_tables(), " tables"));
  }
  const int64_t n = bags.empty() ? 0 : bags[0].nbags();
  if (n > options_.max_local_batch) {
    return absl::InvalidArgumentError(absl::StrCat("EmbeddingExchange: a local batch of ", n,
                                                   " > max_local_batch ", options_.max_local_batch));
  }
  for (size_t t = 0; t < bags.size(); ++t) {
    const Bags<int32_t>& b = bags[t];
    if (b.nbags() != n) {
      return absl::InvalidArgumentError(
          absl::StrCat("EmbeddingExchange: table ", t, " has ", b.nbags(), " bags where table 0 has ", n));
    }
    if (!b.weights.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("EmbeddingExchange: table ", t, " has per-index weights"));
    }
    if (n == 0) continue;
    if (b.offsets[0] != 0) {
      return absl::InvalidArgumentError(absl::StrCat("EmbeddingExchange: table ", t, ": offsets[0] = ",
                                                     b.offsets[0], ", not 0"));
    }
    for (int64_t i = 0; i < n; ++i) {
      if (b.offsets[i + 1] < b.offsets[i]) {
        return absl::InvalidArgumentError(absl::StrCat("EmbeddingExchange: table ", t, ", bag ", i, ": offsets ",
                                                       b.offsets[i], " > ", b.offsets[i + 1]));
      }
    }
    if (static_cast<size_t>(b.offsets[n]) > b.indices.size()) {
      return absl::InvalidArgumentError(absl::StrCat("EmbeddingExchange: table ", t, ": offsets end at ",
                                                     b.offsets[n], " past ", b.indices.size(), " indices"));
    }
  }
  return absl::OkStatus();
}

absl::Status EmbeddingExchange::StartIndices(std::span<const Bags<int32_t>> bags) {
  // After a forward-only step, or a step abandoned after an agreed error.
  if (state_ != State::kIdle && state_ != State::kForwardDone && state_ != State::kOwnedBags) {
    return OutOfOrder("StartIndices");
  }
  ScopedSeconds timer(&stats_.indices_seconds);
  absl::Status local = CheckBags(bags);
  const int64_t n = local.ok() && !bags.empty() ? bags[0].nbags() : 0;

  // Words for each owner: its tables' lengths, then their indices.
  int64_t total = 0;
  for (int r = 0; r < ranks_ && local.ok(); ++r) {
    int64_t words = 0;
    for (int t : plan_.tables_of(r)) words += n + (n > 0 ? bags[t].offsets[n] : 0);
    if (words > INT_MAX / ranks_) {
      local = absl::InvalidArgumentError(absl::StrCat("EmbeddingExchange: ", words, " words for rank ", r,
                                                      " exceed what MPI's int counts reach from ", ranks_,
                                                      " ranks"));
    }
    words_.send_counts[r] = static_cast<int>(words);
    words_.send_displs[r] = static_cast<int>(total);
    total += words;
  }
  if (local.ok()) {
    if (words_send_.size() < static_cast<size_t>(total)) words_send_.resize(total);
    for (int r = 0; r < ranks_; ++r) {
      int32_t* out = words_send_.data() + words_.send_displs[r];
      for (int t : plan_.tables_of(r)) {
        const std::span<const int32_t> offsets = bags[t].offsets;
        for (int64_t i = 0; i < n; ++i) *out++ = offsets[i + 1] - offsets[i];
      }
      for (int t : plan_.tables_of(r)) {
        const int32_t count = n == 0 ? 0 : bags[t].offsets[n];
        if (count == 0) continue;  // indices may be empty, its data() null
        std::memcpy(out, bags[t].indices.data(), count * sizeof(int32_t));
        out += count;
      }
    }
  }
  for (int r = 0; r < ranks_; ++r) {
    meta_send_[2 * r] = local.ok() ? static_cast<int32_t>(n) : -1;
    meta_send_[2 * r + 1] = local.ok() ? words_.send_counts[r] : 0;
  }
  CEMB_RETURN_IF_ERROR(comm_.Alltoall(meta_send_, meta_recv_));
  for (int s = 0; s < ranks_; ++s) {
    if (meta_recv_[2 * s] < 0) return comm_.AgreeOnStatus(local);  // every rank sees rank s's -1
  }

  global_batch_ = 0;
  int64_t words = 0;
  for (int s = 0; s < ranks_; ++s) {
    local_[s] = meta_recv_[2 * s];
    first_[s] = global_batch_;
    global_batch_ += local_[s];
    // This rank's own words stay in words_send_ (Chunk), never through MPI.
    words_.recv_counts[s] = s == rank_ ? 0 : meta_recv_[2 * s + 1];
    words_.recv_displs[s] = static_cast<int>(words);
    words += words_.recv_counts[s];
  }
  // (MPI reads the count arrays until the exchange completes: they stay as
  // posted until the next StartIndices.)
  words_.send_counts[rank_] = 0;
  if (words_recv_.size() < static_cast<size_t>(words)) words_recv_.resize(words);
  CEMB_RETURN_IF_ERROR(Post(words_send_.data(), words_, words_recv_.data(), MPI_INT32_T));
  ++stats_.steps;
  state_ = State::kIndices;
  return absl::OkStatus();
}

// Per rank r, the blocks of this step's pooled rows: `owner` is rank r's
// rows of owned_output / owned_grad ([n_r x K*dim] at row first_r), `mine`
// this rank's rows of r's tables ([n_me x K_r*dim] at element
// n_me * column_of_[r] * dim of rows_recv_ / grads_send_). This rank's own
// block is 0: it is copied, never sent.
void EmbeddingExchange::RowBlocks(std::vector<int>* owner_counts, std::vector<int>* owner_displs,
                                  std::vector<int>* mine_counts, std::vector<int>* mine_displs) const {
  const int64_t n = local_[rank_], dim = options_.dim;
  for (int r = 0; r < ranks_; ++r) {
    const int64_t k = static_cast<int64_t>(plan_.tables_of(r).size());
    (*owner_counts)[r] = r == rank_ ? 0 : static_cast<int>(local_[r] * owned_ * dim);
    (*owner_displs)[r] = static_cast<int>(first_[r] * owned_ * dim);
    (*mine_counts)[r] = r == rank_ ? 0 : static_cast<int>(n * k * dim);
    (*mine_displs)[r] = static_cast<int>(n * column_of_[r] * dim);
  }
}

// kBlocking: the whole MPI_Alltoallv now (request_ stays null, so Wait only
// finishes the step's local part); kNonblocking: MPI_Ialltoallv. Counts the
// bytes (this rank's own block is always 0 here).
absl::Status EmbeddingExchange::Post(const void* send, const Counts& counts, void* recv, MPI_Datatype type) {
  for (int r = 0; r < ranks_; ++r) {
    stats_.bytes_sent += int64_t{counts.send_counts[r]} * 4;  // int32 and float
    stats_.bytes_received += int64_t{counts.recv_counts[r]} * 4;
  }
  if (options_.transfer == Transfer::kBlocking) {
    return MpiStatus(MPI_Alltoallv(send, counts.send_counts.data(), counts.send_displs.data(), type, recv,
                                   counts.recv_counts.data(), counts.recv_displs.data(), type, comm_.raw()),
                     "MPI_Alltoallv");
  }
  return MpiStatus(MPI_Ialltoallv(send, counts.send_counts.data(), counts.send_displs.data(), type, recv,
                                  counts.recv_counts.data(), counts.recv_displs.data(), type, comm_.raw(), &request_),
                   "MPI_Ialltoallv");
}

absl::Status EmbeddingExchange::Progress() {
  if (request_ == MPI_REQUEST_NULL) return absl::OkStatus();
  int done = 0;  // when done, MPI_Test sets request_ to MPI_REQUEST_NULL and Wait returns at once
  return MpiStatus(MPI_Test(&request_, &done, MPI_STATUS_IGNORE), "MPI_Test");
}

absl::Status EmbeddingExchange::Wait(State expected, State next, double* seconds) {
  ScopedSeconds timer(seconds);
  if (state_ != expected) return absl::FailedPreconditionError("EmbeddingExchange: no exchange of that kind in flight");
  CEMB_RETURN_IF_ERROR(MpiStatus(MPI_Wait(&request_, MPI_STATUS_IGNORE), "MPI_Wait"));
  state_ = next;
  return absl::OkStatus();
}

// Rank s's words for this rank: received, or this rank's own packed ones.
const int32_t* EmbeddingExchange::Chunk(int s) const {
  return s == rank_ ? words_send_.data() + words_.send_displs[s] : words_recv_.data() + words_.recv_displs[s];
}

absl::Status EmbeddingExchange::WaitIndices() {
  CEMB_RETURN_IF_ERROR(Wait(State::kIndices, State::kOwnedBags, &stats_.indices_seconds));
  ScopedSeconds timer(&stats_.indices_seconds);
  // Offsets of each owned table over the global batch, from the lengths.
  int64_t n_all = global_batch_;
  for (int k = 0; k < owned_; ++k) owned_offsets_[k][0] = 0;
  for (int s = 0; s < ranks_; ++s) {
    const int32_t* lengths = Chunk(s);
    for (int k = 0; k < owned_; ++k) {
      int32_t* offsets = owned_offsets_[k].data() + first_[s];
      const int32_t* len = lengths + k * local_[s];
      for (int64_t i = 0; i < local_[s]; ++i) offsets[i + 1] = offsets[i] + len[i];
    }
  }
  // Indices: rank s's block of table k goes to offsets[first_s].
  for (int k = 0; k < owned_; ++k) {
    const size_t count = static_cast<size_t>(owned_offsets_[k][n_all]);
    if (owned_indices_[k].size() < count) owned_indices_[k].resize(count);
  }
  for (int s = 0; s < ranks_; ++s) {
    const int32_t* in = Chunk(s) + int64_t{owned_} * local_[s];
    for (int k = 0; k < owned_; ++k) {
      const int32_t begin = owned_offsets_[k][first_[s]];
      const int32_t count = owned_offsets_[k][first_[s] + local_[s]] - begin;
      if (count > 0) std::memcpy(owned_indices_[k].data() + begin, in, count * sizeof(int32_t));  // in may be null
      in += count;
    }
  }
  for (int k = 0; k < owned_; ++k) {
    owned_bags_[k] = Bags<int32_t>{
        .offsets = std::span<const int32_t>(owned_offsets_[k].data(), n_all + 1),
        .indices = std::span<const int32_t>(owned_indices_[k].data(), owned_offsets_[k][n_all])};
  }
  return absl::OkStatus();
}

MatrixView EmbeddingExchange::owned_output() {
  const int64_t cols = owned_ * options_.dim;
  return MatrixView{owned_output_.data(), global_batch_, cols, cols};
}

ConstMatrixView EmbeddingExchange::owned_grad() const {
  const int64_t cols = owned_ * options_.dim;
  return ConstMatrixView(owned_grad_.data(), global_batch_, cols, cols);
}

absl::Status EmbeddingExchange::CheckMatrix(const char* call, int64_t rows, int64_t cols, int64_t ld) const {
  const int64_t want = plan_.num_tables() * options_.dim;
  if (rows == local_[rank_] && cols == want && ld >= cols) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("EmbeddingExchange::", call, ": a ", rows, " x ", cols, " (ld ", ld,
                                                 ") matrix where ", local_[rank_], " x ", want, " is needed"));
}

absl::Status EmbeddingExchange::StartPooled(MatrixView emb) {
  if (state_ != State::kOwnedBags) return OutOfOrder("StartPooled");
  ScopedSeconds timer(&stats_.pooled_seconds);
  CEMB_RETURN_IF_ERROR(CheckMatrix("StartPooled", emb.rows, emb.cols, emb.ld));
  const int64_t dim = options_.dim;
  // Sends rank r's rows of owned_output; receives this rank's rows of r's tables.
  RowBlocks(&rows_.send_counts, &rows_.send_displs, &rows_.recv_counts, &rows_.recv_displs);
  CEMB_RETURN_IF_ERROR(Post(owned_output_.data(), rows_, rows_recv_.data(), MPI_FLOAT));
  // This rank's samples of its own tables, while the others' travel.
  ScatterColumns(owned_output_.data() + first_[rank_] * owned_ * dim, plan_.tables_of(rank_), dim, emb);
  pending_emb_ = emb;
  state_ = State::kPooled;
  return absl::OkStatus();
}

absl::Status EmbeddingExchange::WaitPooled() {
  CEMB_RETURN_IF_ERROR(Wait(State::kPooled, State::kForwardDone, &stats_.pooled_seconds));
  ScopedSeconds timer(&stats_.pooled_seconds);
  for (int r = 0; r < ranks_; ++r) {
    if (r == rank_) continue;  // copied by StartPooled
    ScatterColumns(rows_recv_.data() + rows_.recv_displs[r], plan_.tables_of(r), options_.dim, pending_emb_);
  }
  return absl::OkStatus();
}

absl::Status EmbeddingExchange::StartGradients(ConstMatrixView d_emb) {
  if (state_ != State::kForwardDone) return OutOfOrder("StartGradients");
  ScopedSeconds timer(&stats_.gradient_seconds);
  CEMB_RETURN_IF_ERROR(CheckMatrix("StartGradients", d_emb.rows, d_emb.cols, d_emb.ld));
  // StartPooled's blocks the other way: sends this rank's rows of r's
  // tables, packed from d_emb; receives rank r's rows of owned_grad.
  const int64_t dim = options_.dim;
  RowBlocks(&grads_.recv_counts, &grads_.recv_displs, &grads_.send_counts, &grads_.send_displs);
  for (int r = 0; r < ranks_; ++r) {
    if (r == rank_) continue;  // copied below
    GatherColumns(d_emb, plan_.tables_of(r), dim, grads_send_.data() + grads_.send_displs[r]);
  }
  CEMB_RETURN_IF_ERROR(Post(grads_send_.data(), grads_, owned_grad_.data(), MPI_FLOAT));
  // This rank's samples of its own tables, while the others' travel.
  GatherColumns(d_emb, plan_.tables_of(rank_), dim, owned_grad_.data() + first_[rank_] * owned_ * dim);
  state_ = State::kGradients;
  return absl::OkStatus();
}

absl::Status EmbeddingExchange::WaitGradients() {
  return Wait(State::kGradients, State::kIdle, &stats_.gradient_seconds);
}

absl::Status EmbeddingExchange::Forward(std::span<const Bags<int32_t>> bags, PoolFn pool, MatrixView emb) {
  CEMB_RETURN_IF_ERROR(StartIndices(bags));
  CEMB_RETURN_IF_ERROR(WaitIndices());
  absl::Status pooled = owned_ > 0 ? pool(owned_bags(), owned_output()) : absl::OkStatus();
  CEMB_RETURN_IF_ERROR(comm_.AgreeOnStatus(pooled));
  CEMB_RETURN_IF_ERROR(StartPooled(emb));
  return WaitPooled();
}

absl::Status EmbeddingExchange::Backward(ConstMatrixView d_emb, UpdateFn update) {
  CEMB_RETURN_IF_ERROR(StartGradients(d_emb));
  CEMB_RETURN_IF_ERROR(WaitGradients());
  absl::Status updated = owned_ > 0 ? update(owned_bags(), owned_grad()) : absl::OkStatus();
  return comm_.AgreeOnStatus(updated);
}

}  // namespace cemb::distributed
