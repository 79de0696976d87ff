// A program that fails on one rank the way a real run can, for the ctest
// checks in tests/distributed/CMakeLists.txt (run under mpirun -np 2):
//   failure_probe exit    rank 1 calls std::exit(3) mid-run while rank 0 waits
//                         in a barrier: mpirun must end the job, non-zero
//   failure_probe abort   the same with std::abort()
//   failure_probe agree   rank 1's step fails with a Status; both ranks agree
//                         (Comm::AgreeOnStatus), print the error and exit 1,
//                         as dlrm-train does
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "distributed/comm.h"

int main(int argc, char** argv) {
  absl::StatusOr<cemb::distributed::World> world = cemb::distributed::World::Init(&argc, &argv);
  if (!world.ok()) {
    std::fprintf(stderr, "%s\n", world.status().ToString().c_str());
    return 1;
  }
  const cemb::distributed::Comm& comm = world->comm();
  const std::string_view mode = argc > 1 ? argv[1] : "";
  float step = 1;
  if (!comm.AllreduceSum({&step, 1}).ok()) return 1;  // a first collective: both ranks are running

  if (mode == "exit" || mode == "abort") {
    if (comm.rank() == 1) {
      std::fprintf(stderr, "rank 1: dying by %s\n", mode.data());
      if (mode == "exit") std::exit(3);
      std::abort();
    }
    (void)comm.Barrier();  // never completes: rank 1 is gone
    std::fprintf(stderr, "rank %d: the barrier returned without rank 1\n", comm.rank());
    return 0;
  }
  if (mode == "agree") {
    const absl::Status local = comm.rank() == 1 ? absl::DataLossError("part-1.bin: batch 7: checksum mismatch")
                                                : absl::OkStatus();
    const absl::Status agreed = comm.AgreeOnStatus(local);
    if (!agreed.ok()) {
      std::fprintf(stderr, "failure_probe on rank %d: %s\n", comm.rank(), agreed.ToString().c_str());
      return 1;
    }
    return 0;
  }
  std::fprintf(stderr, "usage: failure_probe exit|abort|agree\n");
  return 2;
}
