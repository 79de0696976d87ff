// Interaction: the DLRM feature interaction between the bottom MLP's output
// and the T embedding outputs (the F = T + 1 "features", each of width D).
//
// kDot (dlrm_s_pytorch's "dot"): for each sample, with X the F x D matrix whose
// row 0 is the dense feature and rows 1..T the embeddings,
//   Z = X X^T,
//   out = [ X[0, :],  Z[i, j] for i in [0, F), j in [0, i) ]      (width D + F(F-1)/2)
// or with self_interaction j in [0, i] (width D + F(F+1)/2); the pairs are in
// PyTorch's order (i major, j minor), so a PyTorch-trained top MLP fits.
// kConcat: out = [ X[0, :], X[1, :], ..., X[T, :] ]                (width F*D)
// kDcn: as kConcat; its output is the input x0 of DLRM-DCNv2's cross network
// (dlrm/cross_network.h), which Dlrm runs between it and the top MLP.
// In place: where sparse is out's columns [D, F*D) (and d_sparse d_out's),
// kConcat and kDcn copy only the dense part; Dlrm's lookup writes there.
//
// Inputs and outputs are strided views of row-major fp32 matrices (the
// MatrixView / ConstMatrixView of embedding/types.h, the type the embedding
// lookup writes and the update reads), so that the lookup can write its T
// outputs straight into one [batch x T*D] matrix (or into columns [D, F*D) of
// one [batch x F*D] matrix m that also holds the bottom output in columns
// [0, D): pass dense = m.slice(0, D) and sparse = m.slice(D, T*D)), and the
// gradients can go straight to the bottom MLP and to the embedding update.
//
// Backward writes (never accumulates) d_dense [batch x D] and d_sparse
// [batch x T*D]:
//   S = G + G^T  (G: the F x F matrix of the pair gradients of d_out),
//   dX = S X;  d_dense = d_out[:, 0:D] + dX[0, :],  d_sparse = dX[1.., :].
//
// Cost: F(F-1)/2 * D multiply-adds per sample forward, F^2 * D backward; the
// kernels are hand-written (vectorised over the pairs forward and over D
// backward; an AVX-512 build is chosen at run time), and split the batch
// across OpenMP threads. Forward/Backward allocate nothing (per-thread scratch
// is sized at Create).
//
// Thread safety: one Interaction is used by one thread at a time.
//
//   CEMB_ASSIGN_OR_RETURN(Interaction dot, Interaction::Create({.kind = InteractionKind::kDot,
//                                                              .num_sparse = 26, .dim = 16}));
//   // dot.output_width() == 16 + 27 * 26 / 2 == 367
//   CEMB_RETURN_IF_ERROR(dot.Forward({bottom, n, 16, 16}, {emb, n, 416, 416}, {top_in, n, 367, 367}));
//   CEMB_RETURN_IF_ERROR(dot.Backward({bottom, n, 16, 16}, {emb, n, 416, 416}, {d_top_in, n, 367, 367},
//                                     {d_bottom, n, 16, 16}, {d_emb, n, 416, 416}));
#ifndef CEMB_DLRM_INTERACTION_H_
#define CEMB_DLRM_INTERACTION_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/enum_names.h"
#include "embedding/types.h"

namespace cemb::dlrm {

enum class InteractionKind { kDot, kConcat, kDcn };
inline constexpr EnumName<InteractionKind> kInteractionKindNames[] = {
    {InteractionKind::kDot, "dot"}, {InteractionKind::kConcat, "concat"}, {InteractionKind::kDcn, "dcn"}};
inline const char* InteractionKindName(InteractionKind kind) { return NameOf(kInteractionKindNames, kind); }

struct InteractionOptions {
  InteractionKind kind = InteractionKind::kDot;
  int64_t num_sparse = 0;  // T, the number of embedding outputs; >= 0
  int64_t dim = 0;         // D, the width of every feature; > 0
  bool self_interaction = false;  // kDot only: include Z[i, i]
  // Which kernel build runs (embedding/types.h's one list of ISAs): kAuto
  // resolves as the embedding kernels do (embedding/cpu.h: CEMB_ISA if set,
  // else the widest the CPU has); forced in tests and benchmarks.
  Isa isa = Isa::kAuto;
  int threads = 0;  // OpenMP threads; 0: omp_get_max_threads() at Create
};

class Interaction {
 public:
  // Errors: InvalidArgument for bad options (a bad CEMB_ISA included);
  // FailedPrecondition for an ISA this CPU (or build) does not run.
  [[nodiscard]] static absl::StatusOr<Interaction> Create(const InteractionOptions& options);

  Interaction(Interaction&&) noexcept;
  Interaction& operator=(Interaction&&) noexcept;
  ~Interaction();

  const InteractionOptions& options() const;
  int64_t num_features() const;  // F = T + 1
  int64_t output_width() const;
  Isa isa() const;  // the build that runs: kGeneric, kAvx2 or kAvx512

  // out [batch x output_width()] from dense [batch x D] and sparse
  // [batch x T*D], batch = dense.rows.
  // Errors: InvalidArgument for a view whose rows differ from dense.rows or
  // whose cols differ from its width, a null view (batch > 0), or an ld
  // smaller than cols; the message names the view.
  [[nodiscard]] absl::Status Forward(ConstMatrixView dense, ConstMatrixView sparse, MatrixView out);

  // Gradients of dense and sparse from d_out [batch x output_width()], given
  // the inputs of the Forward (they are read again; kConcat and kDcn ignore them and
  // accepts empty views). Same errors as Forward.
  [[nodiscard]] absl::Status Backward(ConstMatrixView dense, ConstMatrixView sparse, ConstMatrixView d_out,
                                      MatrixView d_dense, MatrixView d_sparse);

 private:
  struct Impl;
  explicit Interaction(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cemb::dlrm

#endif  // CEMB_DLRM_INTERACTION_H_
