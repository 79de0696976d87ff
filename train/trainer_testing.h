// Test seams of the Trainer, kept out of its public header: what a test
// needs to reach inside a training run and nothing a user configures.
//
//   CEMB_ASSIGN_OR_RETURN(auto trainer, TrainerTesting::Create(config, {}, [](int t, auto io) {
//     return t == 1 ? std::make_unique<FaultInjectingBlockIo>(std::move(io), plan) : std::move(io);
//   }));
#ifndef CEMB_TRAIN_TRAINER_TESTING_H_
#define CEMB_TRAIN_TRAINER_TESTING_H_

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "ssd/block_io.h"
#include "train/config.h"
#include "train/trainer.h"

namespace cemb::train {

class TrainerTesting {
 public:
  // Wraps the I/O backend of ssd table `table` (emb<table>), e.g. in a
  // FaultInjectingBlockIo (ssd/block_io.h), so that an I/O error during
  // training is tested without breaking a disk.
  using WrapSsdIo = std::function<std::unique_ptr<BlockIo>(int table, std::unique_ptr<BlockIo>)>;

  // Trainer::Create, with every ssd table's I/O through wrap_ssd_io.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<Trainer>> Create(const TrainConfig& config,
                                                                      const TrainerOptions& options,
                                                                      WrapSsdIo wrap_ssd_io);
};

}  // namespace cemb::train

#endif  // CEMB_TRAIN_TRAINER_TESTING_H_
