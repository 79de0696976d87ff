// Mlp: a stack of fully-connected layers on oneDNN primitives, with forward,
// backward (data, weights, bias) and SGD, in fp32 or bf16.
//
// Layer l (0 <= l < num_layers()) maps width sizes[l] to sizes[l+1]:
//   y = act_l(x W_l^T + b_l),  W_l: [sizes[l+1], sizes[l]] (PyTorch nn.Linear
//   layout, row-major), b_l: [sizes[l+1]],
// act_l = ReLU for every layer but the last, whose activation is
// `Options::last_activation` (none, ReLU or sigmoid). With the fused
// sigmoid + cross-entropy of dlrm/loss.h, the top MLP's last activation is
// kNone (the MLP produces logits).
//
// Precision. kFp32: everything fp32. kBf16: the matmuls' inputs (weights,
// activations between layers, each layer's pre-activation gradient) are
// bf16, rounded to nearest; oneDNN (AMX / AVX512-BF16) accumulates in fp32.
// The weights train by split-SGD (dlrm/dense_optimizer.h): the bf16 weight and the low
// 16 bits of the fp32 master weight recombine into it exactly. Biases, weight
// and bias gradients, the gradients between layers (written fp32 by the
// backward-data matmul, rounded once for the next matmuls after the bias
// gradient summed them), the external input, output and their gradients are
// fp32 in both modes (the first layer converts its input to bf16 with a
// oneDNN reorder; the last layer writes fp32).
//
// Plan once, execute many: every primitive (matmuls for forward, backward data
// and backward weights, ReLU/sigmoid backward,
// conversions) is created by Create() for each planned batch size (the bias
// gradient is a hand-written column sum), with all
// buffers (activations, gradients, one shared scratchpad) sized for the largest.
// Forward/Backward/Update create nothing and allocate nothing themselves
// (oneDNN 2.6 builds a small argument map inside each primitive execution, a
// few heap nodes per primitive, the same every step).
//
// Batch sizes: Forward accepts exactly the batch sizes listed in
// Options::batch_sizes (the full batch, plus e.g. the size of the last partial
// batch of an epoch, or an evaluation batch). Any other size is an
// InvalidArgument error; pad such a batch to a planned size instead (zero rows
// with a zero output gradient change nothing).
//
// Buffer ownership. The MLP owns its output and all intermediate buffers. The
// caller owns the input, which must stay valid and unchanged from Forward
// until the Backward that follows (backward weights reads it), and the
// gradient buffers it passes to Backward.
//
// Thread safety: none; one MLP is used by one thread at a time (oneDNN itself
// runs each primitive on its OpenMP threads).
//
//   MlpOptions opt{.sizes = {13, 512, 256, 64, 16}, .max_batch = 2048};
//   CEMB_ASSIGN_OR_RETURN(Mlp mlp, Mlp::Create(opt));
//   CEMB_ASSIGN_OR_RETURN(std::span<const float> y, mlp.Forward(2048, x));
//   CEMB_RETURN_IF_ERROR(mlp.Backward(2048, dy, /*diff_input=*/nullptr));
//   mlp.Update(0.1f);
#ifndef CEMB_DLRM_MLP_H_
#define CEMB_DLRM_MLP_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/enum_names.h"
#include "dlrm/dense_optimizer.h"

namespace cemb::dlrm {

// kAuto is not a precision an MLP runs in: Dlrm::Create resolves it to kFp32
// or kBf16 for this CPU (dlrm/precision.h); Mlp::Create refuses it.
enum class Precision { kFp32, kBf16, kAuto };
inline constexpr EnumName<Precision> kPrecisionNames[] = {
    {Precision::kFp32, "fp32"}, {Precision::kBf16, "bf16"}, {Precision::kAuto, "auto"}};
inline const char* PrecisionName(Precision precision) { return NameOf(kPrecisionNames, precision); }
enum class Activation { kNone, kRelu, kSigmoid };

struct MlpOptions {
  // Layer widths: sizes[0] is the input width, sizes.back() the output width.
  // REQUIRES: at least 2 entries, all > 0.
  std::vector<int64_t> sizes;
  Activation last_activation = Activation::kNone;
  Precision precision = Precision::kFp32;
  // The largest batch; buffers are sized for it. REQUIRES: > 0.
  int64_t max_batch = 0;
  // Further batch sizes to plan (each in [1, max_batch]); max_batch is always
  // planned. Each costs one set of primitives (JIT code), no buffers.
  std::vector<int64_t> batch_sizes;
  // Whether Backward computes the gradient of the input (the top MLP needs it
  // for the interaction; the bottom MLP, fed by dense features, does not).
  bool compute_input_grad = false;
  // How Update() trains the weights and biases.
  DenseOptimizerOptions optimizer;
  // Seed of the initialisation (as dlrm_s_pytorch: W ~ N(0, 2/(in+out)),
  // b ~ N(0, 1/out)).
  uint64_t seed = 1;
};

class Mlp {
 public:
  // Plans every primitive and allocates every buffer. Errors: InvalidArgument
  // for bad options (kAuto included), Unimplemented when oneDNN has no
  // implementation (bf16 on a CPU without AVX-512: ResolveMlpPrecision says so
  // first), Internal for other oneDNN failures.
  [[nodiscard]] static absl::StatusOr<Mlp> Create(const MlpOptions& options);

  Mlp(Mlp&&) noexcept;
  Mlp& operator=(Mlp&&) noexcept;
  ~Mlp();

  const MlpOptions& options() const;
  int num_layers() const;
  int64_t input_width() const;
  int64_t output_width() const;

  // Computes the output of `batch` rows of `input` (fp32, row-major
  // [batch x input_width()], contiguous). Returns the output, fp32
  // [batch x output_width()], owned by the MLP and valid until the next
  // Forward. Errors: InvalidArgument if `batch` was not planned.
  [[nodiscard]] absl::StatusOr<std::span<const float>> Forward(int64_t batch,
                                                               const float* input);
  // As Forward, and calls between_layers() after each layer but the last
  // (e.g. to let an exchange posted before move on: EmbeddingStep::Progress);
  // its error ends the pass and is returned.
  [[nodiscard]] absl::StatusOr<std::span<const float>> Forward(int64_t batch, const float* input,
                                                               absl::FunctionRef<absl::Status()> between_layers);

  // Back-propagates `diff_output` (fp32 [batch x output_width()], the gradient
  // of the loss w.r.t. the output returned by Forward) through the last
  // Forward: computes every weight and bias gradient (weight_grad, bias_grad)
  // and, with Options::compute_input_grad, writes the input gradient to
  // `diff_input` (fp32 [batch x input_width()]; otherwise pass nullptr).
  // Gradients are overwritten, not accumulated. `diff_output` is not modified.
  // REQUIRES: `batch` equals the batch of the last Forward; its input is still
  // valid.
  [[nodiscard]] absl::Status Backward(int64_t batch, const float* diff_output,
                                      float* diff_input);
  // As Backward, with between_layers() as in Forward.
  [[nodiscard]] absl::Status Backward(int64_t batch, const float* diff_output, float* diff_input,
                                      absl::FunctionRef<absl::Status()> between_layers);

  // The optimizer's step with the gradients of the last Backward (SGD:
  // W -= lr * dW, b -= lr * db; Adagrad: dlrm/dense_optimizer.h), on the
  // split weights in bf16 mode.
  void Update(float lr);
  // The optimizer, whose Adagrad accumulators a checkpoint keeps (SaveNpy /
  // LoadNpy with Parameters()).
  DenseOptimizer& optimizer();

  // Parameters, by layer, as nn.Sequential(Linear, ReLU, Linear, ...) names
  // them: layer l's Linear is module 2*l, so its tensors are "<2l>.weight"
  // [out, in] and "<2l>.bias" [out] (prefixed with "bot_l." / "top_l.",
  // dlrm_s_pytorch's keys); fp32 in PyTorch layout. In bf16 mode the weight
  // is the recombined fp32 master value, so Get after Set returns exactly
  // what was set.
  std::vector<ParameterInfo> Parameters() const;
  [[nodiscard]] absl::Status GetWeight(int layer, std::span<float> out) const;
  [[nodiscard]] absl::Status SetWeight(int layer, std::span<const float> in);
  [[nodiscard]] absl::Status GetBias(int layer, std::span<float> out) const;
  [[nodiscard]] absl::Status SetBias(int layer, std::span<const float> in);

  // Gradients of the last Backward, fp32: [out, in] and [out].
  // REQUIRES: 0 <= layer < num_layers().
  std::span<const float> weight_grad(int layer) const;
  std::span<const float> bias_grad(int layer) const;
  // Every weight and bias gradient of the last Backward in one buffer (with
  // zero padding between them), for a data-parallel step to sum across
  // processes in place before Update (train/sharded_step.h).
  std::span<float> gradients();

  // Writes / reads every parameter as "<dir>/<prefix><name>.npy" (names from
  // Parameters(); e.g. prefix "bot_l." gives "bot_l.0.weight.npy"). Save
  // writes float32; Load reads float32 or bfloat16 (base/npy.h), checks dtype
  // and shape of every file before it sets a parameter, and names the file in
  // its errors.
  [[nodiscard]] absl::Status SaveNpy(const std::string& dir, const std::string& prefix) const;
  [[nodiscard]] absl::Status LoadNpy(const std::string& dir, const std::string& prefix);

  // The oneDNN implementation chosen for each layer's forward matmul, e.g.
  // "brg:avx512_core_amx_bf16" (for logs and benchmarks).
  std::vector<std::string> ImplementationNames() const;

 private:
  struct Impl;
  explicit Mlp(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cemb::dlrm

#endif  // CEMB_DLRM_MLP_H_
