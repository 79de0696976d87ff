// dlrm-train: trains a DLRM from a YAML config (docs/training.md).
//
//   dlrm-train --config configs/default.yaml
//   dlrm-train --config configs/kaggle.yaml --set data.path=train.txt --set train.batch_size=4096
//   dlrm-train --config configs/default.yaml --set train.checkpoint_dir=ckpt --resume
//   dlrm-train --config configs/fidelity.yaml --set model.init_from=init --export trained
//
// Exit status: 0 on success, 1 on a config, data, checkpoint or training
// error (the message names the key, file or step), 2 on a usage error.
//
// Under mpirun (docs/distributed.md) the ranks train one model:
//   mpirun -np 2 dlrm-train --config configs/default.yaml
// tables sharded over the ranks, MLPs data-parallel, each rank reading its
// slice of every global batch; rank 0 prints. An error on any rank ends
// every rank with exit 1 and that rank's message ("rank 1: ...").
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "distributed/comm.h"
#include "train/config.h"
#include "train/trainer.h"

namespace cemb::train {
namespace {

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "dlrm-train: %s\n", std::string(status.message()).c_str());
  return 1;
}

int Main(int argc, char** argv) {
  CLI::App app{"dlrm-train: train a DLRM (embedding tables in DRAM or on a slow tier behind a cache)"};
  std::string config_path;
  std::vector<std::string> overrides;
  std::string export_dir;
  bool resume = false;
  app.add_option("--config,-c", config_path, "YAML config (see configs/ and docs/training.md)")->required();
  app.add_option("--set,-s", overrides, "override a config key: --set train.batch_size=4096 (repeatable)")
      ->take_all()
      ->type_name("KEY=VALUE");
  app.add_flag("--resume", resume, "continue from the newest checkpoint in train.checkpoint_dir");
  app.add_option("--export", export_dir,
                 "write the trained model into DIR as .npy files under PyTorch's state_dict names "
                 "(emb_l.0.weight.npy, bot_l.0.weight.npy, ...); the same as train.export_dir")
      ->type_name("DIR");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help: 0; a usage error: its message and 2
  }

  // MPI only when mpirun started this process (Open MPI sets
  // OMPI_COMM_WORLD_SIZE): a plain run stays a plain process, with no
  // singleton MPI_Init (which forks Open MPI's runtime daemon).
  std::optional<distributed::World> world;  // outlives everything below: ~World is MPI_Finalize
  if (std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr) {
    absl::StatusOr<distributed::World> init = distributed::World::Init(&argc, &argv);
    if (!init.ok()) return Fail(init.status());
    world.emplace(std::move(*init));
  }
  absl::StatusOr<TrainConfig> config = TrainConfig::Load(config_path, overrides);
  if (!config.ok()) return Fail(config.status());
  if (!export_dir.empty()) config->train.export_dir = export_dir;
  absl::StatusOr<std::unique_ptr<Trainer>> trainer =
      Trainer::Create(*config, {.resume = resume, .comm = world ? &world->comm() : nullptr});
  if (!trainer.ok()) return Fail(trainer.status());
  absl::StatusOr<TrainSummary> summary = (*trainer)->Run();
  if (!summary.ok()) return Fail(summary.status());
  return 0;
}

}  // namespace
}  // namespace cemb::train

int main(int argc, char** argv) {
  try {
    return cemb::train::Main(argc, argv);
  } catch (const std::exception& e) {  // a last line of defence: a message, never a crash
    std::fprintf(stderr, "dlrm-train: internal error: %s\n", e.what());
    return 1;
  }
}
