// CrossNetwork: the interaction of DLRM-DCNv2 (Wang et al., "DCN V2",
// 2021; MLPerf Training's recommendation model, TorchRec's LowRankCrossNet).
// Its input x0 [n x d] is the bottom MLP's output beside every table's
// pooled row; each of its L layers is
//
//   x_{l+1} = x0 * (W_l x_l + b_l) + x_l          (* elementwise)
//
// with W_l = U_l V_l of rank r (U_l [d x r], V_l [r x d]) or, with rank 0,
// one full W_l [d x d]. Its output x_L [n x d] feeds the over-arch MLP.
// The matmuls run on oneDNN, planned once per batch size (as the MLPs);
// the elementwise parts and the bias gradient in plain loops over
// parallel_for. fp32 for now.
//
// Parameters, in TorchRec's layout and names (LowRankCrossNet; CrossNet
// with rank 0): per layer `W_kernels.<l>` (U_l, [d x r]) and `V_kernels.<l>`
// (V_l, [r x d]), or `kernels.<l>` (W_l, [d x d]); and `bias.<l>` ([d]).
// Initialisation: Xavier-normal kernels, zero bias.
//
// Buffers: Forward keeps every layer's input and W_l x_l + b_l (and V_l x_l)
// for Backward: (2L + 1) x max_batch x d floats and L x max_batch x r. The
// caller's x0 must stay valid and unchanged from Forward to the Backward
// that follows, as an Mlp's input.
//
// Thread safety: one thread at a time; the primitives use this thread's
// OpenMP threads (or `threads`).
//
//   CEMB_ASSIGN_OR_RETURN(CrossNetwork dcn, CrossNetwork::Create({.width = 3456, .layers = 3, .rank = 512,
//                                                                .max_batch = 16384}));
//   CEMB_ASSIGN_OR_RETURN(std::span<const float> y, dcn.Forward(n, x0));
//   CEMB_RETURN_IF_ERROR(dcn.Backward(n, dy, dx0));  // the parameters' gradients too
//   dcn.Update(lr);
#ifndef CEMB_DLRM_CROSS_NETWORK_H_
#define CEMB_DLRM_CROSS_NETWORK_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "dlrm/dense_optimizer.h"

namespace cemb::dlrm {

struct CrossNetworkOptions {
  int64_t width = 0;   // d. REQUIRES: > 0
  int layers = 0;      // L. REQUIRES: > 0
  int64_t rank = 0;    // r: low-rank W_l = U_l V_l; 0: full-rank W_l
  int64_t max_batch = 0;               // REQUIRES: > 0; buffers are sized for it
  std::vector<int64_t> batch_sizes;    // further batch sizes to plan, as MlpOptions'
  DenseOptimizerOptions optimizer;     // how Update() trains the parameters
  uint64_t seed = 1;
};

class CrossNetwork {
 public:
  // Errors: InvalidArgument for bad options, Internal for oneDNN failures.
  [[nodiscard]] static absl::StatusOr<CrossNetwork> Create(const CrossNetworkOptions& options);
  CrossNetwork(CrossNetwork&&) noexcept;
  CrossNetwork& operator=(CrossNetwork&&) noexcept;
  ~CrossNetwork();

  const CrossNetworkOptions& options() const;

  // x_L of `batch` rows of x0 (fp32 [batch x width], contiguous), owned by
  // the network until the next Forward. Errors: InvalidArgument for a batch
  // not planned.
  [[nodiscard]] absl::StatusOr<std::span<const float>> Forward(int64_t batch, const float* x0);
  // From the gradient of x_L, dy [batch x width]: every parameter's gradient
  // (overwritten) and the gradient of x0, written to dx0 [batch x width];
  // dx0 may be dy (dy is read first, once).
  // REQUIRES: after a Forward of `batch`, its x0 unchanged.
  [[nodiscard]] absl::Status Backward(int64_t batch, const float* dy, float* dx0);
  // The optimizer's step on every parameter (SGD: p -= lr * grad).
  void Update(float lr);
  // The optimizer, whose Adagrad accumulators a checkpoint keeps.
  DenseOptimizer& optimizer();

  // Per layer: W_kernels.<l> and V_kernels.<l> (or kernels.<l>), bias.<l>.
  std::vector<ParameterInfo> Parameters() const;
  int num_parameters() const;
  // Parameter i of Parameters(), row-major, and its gradient from the last Backward.
  std::span<float> parameter(int i);
  std::span<const float> gradient(int i) const;
  // Every gradient of the last Backward in one buffer (zero padding between
  // them), for a data-parallel step to sum across processes before Update.
  std::span<float> gradients();

  // Writes / reads every parameter as "<dir>/<prefix><name>.npy" (names from
  // Parameters(), e.g. "crossnet.W_kernels.0.npy"), as Mlp::SaveNpy /
  // LoadNpy: float32 written, float32 or bfloat16 read, every file checked
  // (dtype, shape; errors name it) before any parameter changes.
  [[nodiscard]] absl::Status SaveNpy(const std::string& dir, const std::string& prefix);
  [[nodiscard]] absl::Status LoadNpy(const std::string& dir, const std::string& prefix);

 private:
  struct Impl;
  explicit CrossNetwork(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cemb::dlrm

#endif  // CEMB_DLRM_CROSS_NETWORK_H_
