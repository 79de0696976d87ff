#include "distributed/comm.h"

#include <climits>
#include <cstdlib>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "distributed/internal/mpi_status.h"

namespace cemb::distributed {
namespace {

using internal::MpiStatus;

template <typename T>
MPI_Datatype MpiType();
template <>
MPI_Datatype MpiType<char>() { return MPI_CHAR; }
template <>
MPI_Datatype MpiType<int32_t>() { return MPI_INT32_T; }
template <>
MPI_Datatype MpiType<int64_t>() { return MPI_INT64_T; }
template <>
MPI_Datatype MpiType<float>() { return MPI_FLOAT; }
template <>
MPI_Datatype MpiType<double>() { return MPI_DOUBLE; }

int ToMpiLevel(ThreadLevel level) {
  switch (level) {
    case ThreadLevel::kSingle: return MPI_THREAD_SINGLE;
    case ThreadLevel::kFunneled: return MPI_THREAD_FUNNELED;
    case ThreadLevel::kSerialized: return MPI_THREAD_SERIALIZED;
    case ThreadLevel::kMultiple: return MPI_THREAD_MULTIPLE;
  }
  return MPI_THREAD_MULTIPLE;
}

ThreadLevel FromMpiLevel(int level) {
  if (level >= MPI_THREAD_MULTIPLE) return ThreadLevel::kMultiple;
  if (level >= MPI_THREAD_SERIALIZED) return ThreadLevel::kSerialized;
  if (level >= MPI_THREAD_FUNNELED) return ThreadLevel::kFunneled;
  return ThreadLevel::kSingle;
}

// Every block [displs[r], displs[r] + counts[r]) lies in a buffer of `size`.
absl::Status CheckBlocks(const char* what, std::span<const int> counts, std::span<const int> displs,
                         size_t size, int ranks) {
  if (counts.size() != static_cast<size_t>(ranks) || displs.size() != static_cast<size_t>(ranks)) {
    return absl::InvalidArgumentError(absl::StrCat("Alltoallv: ", what, " counts/displacements have ",
                                                   counts.size(), "/", displs.size(), " entries for ", ranks,
                                                   " ranks"));
  }
  for (int r = 0; r < ranks; ++r) {
    if (counts[r] < 0 || displs[r] < 0 || static_cast<size_t>(displs[r]) + counts[r] > size) {
      return absl::InvalidArgumentError(absl::StrCat("Alltoallv: ", what, " block of rank ", r, " [", displs[r],
                                                     ", +", counts[r], ") is outside the buffer of ", size));
    }
  }
  return absl::OkStatus();
}

// MPI_Allreduce(MPI_SUM) in place.
template <typename T>
absl::Status AllreduceSumInPlace(std::span<T> data, MPI_Comm comm) {
  if (data.size() > static_cast<size_t>(INT_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat("AllreduceSum: ", data.size(), " elements > INT_MAX"));
  }
  return MpiStatus(MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(data.size()), MpiType<T>(), MPI_SUM, comm),
                   "MPI_Allreduce");
}

// MPI_Allgatherv: every rank's `local`, in rank order, into *all, and how
// many elements came from each rank into *counts. `what` names the caller.
template <typename T>
absl::Status AllgathervOf(const char* what, std::span<const T> local, MPI_Comm comm, int ranks, std::vector<T>* all,
                          std::vector<int>* counts) {
  if (local.size() > static_cast<size_t>(INT_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", local.size(), " elements > INT_MAX"));
  }
  int count = static_cast<int>(local.size());
  counts->assign(static_cast<size_t>(ranks), 0);
  std::vector<int> displs(static_cast<size_t>(ranks));
  CEMB_RETURN_IF_ERROR(MpiStatus(MPI_Allgather(&count, 1, MPI_INT, counts->data(), 1, MPI_INT, comm), "MPI_Allgather"));
  int64_t total = 0;
  for (int r = 0; r < ranks; ++r) {
    displs[r] = static_cast<int>(total);
    total += (*counts)[r];
    if (total > INT_MAX) return absl::InvalidArgumentError(absl::StrCat(what, ": ", total, " elements > INT_MAX"));
  }
  all->resize(static_cast<size_t>(total));
  return MpiStatus(MPI_Allgatherv(local.data(), count, MpiType<T>(), all->data(), counts->data(), displs.data(),
                                  MpiType<T>(), comm),
                   "MPI_Allgatherv");
}

}  // namespace

Comm::Comm(MPI_Comm comm) : comm_(comm) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

absl::Status Comm::Barrier() const { return MpiStatus(MPI_Barrier(comm_), "MPI_Barrier"); }

absl::Status Comm::AllreduceSum(std::span<float> data) const { return AllreduceSumInPlace(data, comm_); }
absl::Status Comm::AllreduceSum(std::span<double> data) const { return AllreduceSumInPlace(data, comm_); }

absl::Status Comm::Allgatherv(std::span<const float> local, std::vector<float>* all) const {
  std::vector<int> counts;
  return AllgathervOf("Allgatherv", local, comm_, size_, all, &counts);
}

absl::Status Comm::Allgather(const std::string& local, std::vector<std::string>* all) const {
  std::vector<char> bytes;
  std::vector<int> counts;
  CEMB_RETURN_IF_ERROR(AllgathervOf("Allgather", std::span<const char>(local), comm_, size_, &bytes, &counts));
  all->clear();
  size_t at = 0;
  for (int count : counts) {
    all->emplace_back(bytes.data() + at, static_cast<size_t>(count));
    at += static_cast<size_t>(count);
  }
  return absl::OkStatus();
}

absl::Status Comm::Broadcast(std::string* text, int root) const {
  uint64_t length = text->size();
  CEMB_RETURN_IF_ERROR(MpiStatus(MPI_Bcast(&length, 1, MPI_UINT64_T, root, comm_), "MPI_Bcast"));
  if (length > static_cast<uint64_t>(INT_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat("Broadcast: ", length, " bytes > INT_MAX"));
  }
  text->resize(length);
  return MpiStatus(MPI_Bcast(text->data(), static_cast<int>(length), MPI_CHAR, root, comm_), "MPI_Bcast");
}

absl::Status Comm::Alltoall(std::span<const int32_t> send, std::span<int32_t> recv) const {
  if (send.size() != recv.size() || send.size() % size_ != 0) {
    return absl::InvalidArgumentError(absl::StrCat("Alltoall: ", send.size(), " to send and ", recv.size(),
                                                   " to receive; both must be the same multiple of ", size_));
  }
  const int k = static_cast<int>(send.size() / size_);
  return MpiStatus(MPI_Alltoall(send.data(), k, MPI_INT32_T, recv.data(), k, MPI_INT32_T, comm_),
                   "MPI_Alltoall");
}

template <typename T>
absl::Status Comm::Alltoallv(std::span<const T> send, std::span<const int> send_counts,
                             std::span<const int> send_displs, std::span<T> recv, std::span<const int> recv_counts,
                             std::span<const int> recv_displs) const {
  CEMB_RETURN_IF_ERROR(CheckBlocks("send", send_counts, send_displs, send.size(), size_));
  CEMB_RETURN_IF_ERROR(CheckBlocks("receive", recv_counts, recv_displs, recv.size(), size_));
  return MpiStatus(MPI_Alltoallv(send.data(), send_counts.data(), send_displs.data(), MpiType<T>(), recv.data(),
                                 recv_counts.data(), recv_displs.data(), MpiType<T>(), comm_),
                   "MPI_Alltoallv");
}

template absl::Status Comm::Alltoallv<int32_t>(std::span<const int32_t>, std::span<const int>,
                                               std::span<const int>, std::span<int32_t>, std::span<const int>,
                                               std::span<const int>) const;
template absl::Status Comm::Alltoallv<int64_t>(std::span<const int64_t>, std::span<const int>,
                                               std::span<const int>, std::span<int64_t>, std::span<const int>,
                                               std::span<const int>) const;
template absl::Status Comm::Alltoallv<float>(std::span<const float>, std::span<const int>, std::span<const int>,
                                             std::span<float>, std::span<const int>, std::span<const int>) const;

absl::Status Comm::AgreeOnStatus(const absl::Status& local) const {
  // The lowest failing rank, or size_ when every rank is OK.
  int first = local.ok() ? size_ : rank_;
  CEMB_RETURN_IF_ERROR(MpiStatus(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, comm_), "MPI_Allreduce"));
  if (first == size_) return absl::OkStatus();

  int failed = local.ok() ? 0 : 1;
  CEMB_RETURN_IF_ERROR(MpiStatus(MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_SUM, comm_), "MPI_Allreduce"));
  int code = static_cast<int>(local.code());
  CEMB_RETURN_IF_ERROR(MpiStatus(MPI_Bcast(&code, 1, MPI_INT, first, comm_), "MPI_Bcast"));
  std::string message(local.message());
  CEMB_RETURN_IF_ERROR(Broadcast(&message, first));
  std::string text = absl::StrCat("rank ", first, ": ", message);
  if (failed > 1) {
    absl::StrAppend(&text, " (", failed - 1, " other rank", failed > 2 ? "s" : "", " failed too)");
  }
  return absl::Status(static_cast<absl::StatusCode>(code), text);
}

void Comm::Abort(int code) const {
  MPI_Abort(comm_, code);
  std::abort();  // MPI_Abort does not return; this keeps [[noreturn]] true if it did
}

absl::StatusOr<World> World::Init(int* argc, char*** argv, ThreadLevel required) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return absl::FailedPreconditionError("World::Init: MPI is initialised already");
  int provided = MPI_THREAD_SINGLE;
  CEMB_RETURN_IF_ERROR(MpiStatus(MPI_Init_thread(argc, argv, ToMpiLevel(required), &provided), "MPI_Init_thread"));
  if (provided < ToMpiLevel(required)) {
    MPI_Finalize();
    return absl::FailedPreconditionError(absl::StrCat("World::Init: MPI provides thread level ", provided,
                                                      " where ", ToMpiLevel(required), " is needed"));
  }
  if (absl::Status s = MpiStatus(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN),
                                 "MPI_Comm_set_errhandler");
      !s.ok()) {
    MPI_Finalize();
    return s;
  }
  return World(FromMpiLevel(provided));
}

World::World(World&& other) noexcept : comm_(other.comm_), provided_(other.provided_) {
  other.owns_ = false;
}

World::~World() {
  if (owns_) MPI_Finalize();
}

}  // namespace cemb::distributed
