// Runs under mpirun with 2 or more ranks (tests/distributed/CMakeLists.txt).
#include "distributed/comm.h"

#include <numeric>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace cemb::distributed {
namespace {

Comm World() { return Comm(MPI_COMM_WORLD); }

TEST(Comm, RunsOnAtLeastTwoRanks) { ASSERT_GE(World().size(), 2) << "run under mpirun -np 2"; }

TEST(Comm, AllreduceSumAddsEveryRanksValuesInPlace) {
  const Comm comm = World();
  std::vector<float> data = {1.0f, float(comm.rank()), 0.5f};
  ASSERT_TRUE(comm.AllreduceSum(data).ok());
  const float ranks = comm.size();
  EXPECT_EQ(data[0], ranks);
  EXPECT_EQ(data[1], ranks * (ranks - 1) / 2);
  EXPECT_EQ(data[2], 0.5f * ranks);
}

TEST(Comm, BroadcastGivesEveryRankTheRootsString) {
  const Comm comm = World();
  const int root = comm.size() - 1;
  std::string text = comm.rank() == root ? std::string(1000, 'x') + " from the last rank" : "other";
  ASSERT_TRUE(comm.Broadcast(&text, root).ok());
  EXPECT_EQ(text, std::string(1000, 'x') + " from the last rank");
}

TEST(Comm, AllgatherGivesEveryRankEveryRanksBytesInRankOrder) {
  const Comm comm = World();
  // Rank r gives r * 700 bytes (rank 0 none), with a zero byte inside.
  std::string mine(static_cast<size_t>(comm.rank()) * 700, static_cast<char>('a' + comm.rank()));
  if (!mine.empty()) mine[mine.size() / 2] = '\0';
  std::vector<std::string> all = {"left over"};
  ASSERT_TRUE(comm.Allgather(mine, &all).ok());
  ASSERT_EQ(all.size(), static_cast<size_t>(comm.size()));
  for (int r = 0; r < comm.size(); ++r) {
    std::string want(static_cast<size_t>(r) * 700, static_cast<char>('a' + r));
    if (!want.empty()) want[want.size() / 2] = '\0';
    EXPECT_EQ(all[r], want) << "rank " << r;
  }
}

TEST(Comm, AlltoallvDeliversEachBlockToItsRank) {
  const Comm comm = World();
  const int n = comm.size(), me = comm.rank();
  // Rank r sends (r + 1) * (q + 1) values r * 100 + q to rank q.
  std::vector<int> send_counts(n), send_displs(n), recv_counts(n), recv_displs(n);
  for (int q = 0, s = 0, r = 0; q < n; ++q) {
    send_counts[q] = (me + 1) * (q + 1);
    send_displs[q] = s;
    s += send_counts[q];
    recv_counts[q] = (q + 1) * (me + 1);
    recv_displs[q] = r;
    r += recv_counts[q];
  }
  std::vector<float> send(send_displs[n - 1] + send_counts[n - 1]), recv(recv_displs[n - 1] + recv_counts[n - 1], -1);
  for (int q = 0; q < n; ++q) {
    for (int i = 0; i < send_counts[q]; ++i) send[send_displs[q] + i] = me * 100 + q;
  }
  ASSERT_TRUE(comm.Alltoallv<float>(send, send_counts, send_displs, recv, recv_counts, recv_displs).ok());
  for (int q = 0; q < n; ++q) {
    for (int i = 0; i < recv_counts[q]; ++i) EXPECT_EQ(recv[recv_displs[q] + i], q * 100 + me) << "from rank " << q;
  }
}

TEST(Comm, AlltoallvRefusesABlockOutsideItsBufferBeforeCommunicating) {
  const Comm comm = World();
  std::vector<int> counts(comm.size(), 1), displs(comm.size(), 0);
  displs.back() = 5;  // past a buffer of 2
  std::vector<int32_t> send(2), recv(comm.size());
  std::vector<int> recv_displs(comm.size());
  std::iota(recv_displs.begin(), recv_displs.end(), 0);
  const absl::Status s = comm.Alltoallv<int32_t>(send, counts, displs, recv, counts, recv_displs);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("send block of rank"), std::string::npos) << s;
}

TEST(Comm, AgreeOnStatusIsOkWhenEveryRankIsOk) {
  EXPECT_TRUE(World().AgreeOnStatus(absl::OkStatus()).ok());
}

TEST(Comm, AgreeOnStatusGivesEveryRankTheFailingRanksCodeAndMessage) {
  const Comm comm = World();
  const int failing = comm.size() - 1;
  const absl::Status local =
      comm.rank() == failing ? absl::DataLossError("part-1.bin: checksum mismatch") : absl::OkStatus();
  const absl::Status agreed = comm.AgreeOnStatus(local);
  EXPECT_EQ(agreed.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(agreed.message(), "rank " + std::to_string(failing) + ": part-1.bin: checksum mismatch");
}

TEST(Comm, AgreeOnStatusNamesTheLowestFailingRankAndCountsTheOthers) {
  const Comm comm = World();
  const absl::Status agreed =
      comm.AgreeOnStatus(absl::ResourceExhaustedError("disk full on rank " + std::to_string(comm.rank())));
  EXPECT_EQ(agreed.code(), absl::StatusCode::kResourceExhausted);
  const std::string others = comm.size() == 2 ? "1 other rank" : std::to_string(comm.size() - 1) + " other ranks";
  EXPECT_EQ(agreed.message(), "rank 0: disk full on rank 0 (" + others + " failed too)");
}

TEST(Comm, BarrierReturnsOk) { EXPECT_TRUE(World().Barrier().ok()); }

}  // namespace
}  // namespace cemb::distributed
