// EmbeddingExchange: the all-to-all of hybrid-parallel DLRM training. Each
// table lives on one rank (its owner, ShardPlan); each rank holds its own
// share of every global batch (its local batch); the exchange moves, per
// step, what the owners and the samples' ranks need of each other.
//
// Per step, collective (every rank calls the same sequence):
//   StartIndices(bags)   bags: T Bags, one per table, each with n_me bags (the
//   WaitIndices()        local batch). Every table's bags go to its owner.
//                        After it, on each rank, owned_bags()[k] is local
//                        table k (plan.tables_of(rank)[k]) over the GLOBAL
//                        batch: N = sum of all local batches, rank 0's
//                        samples first, then rank 1's, ...
//   <pool>               the caller writes owned_output(), [N x K*dim]: row
//                        g, columns [k*dim, (k+1)*dim) = bag g of local
//                        table k (EmbeddingLayer::Lookup's layout for a
//                        layer holding the K owned tables).
//   StartPooled(emb)     each owner sends each rank the rows of its samples;
//   WaitPooled()         they land in emb [n_me x T*dim], columns
//                        [t*dim, (t+1)*dim) for table t: the layout of one
//                        process's embedding output.
//   ... interaction, MLPs ...
//   StartGradients(d_emb) d_emb: [n_me x T*dim], emb's layout. Each
//   WaitGradients()      table's columns go to its owner; owned_grad() is
//                        then [N x K*dim] in owned_output's
//                        layout, for the owner's fused update over the
//                        whole global batch's bags (owned_bags()).
// A forward-only step (evaluation) ends after WaitPooled.
//
// Same numbers as one process: when rank s's local batch is the s-th
// contiguous slice of the global batch, owned_bags() are exactly the single
// process's bags of those tables and owned_grad() exactly its gradient
// rows, so the pooled rows and the owners' updates (reindex, then SGD or
// row-wise AdaGrad) are bit for bit those of one process.
//
// Wire format and why: distributed/embedding_exchange.cc.
//
// Start and Wait: with Transfer::kNonblocking each Start posts an
// MPI_Ialltoallv and returns, and the matching Wait completes it (see
// Transfer for what that buys on Open MPI). StartIndices and
// StartGradients copy what they send, so bags and d_emb may change as soon
// as they return; emb is written by StartPooled and WaitPooled. A rank's
// own share never goes through MPI: its rows of its own tables are copied
// once, in the Start, while the other ranks' are in flight. docs/distributed.md says
// where the trainer can overlap.
//
// Errors: malformed local bags (count, sizes, decreasing offsets, weights)
// are agreed on: every rank returns that rank's error (Comm::AgreeOnStatus).
// A bad row index is found by the owner's pooling (validate_bags, naming
// the table and the global bag); Forward and
// Backward agree on the pooling's and the update's status. Calls out of
// order are FailedPrecondition, and a matrix of the wrong shape given to
// StartPooled or StartGradients is InvalidArgument: both are programming
// errors after which the ranks are out of step (the others wait in the
// exchange), as is an MPI error (Internal): the caller aborts (Comm::Abort).
//
// Allocation: Create sizes every buffer for options.max_local_batch per
// rank; the index buffers grow to the largest step seen. A steady-state
// step allocates nothing (Open MPI's nonblocking collectives allocate their
// schedules inside MPI).
// Thread safety: one thread calls it (MPI_THREAD_FUNNELED).
//
//   CEMB_ASSIGN_OR_RETURN(auto ex, EmbeddingExchange::Create(comm, plan, {.dim = 16, .max_local_batch = 1024}));
//   CEMB_RETURN_IF_ERROR(ex->Forward(bags, [&](auto owned_bags, MatrixView out) {
//     return owned_layer->Lookup(owned_bags, out); }, emb));
//   ... backward to d_emb ...
//   CEMB_RETURN_IF_ERROR(ex->Backward(d_emb, [&](auto owned_bags, ConstMatrixView grad) {
//     return owned_layer->Update(owned_bags, grad, lr); }));
#ifndef CEMB_DISTRIBUTED_EMBEDDING_EXCHANGE_H_
#define CEMB_DISTRIBUTED_EMBEDDING_EXCHANGE_H_

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "distributed/comm.h"
#include "distributed/shard_plan.h"
#include "embedding/types.h"

namespace cemb::distributed {

// How a Start moves the data. kNonblocking: Start posts an MPI_Ialltoallv
// that Wait completes, so the caller can compute between them; kBlocking:
// Start runs the whole MPI_Alltoallv and Wait only finishes locally. Open
// MPI 4.1 has no progress thread, so a posted exchange moves mostly inside
// Wait. With nothing in between the two cost the same within the noise
// of this machine, either one ahead by up to 10% from run to run
// (bench/distributed_exchange_bench, docs/distributed.md); kNonblocking is the
// default because it is the one the trainer can overlap.
enum class Transfer { kBlocking, kNonblocking };

struct ExchangeOptions {
  int64_t dim = 16;              // the feature size of every table
  int64_t max_local_batch = 0;   // the largest local batch any rank passes; REQUIRES: >= 1
  Transfer transfer = Transfer::kNonblocking;
};

// Where the exchange spent its time, summed over calls: the seconds inside
// its own calls (Start and Wait: packing, MPI, regrouping), which is the
// communication a caller waits for (the trainer's `all-to-all` phase), and
// the bytes it moved to and from other ranks (not counting this rank's own).
struct ExchangeStats {
  double indices_seconds = 0;
  double pooled_seconds = 0;
  double gradient_seconds = 0;
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
  int64_t steps = 0;  // StartIndices calls that succeeded

  double seconds() const { return indices_seconds + pooled_seconds + gradient_seconds; }
};

class EmbeddingExchange {
 public:
  // The tables of `plan` on `comm` (plan.num_ranks() == comm.size()).
  // InvalidArgument for bad options or a batch whose element offsets
  // overflow MPI's int displacements. Not collective.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<EmbeddingExchange>> Create(const Comm& comm,
                                                                                 const ShardPlan& plan,
                                                                                 const ExchangeOptions& options);
  // REQUIRES: no operation in flight.
  ~EmbeddingExchange() = default;
  EmbeddingExchange(const EmbeddingExchange&) = delete;
  EmbeddingExchange& operator=(const EmbeddingExchange&) = delete;

  // Forward, part 1. REQUIRES: bags.size() == num_tables; every bags[t] has
  // the same nbags() = n_me <= max_local_batch, offsets[0] == 0,
  // non-decreasing offsets ending at most at indices.size(), no weights.
  [[nodiscard]] absl::Status StartIndices(std::span<const Bags<int32_t>> bags);
  [[nodiscard]] absl::Status WaitIndices();

  // After WaitIndices, until the next StartIndices.
  int64_t global_batch() const { return global_batch_; }
  int64_t local_batch(int rank) const { return local_[rank]; }
  int64_t sample_offset(int rank) const { return first_[rank]; }  // rank's first sample in the global batch
  std::span<const Bags<int32_t>> owned_bags() const { return owned_bags_; }
  // [N x K*dim], ld K*dim; empty when this rank owns no table.
  MatrixView owned_output();

  // Forward, part 2. REQUIRES: after WaitIndices; emb.rows == n_me,
  // emb.cols == num_tables * dim, emb.ld >= emb.cols; owned_output()
  // filled. Columns past num_tables * dim are left as they are.
  // NOTE: emb's columns of this rank's tables are written here, the others'
  // by WaitPooled; it must stay valid until then.
  [[nodiscard]] absl::Status StartPooled(MatrixView emb);
  [[nodiscard]] absl::Status WaitPooled();

  // Backward. REQUIRES: after WaitPooled of the same step; d_emb as emb.
  [[nodiscard]] absl::Status StartGradients(ConstMatrixView d_emb);
  [[nodiscard]] absl::Status WaitGradients();
  // After WaitGradients: [N x K*dim] in owned_output()'s layout.
  ConstMatrixView owned_grad() const;

  // Between a Start and its Wait: lets MPI move the posted exchange along
  // (MPI_Test; Open MPI has no progress thread), e.g. between the layers of
  // an MLP that runs meanwhile. Not collective; nothing to do (OK) with
  // Transfer::kBlocking or when nothing is in flight.
  [[nodiscard]] absl::Status Progress();

  // The owner's work: pool(owned_bags, owned_output) and
  // update(owned_bags, owned_grad). Not called on a rank that owns no table.
  using PoolFn = absl::FunctionRef<absl::Status(std::span<const Bags<int32_t>>, MatrixView)>;
  using UpdateFn = absl::FunctionRef<absl::Status(std::span<const Bags<int32_t>>, ConstMatrixView)>;
  // StartIndices, WaitIndices, pool, AgreeOnStatus(pool's status),
  // StartPooled, WaitPooled: the same status on every rank.
  [[nodiscard]] absl::Status Forward(std::span<const Bags<int32_t>> bags, PoolFn pool, MatrixView emb);
  // StartGradients, WaitGradients, update, AgreeOnStatus(update's status).
  [[nodiscard]] absl::Status Backward(ConstMatrixView d_emb, UpdateFn update);

  const ExchangeStats& stats() const { return stats_; }
  void ResetStats() { stats_ = {}; }

 private:
  enum class State { kIdle, kIndices, kOwnedBags, kPooled, kForwardDone, kGradients };
  // Counts and displacements (in elements) of one MPI_Ialltoallv.
  struct Counts {
    std::vector<int> send_counts, send_displs, recv_counts, recv_displs;
    void Resize(int ranks);
  };

  EmbeddingExchange(const Comm& comm, const ShardPlan& plan, const ExchangeOptions& options);
  absl::Status CheckBags(std::span<const Bags<int32_t>> bags) const;
  absl::Status CheckMatrix(const char* call, int64_t rows, int64_t cols, int64_t ld) const;
  void RowBlocks(std::vector<int>* owner_counts, std::vector<int>* owner_displs, std::vector<int>* mine_counts,
                 std::vector<int>* mine_displs) const;
  absl::Status Post(const void* send, const Counts& counts, void* recv, MPI_Datatype type);
  const int32_t* Chunk(int s) const;
  absl::Status Wait(State expected, State next, double* seconds);

  Comm comm_;
  ShardPlan plan_;
  ExchangeOptions options_;
  int rank_ = 0, ranks_ = 1;
  int owned_ = 0;  // K: tables this rank owns
  State state_ = State::kIdle;
  MPI_Request request_ = MPI_REQUEST_NULL;
  ExchangeStats stats_;

  // This step's local batches (n_s), their first global samples, N.
  std::vector<int64_t> local_, first_;
  int64_t global_batch_ = 0;

  // Indices: the {n, words} pairs, the packed words, their counts and displacements.
  std::vector<int32_t> meta_send_, meta_recv_;
  std::vector<int32_t> words_send_, words_recv_;
  Counts words_;

  // The owner's view of the global batch.
  std::vector<std::vector<int32_t>> owned_offsets_, owned_indices_;
  std::vector<Bags<int32_t>> owned_bags_;
  std::vector<float> owned_output_, owned_grad_;

  // Pooled rows and gradients, one MPI_Ialltoallv each. This rank's rows
  // travel grouped by owner: owner r's block is [n_me x K_r*dim] at
  // element n_me * column_of_[r] * dim (column_of_[r]: the tables of ranks
  // before r), unpacked into emb (WaitPooled) or packed from d_emb
  // (StartGradients).
  Counts rows_, grads_;
  std::vector<int64_t> column_of_;
  std::vector<float> rows_recv_, grads_send_;
  MatrixView pending_emb_;
};

}  // namespace cemb::distributed

#endif  // CEMB_DISTRIBUTED_EMBEDDING_EXCHANGE_H_
