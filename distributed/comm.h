// The MPI world of a multi-process run and the few collectives cemb::distributed
// uses, each returning absl::Status with MPI's own error string.
//
// World owns MPI in a process: World::Init calls MPI_Init_thread, makes
// errors on MPI_COMM_WORLD return instead of killing the job
// (MPI_ERRORS_RETURN), and its destructor calls MPI_Finalize. There is one
// World per process and MPI cannot be started again after it is finalized;
// every object that holds MPI resources (an EmbeddingExchange) must be
// destroyed before the World. Comm is a borrowed communicator: a handle,
// cheap to copy, valid while the World lives.
//
// Collectives: every rank of the communicator calls the same collectives in
// the same order (MPI's rule). A rank that skips one leaves the others
// waiting in it, so an error found on one rank must not make that rank leave
// the sequence alone. Two ways out, both ending with every rank stopped:
//   - AgreeOnStatus(local), called by every rank at a step or phase boundary:
//     when any rank's status is an error, every rank returns an error that
//     names the first failing rank and carries its code and message. The
//     program then returns from main with a non-zero exit status on every
//     rank (after the World's MPI_Finalize), and mpirun exits non-zero.
//   - Abort(code), where the other ranks may already wait in a collective
//     this rank cannot join (an MPI call itself failed): MPI_Abort, which
//     makes mpirun kill every rank.
// A rank that dies outright (a crash, std::exit, std::abort, a kill) never
// reaches the next agreement: mpirun sees a process of the job end without
// MPI_Finalize, kills the others and exits non-zero within about a second
// (tests/distributed/CMakeLists.txt checks std::exit(3) and std::abort() on one of
// two ranks while the other waits in a barrier).
//
// Threads: MPI is called from one thread, the trainer's (the loader's and the
// prefetcher's threads never call it), so World asks for
// MPI_THREAD_FUNNELED by default.
//
//   CEMB_ASSIGN_OR_RETURN(distributed::World world, distributed::World::Init(&argc, &argv));
//   const distributed::Comm& comm = world.comm();
//   absl::Status s = LoadMyShare();                 // may fail on one rank
//   CEMB_RETURN_IF_ERROR(comm.AgreeOnStatus(s));    // the same error everywhere
//   CEMB_RETURN_IF_ERROR(comm.AllreduceSum(mlp_gradients));
#ifndef CEMB_DISTRIBUTED_COMM_H_
#define CEMB_DISTRIBUTED_COMM_H_

#include <mpi.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cemb::distributed {

// MPI's thread support levels (MPI_THREAD_*), weakest first.
enum class ThreadLevel { kSingle, kFunneled, kSerialized, kMultiple };

class Comm {
 public:
  // Borrows `comm` (MPI_COMM_WORLD or one the caller owns).
  // REQUIRES: MPI is initialised.
  explicit Comm(MPI_Comm comm);

  int rank() const { return rank_; }
  int size() const { return size_; }
  MPI_Comm raw() const { return comm_; }

  [[nodiscard]] absl::Status Barrier() const;
  // data[i] = sum over ranks of data[i], in place, on every rank.
  // NOTE: MPI's reduction order is fixed for a given size and layout, so
  // every rank gets the same bits, but not a single process's sum.
  [[nodiscard]] absl::Status AllreduceSum(std::span<float> data) const;
  [[nodiscard]] absl::Status AllreduceSum(std::span<double> data) const;
  // all = every rank's `local`, rank 0's first (ranks may give different
  // counts); `*all` is resized to the total. Allocates (counts, the result):
  // for evaluation, not for a training step.
  [[nodiscard]] absl::Status Allgatherv(std::span<const float> local, std::vector<float>* all) const;
  // (*all)[r] = rank r's `local`, on every rank (bytes; the lengths travel
  // first). For reports at the end of a run, not for a training step.
  [[nodiscard]] absl::Status Allgather(const std::string& local, std::vector<std::string>* all) const;
  // `*text` of rank `root` on every rank (the length travels first).
  [[nodiscard]] absl::Status Broadcast(std::string* text, int root) const;
  // recv[r * k .. (r + 1) * k) = what rank r sent to this rank from its
  // send[rank() * k ..), k = send.size() / size().
  // REQUIRES: send.size() == recv.size(), a multiple of size().
  [[nodiscard]] absl::Status Alltoall(std::span<const int32_t> send, std::span<int32_t> recv) const;
  // MPI_Alltoallv: rank r gets send[send_displs[r] .. + send_counts[r]) into
  // its recv at recv_displs[this rank]. Counts and displacements are in
  // elements; each span of them has size() entries, and every block lies
  // inside its buffer (checked, InvalidArgument).
  // Instantiated for int32_t, int64_t and float.
  template <typename T>
  [[nodiscard]] absl::Status Alltoallv(std::span<const T> send, std::span<const int> send_counts,
                                       std::span<const int> send_displs, std::span<T> recv,
                                       std::span<const int> recv_counts, std::span<const int> recv_displs) const;

  // Collective. OK on every rank when `local` is OK on every rank; otherwise
  // on every rank an error with the code of the lowest failing rank f and
  // the message "rank f: <its message>" (plus " (N other ranks failed too)").
  // Costs one allreduce of an int when all are OK (microseconds on one
  // machine); the failure path adds an allreduce and two broadcasts.
  [[nodiscard]] absl::Status AgreeOnStatus(const absl::Status& local) const;

  // MPI_Abort: mpirun ends every rank of the job; `code` becomes its exit
  // status. Does not return.
  [[noreturn]] void Abort(int code) const;

 private:
  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
};

class World {
 public:
  // MPI_Init_thread asking for `required`. FailedPrecondition when MPI was
  // initialised before or gives less than `required`; MPI_COMM_WORLD then
  // returns errors (MPI_ERRORS_RETURN). Without mpirun, a world of 1 rank.
  [[nodiscard]] static absl::StatusOr<World> Init(int* argc, char*** argv,
                                                  ThreadLevel required = ThreadLevel::kFunneled);
  World(World&& other) noexcept;
  World& operator=(World&&) = delete;
  World(const World&) = delete;
  ~World();  // MPI_Finalize (collective: every rank ends its World)

  const Comm& comm() const { return comm_; }
  ThreadLevel provided() const { return provided_; }

 private:
  World(ThreadLevel provided) : comm_(MPI_COMM_WORLD), provided_(provided) {}
  Comm comm_;
  ThreadLevel provided_;
  bool owns_ = true;
};

}  // namespace cemb::distributed

#endif  // CEMB_DISTRIBUTED_COMM_H_
