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
// parallel_for.
//
// Precision, as the MLPs' (dlrm/mlp.h). kFp32: everything fp32. kBf16: the
// matmuls' inputs are bf16, rounded to nearest, and oneDNN (AMX /
// AVX512-BF16) accumulates in fp32: the kernels (their split-SGD halves,
// dlrm/dense_optimizer.h: bf16 hi read by the matmuls, lo the rest of the
// fp32 master), x_l (rounded in the loop that computes it; x0 in one pass),
// t_l = V_l x_l and the gradient of t_l (written bf16 by their matmuls), and
// the gradient of o_l = W_l x_l + b_l (rounded once, after the bias gradient
// summed it in fp32). Fp32 in both modes: the biases, x0 * o_l + x_l and
// every other elementwise term, the gradient of x_l going down (the
// backward-data matmuls accumulate into it in fp32), every parameter's
// gradient, and the caller's x0, x_L, dy and dx0.
//
// Parameters, in TorchRec's layout and names (LowRankCrossNet; CrossNet
// with rank 0): per layer `W_kernels.<l>` (U_l, [d x r]) and `V_kernels.<l>`
// (V_l, [r x d]), or `kernels.<l>` (W_l, [d x d]); and `bias.<l>` ([d]).
// Initialisation: Xavier-normal kernels, zero bias (the same fp32 values in
// both precisions for a seed).
//
// Buffers: Forward keeps, for Backward, every layer's o_l (fp32) and t_l,
// and every layer's input x_l: fp32 (L x max_batch x d floats; x_L, the
// output, too), or in bf16 a bf16 copy of x_0 .. x_{L-1} and one fp32
// buffer that x_1 .. x_L overwrite in turn. The caller's x0 must stay valid
// and unchanged from Forward to the Backward that follows, as an Mlp's
// input. Backward makes one elementwise pass per layer (the gradient of
// o_l, the bias gradient's column sums, x0's share) before its matmuls,
// and writes the last of them straight into dx0.
//
// Thread safety: one thread at a time; the primitives use this thread's
// OpenMP threads.
//
//   CEMB_ASSIGN_OR_RETURN(CrossNetwork dcn, CrossNetwork::Create({.width = 3456, .layers = 3, .rank = 512,
//                                                                .max_batch = 16384,
//                                                                .precision = Precision::kBf16}));
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
#include "dlrm/mlp.h"  // Precision

namespace cemb::dlrm {

struct CrossNetworkOptions {
  int64_t width = 0;   // d. REQUIRES: > 0
  int layers = 0;      // L. REQUIRES: > 0
  int64_t rank = 0;    // r: low-rank W_l = U_l V_l; 0: full-rank W_l
  int64_t max_batch = 0;               // REQUIRES: > 0; buffers are sized for it
  std::vector<int64_t> batch_sizes;    // further batch sizes to plan, as MlpOptions'
  DenseOptimizerOptions optimizer;     // how Update() trains the parameters
  // kFp32 or kBf16 (kAuto is refused: Dlrm::Create resolves it, as for its MLPs).
  Precision precision = Precision::kFp32;
  uint64_t seed = 1;
};

class CrossNetwork {
 public:
  // Errors: InvalidArgument for bad options (kAuto included), Unimplemented
  // where oneDNN has no matmul for the precision (bf16 without AVX-512),
  // Internal for other oneDNN failures.
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
  // Parameter i of Parameters(), row-major fp32, copied out / in: in bf16
  // the kernels' master values (the split halves recombined), so Get after
  // Set returns exactly what was set. Errors: OutOfRange for i outside
  // [0, num_parameters()), InvalidArgument for a size not the parameter's.
  [[nodiscard]] absl::Status GetParameter(int i, std::span<float> out) const;
  [[nodiscard]] absl::Status SetParameter(int i, std::span<const float> in);
  // Parameter i's gradient from the last Backward (its size is the parameter's).
  std::span<const float> gradient(int i) const;
  // Every gradient of the last Backward in one buffer (zero padding between
  // them), for a data-parallel step to sum across processes before Update.
  std::span<float> gradients();

  // Writes / reads every parameter as "<dir>/<prefix><name>.npy" (names from
  // Parameters(), e.g. "crossnet.W_kernels.0.npy"), as Mlp::SaveNpy /
  // LoadNpy: float32 written (the master values in bf16), float32 or
  // bfloat16 read, every file checked (dtype, shape; errors name it) before
  // any parameter changes. A bias is written [N] and read as [N] or [N, 1]
  // (TorchRec's LowRankCrossNet and CrossNet keep it so).
  [[nodiscard]] absl::Status SaveNpy(const std::string& dir, const std::string& prefix) const;
  [[nodiscard]] absl::Status LoadNpy(const std::string& dir, const std::string& prefix);

 private:
  struct Impl;
  explicit CrossNetwork(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cemb::dlrm

#endif  // CEMB_DLRM_CROSS_NETWORK_H_
