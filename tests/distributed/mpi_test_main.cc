// main() of the tests that run under mpirun: every rank runs every test;
// rank 0 prints gtest's usual output, the other ranks print only their
// failures ("[rank 1] file:line: message"), and the process exits non-zero
// on every rank when a test failed on any rank, so mpirun (and ctest) fail.
// A test must reach the same collectives on every rank: check results with
// EXPECT_*, and ASSERT_* only what is the same on every rank.
#include <cstdio>

#include "distributed/comm.h"
#include "gtest/gtest.h"

namespace {

class RankFailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_, result.file_name() ? result.file_name() : "?",
                 result.line_number(), result.message());
  }
  void OnTestEnd(const testing::TestInfo& info) override {
    if (info.result()->Failed()) {
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
    }
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  absl::StatusOr<cemb::distributed::World> world = cemb::distributed::World::Init(&argc, &argv);
  if (!world.ok()) {
    std::fprintf(stderr, "%s\n", world.status().ToString().c_str());
    return 1;
  }
  testing::InitGoogleTest(&argc, argv);
  const cemb::distributed::Comm& comm = world->comm();
  if (comm.rank() != 0) {
    testing::TestEventListeners& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(comm.rank()));
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, comm.raw());
  if (failed && comm.rank() == 0) std::fprintf(stderr, "a test failed on at least one of %d ranks\n", comm.size());
  return failed;
}
