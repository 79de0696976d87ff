#include "dist/embedding_exchange.h"

#include <chrono>
#include <climits>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "dist/internal/mpi_status.h"

namespace cemb::dist {
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

absl::Status OutOfOrder(const char* call) {
  return absl::FailedPreconditionError(absl::StrCat("EmbeddingExchange::", call, " called out of order"));
}

}  // namespace

void EmbeddingExchange::Exchange::Resize(int ranks) {
  send_counts.assign(ranks, 0);
  send_displs.assign(ranks, 0);
  recv_counts.assign(ranks, 0);
  recv_displs.assign(ranks, 0);
  send_types.assign(ranks, MPI_FLOAT);
  recv_types.assign(ranks, MPI_FLOAT);
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
  // MPI counts and byte displacements are ints: the largest owned block
  // ([N x K*dim] floats) and one matrix row's extent must fit.
  const int64_t max_global = options.max_local_batch * comm.size();
  for (int r = 0; r < plan.num_ranks(); ++r) {
    const int64_t bytes = max_global * static_cast<int64_t>(plan.tables_of(r).size()) * options.dim *
                          static_cast<int64_t>(sizeof(float));
    if (bytes > INT_MAX) {
      return absl::InvalidArgumentError(absl::StrCat(
          "EmbeddingExchange: rank ", r, "'s pooled rows of a global batch of ", max_global, " take ", bytes,
          " bytes, more than MPI's int displacements reach (", INT_MAX, "); use a smaller batch or more ranks"));
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
  words_send_counts_.assign(ranks_, 0);
  words_send_displs_.assign(ranks_, 0);
  words_recv_counts_.assign(ranks_, 0);
  words_recv_displs_.assign(ranks_, 0);
  owned_offsets_.assign(owned_, std::vector<int32_t>(max_global + 1, 0));
  owned_indices_.resize(owned_);
  owned_bags_.resize(owned_);
  owned_output_.assign(max_global * owned_ * options.dim, 0.0f);
  owned_grad_.assign(max_global * owned_ * options.dim, 0.0f);
  pooled_.Resize(ranks_);
  gradients_.Resize(ranks_);
}

EmbeddingExchange::~EmbeddingExchange() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  FreeRowTypes(&emb_types_);
  FreeRowTypes(&grad_types_);
}

void EmbeddingExchange::FreeRowTypes(std::vector<MPI_Datatype>* types) {
  for (int r = 0; r < static_cast<int>(types->size()); ++r) {
    if (!plan_.tables_of(r).empty()) MPI_Type_free(&(*types)[r]);
  }
  types->clear();
}

// Per rank r: one row's columns [t*dim, (t+1)*dim) for r's tables t, with
// the extent of a whole row of `ld` floats, so `n` of them are n rows.
absl::Status EmbeddingExchange::RowTypes(int64_t ld, int64_t* current_ld, std::vector<MPI_Datatype>* types) {
  if (ld == *current_ld) return absl::OkStatus();
  FreeRowTypes(types);
  *current_ld = -1;
  types->assign(ranks_, MPI_FLOAT);
  std::vector<int> displs;
  for (int r = 0; r < ranks_; ++r) {
    const std::span<const int> tables = plan_.tables_of(r);
    if (tables.empty()) continue;
    displs.clear();
    for (int t : tables) displs.push_back(static_cast<int>(t * options_.dim));
    MPI_Datatype row;
    CEMB_RETURN_IF_ERROR(MpiStatus(MPI_Type_create_indexed_block(static_cast<int>(tables.size()),
                                                                 static_cast<int>(options_.dim), displs.data(),
                                                                 MPI_FLOAT, &row),
                                   "MPI_Type_create_indexed_block"));
    absl::Status s = MpiStatus(
        MPI_Type_create_resized(row, 0, static_cast<MPI_Aint>(ld * sizeof(float)), &(*types)[r]),
        "MPI_Type_create_resized");
    MPI_Type_free(&row);
    if (s.ok()) s = MpiStatus(MPI_Type_commit(&(*types)[r]), "MPI_Type_commit");
    if (!s.ok()) {
      for (int q = 0; q < r; ++q) {
        if (!plan_.tables_of(q).empty()) MPI_Type_free(&(*types)[q]);
      }
      types->clear();
      return s;
    }
  }
  *current_ld = ld;
  return absl::OkStatus();
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
    words_send_counts_[r] = static_cast<int>(words);
    words_send_displs_[r] = static_cast<int>(total);
    total += words;
  }
  if (local.ok()) {
    if (words_send_.size() < static_cast<size_t>(total)) words_send_.resize(total);
    for (int r = 0; r < ranks_; ++r) {
      int32_t* out = words_send_.data() + words_send_displs_[r];
      for (int t : plan_.tables_of(r)) {
        const std::span<const int32_t> offsets = bags[t].offsets;
        for (int64_t i = 0; i < n; ++i) *out++ = offsets[i + 1] - offsets[i];
      }
      for (int t : plan_.tables_of(r)) {
        if (n == 0) continue;
        const int32_t count = bags[t].offsets[n];
        std::memcpy(out, bags[t].indices.data(), count * sizeof(int32_t));
        out += count;
      }
    }
  }
  for (int r = 0; r < ranks_; ++r) {
    meta_send_[2 * r] = local.ok() ? static_cast<int32_t>(n) : -1;
    meta_send_[2 * r + 1] = local.ok() ? words_send_counts_[r] : 0;
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
    words_recv_counts_[s] = meta_recv_[2 * s + 1];
    words_recv_displs_[s] = static_cast<int>(words);
    words += words_recv_counts_[s];
  }
  if (words_recv_.size() < static_cast<size_t>(words)) words_recv_.resize(words);
  CEMB_RETURN_IF_ERROR(MpiStatus(
      MPI_Ialltoallv(words_send_.data(), words_send_counts_.data(), words_send_displs_.data(), MPI_INT32_T,
                     words_recv_.data(), words_recv_counts_.data(), words_recv_displs_.data(), MPI_INT32_T,
                     comm_.raw(), &request_),
      "MPI_Ialltoallv"));
  for (int r = 0; r < ranks_; ++r) {
    if (r == rank_) continue;
    stats_.bytes_sent += int64_t{words_send_counts_[r]} * 4;
    stats_.bytes_received += int64_t{words_recv_counts_[r]} * 4;
  }
  ++stats_.steps;
  state_ = State::kIndices;
  return absl::OkStatus();
}

absl::Status EmbeddingExchange::Wait(State expected, State next, double* seconds) {
  ScopedSeconds timer(seconds);
  if (state_ != expected) return absl::FailedPreconditionError("EmbeddingExchange: no exchange of that kind in flight");
  CEMB_RETURN_IF_ERROR(MpiStatus(MPI_Wait(&request_, MPI_STATUS_IGNORE), "MPI_Wait"));
  state_ = next;
  return absl::OkStatus();
}

absl::Status EmbeddingExchange::WaitIndices() {
  CEMB_RETURN_IF_ERROR(Wait(State::kIndices, State::kOwnedBags, &stats_.indices_seconds));
  ScopedSeconds timer(&stats_.indices_seconds);
  // Offsets of each owned table over the global batch, from the lengths.
  int64_t n_all = global_batch_;
  for (int k = 0; k < owned_; ++k) owned_offsets_[k][0] = 0;
  for (int s = 0; s < ranks_; ++s) {
    const int32_t* lengths = words_recv_.data() + words_recv_displs_[s];
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
    const int32_t* in = words_recv_.data() + words_recv_displs_[s] + int64_t{owned_} * local_[s];
    for (int k = 0; k < owned_; ++k) {
      const int32_t begin = owned_offsets_[k][first_[s]];
      const int32_t count = owned_offsets_[k][first_[s] + local_[s]] - begin;
      std::memcpy(owned_indices_[k].data() + begin, in, count * sizeof(int32_t));
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

absl::Status EmbeddingExchange::StartPooled(MatrixView emb) {
  if (state_ != State::kOwnedBags) return OutOfOrder("StartPooled");
  ScopedSeconds timer(&stats_.pooled_seconds);
  const int64_t cols = plan_.num_tables() * options_.dim;
  if (emb.rows != local_[rank_] || emb.cols != cols || emb.ld < cols) {
    return absl::InvalidArgumentError(absl::StrCat("EmbeddingExchange::StartPooled: a ", emb.rows, " x ", emb.cols,
                                                   " (ld ", emb.ld, ") matrix where ", local_[rank_], " x ", cols,
                                                   " is needed"));
  }
  CEMB_RETURN_IF_ERROR(RowTypes(emb.ld, &emb_ld_, &emb_types_));
  // Sends: rank s's rows of owned_output, contiguous. Receives: n_me rows of
  // each owner's columns, straight into emb.
  const int64_t row_bytes = owned_ * options_.dim * static_cast<int64_t>(sizeof(float));
  for (int r = 0; r < ranks_; ++r) {
    pooled_.send_counts[r] = static_cast<int>(local_[r] * owned_ * options_.dim);
    pooled_.send_displs[r] = static_cast<int>(first_[r] * row_bytes);
    const bool owner = !plan_.tables_of(r).empty();
    pooled_.recv_counts[r] = owner ? static_cast<int>(local_[rank_]) : 0;
    pooled_.recv_types[r] = owner ? emb_types_[r] : MPI_FLOAT;
    if (r != rank_) {
      stats_.bytes_sent += pooled_.send_counts[r] * int64_t{sizeof(float)};
      stats_.bytes_received += local_[rank_] * int64_t(plan_.tables_of(r).size()) * options_.dim * 4;
    }
  }
  CEMB_RETURN_IF_ERROR(MpiStatus(
      MPI_Ialltoallw(owned_output_.data(), pooled_.send_counts.data(), pooled_.send_displs.data(),
                     pooled_.send_types.data(), emb.data, pooled_.recv_counts.data(), pooled_.recv_displs.data(),
                     pooled_.recv_types.data(), comm_.raw(), &request_),
      "MPI_Ialltoallw"));
  state_ = State::kPooled;
  return absl::OkStatus();
}

absl::Status EmbeddingExchange::WaitPooled() {
  return Wait(State::kPooled, State::kForwardDone, &stats_.pooled_seconds);
}

absl::Status EmbeddingExchange::StartGradients(ConstMatrixView d_emb) {
  if (state_ != State::kForwardDone) return OutOfOrder("StartGradients");
  ScopedSeconds timer(&stats_.gradient_seconds);
  const int64_t cols = plan_.num_tables() * options_.dim;
  if (d_emb.rows != local_[rank_] || d_emb.cols != cols || d_emb.ld < cols) {
    return absl::InvalidArgumentError(absl::StrCat("EmbeddingExchange::StartGradients: a ", d_emb.rows, " x ",
                                                   d_emb.cols, " (ld ", d_emb.ld, ") matrix where ",
                                                   local_[rank_], " x ", cols, " is needed"));
  }
  CEMB_RETURN_IF_ERROR(RowTypes(d_emb.ld, &grad_ld_, &grad_types_));
  // Sends: n_me rows of each owner's columns, read in place from d_emb.
  // Receives: rank s's rows of owned_grad, contiguous.
  const int64_t row_bytes = owned_ * options_.dim * static_cast<int64_t>(sizeof(float));
  for (int r = 0; r < ranks_; ++r) {
    const bool owner = !plan_.tables_of(r).empty();
    gradients_.send_counts[r] = owner ? static_cast<int>(local_[rank_]) : 0;
    gradients_.send_types[r] = owner ? grad_types_[r] : MPI_FLOAT;
    gradients_.recv_counts[r] = static_cast<int>(local_[r] * owned_ * options_.dim);
    gradients_.recv_displs[r] = static_cast<int>(first_[r] * row_bytes);
    if (r != rank_) {
      stats_.bytes_sent += local_[rank_] * int64_t(plan_.tables_of(r).size()) * options_.dim * 4;
      stats_.bytes_received += gradients_.recv_counts[r] * int64_t{sizeof(float)};
    }
  }
  CEMB_RETURN_IF_ERROR(MpiStatus(
      MPI_Ialltoallw(d_emb.data, gradients_.send_counts.data(), gradients_.send_displs.data(),
                     gradients_.send_types.data(), owned_grad_.data(), gradients_.recv_counts.data(),
                     gradients_.recv_displs.data(), gradients_.recv_types.data(), comm_.raw(), &request_),
      "MPI_Ialltoallw"));
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

}  // namespace cemb::dist
