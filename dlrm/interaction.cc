#include "dlrm/interaction.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/parallel.h"
#include "base/status_macros.h"
#include "dlrm/internal/aligned_buffer.h"
#include "dlrm/internal/interaction_rows.h"
#include "embedding/cpu.h"

namespace cemb::dlrm {
namespace {

// Whether `sparse` is columns [D, D + sparse.cols) of `out` (same rows and
// ld): the concatenation's in-place layout, where the lookup wrote the
// embedding outputs (or the gradient is read) in place and nothing moves.
bool InPlace(ConstMatrixView sparse, ConstMatrixView out, int64_t D) {
  return sparse.data == out.data + D && sparse.ld == out.ld;
}

using RowsFn = void (*)(const internal::DotRowsArgs&, int64_t, int64_t, float*);

// Batches below this run on the calling thread only.
constexpr int64_t kMinRowsPerThread = 32;

// Whether `v` is a view of `batch` rows and `width` columns (a MatrixView
// converts); the error names the view.
absl::Status CheckView(const char* name, ConstMatrixView v, int64_t batch, int64_t width) {
  if (v.rows != batch) {
    return absl::InvalidArgumentError(absl::StrCat("Interaction: ", name, " has ", v.rows, " rows, want ", batch));
  }
  if (batch == 0) return absl::OkStatus();  // nothing is read or written: {} will do
  if (v.cols != width) {
    return absl::InvalidArgumentError(
        absl::StrCat("Interaction: ", name, " has ", v.cols, " columns, want ", width));
  }
  if (v.data == nullptr) return absl::InvalidArgumentError(absl::StrCat("Interaction: ", name, " is null"));
  if (v.ld < width) {
    return absl::InvalidArgumentError(absl::StrCat("Interaction: ", name, " has ld ", v.ld, " < its width ", width));
  }
  return absl::OkStatus();
}

}  // namespace

struct Interaction::Impl {
  // The inputs of the dot kernels, shared by both directions.
  internal::DotRowsArgs DotInputs(ConstMatrixView dense, ConstMatrixView sparse) const {
    internal::DotRowsArgs a;
    a.features = features;
    a.dim = options.dim;
    a.self = options.self_interaction;
    a.dense = dense.data;
    a.dense_ld = dense.ld;
    a.sparse = sparse.data;
    a.sparse_ld = sparse.ld;
    return a;
  }
  InteractionOptions options;
  int64_t features = 0;
  int64_t width = 0;
  int threads = 1;
  Isa isa = Isa::kGeneric;  // resolved
  RowsFn forward = nullptr;
  RowsFn backward = nullptr;
  int64_t scratch_floats = 0;  // per thread
  internal::AlignedBuffer scratch;

  // Runs fn(begin, end, scratch) over [0, batch) split across the threads.
  template <typename Fn>
  void ParallelRows(int64_t batch, Fn fn) {
    const int n = static_cast<int>(std::clamp<int64_t>(batch / kMinRowsPerThread, 1, threads));
    float* base = scratch.as<float>();
    if (n == 1) {
      fn(0, batch, base);
      return;
    }
    parallel_for(n, n, [&](int64_t i) {
      const int64_t begin = batch * i / n, end = batch * (i + 1) / n;
      fn(begin, end, base + i * scratch_floats);  // scratch per item: one item per thread
    });
  }
};

absl::StatusOr<Interaction> Interaction::Create(const InteractionOptions& options) {
  if (options.num_sparse < 0) {
    return absl::InvalidArgumentError(absl::StrCat("Interaction: num_sparse is ", options.num_sparse));
  }
  if (options.dim <= 0) return absl::InvalidArgumentError(absl::StrCat("Interaction: dim is ", options.dim));
  if (options.threads < 0) {
    return absl::InvalidArgumentError(absl::StrCat("Interaction: threads is ", options.threads));
  }
  if (options.self_interaction && options.kind != InteractionKind::kDot) {
    return absl::InvalidArgumentError("Interaction: self_interaction needs the dot interaction");
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  const int64_t F = options.num_sparse + 1, D = options.dim;
  impl->features = F;
  impl->width = options.kind != InteractionKind::kDot
                    ? F * D
                    : D + (options.self_interaction ? F * (F + 1) / 2 : F * (F - 1) / 2);
  impl->threads = options.threads > 0 ? options.threads : DefaultThreads();
  CEMB_ASSIGN_OR_RETURN(impl->isa, ResolveIsa(options.isa));
  switch (impl->isa) {
#if defined(CEMB_HAVE_AVX512_KERNELS)
    case Isa::kAvx512:
      impl->forward = internal::DotForwardRowsAvx512;
      impl->backward = internal::DotBackwardRowsAvx512;
      break;
#endif
#if defined(CEMB_HAVE_AVX2_KERNELS)
    case Isa::kAvx2:
      impl->forward = internal::DotForwardRowsAvx2;
      impl->backward = internal::DotBackwardRowsAvx2;
      break;
#endif
    default:  // ResolveIsa returns only what this build has
      impl->forward = internal::DotForwardRowsGeneric;
      impl->backward = internal::DotBackwardRowsGeneric;
  }
  if (options.kind == InteractionKind::kDot) {
    impl->scratch_floats = (internal::DotScratchFloats(F, D) + 15) / 16 * 16;
    try {
      impl->scratch = internal::AlignedBuffer(static_cast<size_t>(impl->scratch_floats * impl->threads) * 4);
    } catch (const std::bad_alloc&) {
      return absl::ResourceExhaustedError("Interaction: out of memory for scratch");
    }
  }
  return Interaction(std::move(impl));
}

Interaction::Interaction(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Interaction::Interaction(Interaction&&) noexcept = default;
Interaction& Interaction::operator=(Interaction&&) noexcept = default;
Interaction::~Interaction() = default;

const InteractionOptions& Interaction::options() const { return impl_->options; }
int64_t Interaction::num_features() const { return impl_->features; }
int64_t Interaction::output_width() const { return impl_->width; }
Isa Interaction::isa() const { return impl_->isa; }

absl::Status Interaction::Forward(ConstMatrixView dense, ConstMatrixView sparse, MatrixView out) {
  Impl& m = *impl_;
  const int64_t D = m.options.dim, T = m.options.num_sparse, batch = dense.rows;
  if (batch < 0) return absl::InvalidArgumentError(absl::StrCat("Interaction: dense has ", batch, " rows"));
  CEMB_RETURN_IF_ERROR(CheckView("dense", dense, batch, D));
  if (T > 0) CEMB_RETURN_IF_ERROR(CheckView("sparse", sparse, batch, T * D));
  CEMB_RETURN_IF_ERROR(CheckView("out", out, batch, m.width));
  if (m.options.kind != InteractionKind::kDot) {  // the concatenation
    const bool sparse_in_place = InPlace(sparse, out, D);
    m.ParallelRows(batch, [&](int64_t begin, int64_t end, float*) {
      for (int64_t b = begin; b < end; ++b) {
        std::memcpy(out.data + b * out.ld, dense.data + b * dense.ld, static_cast<size_t>(D) * 4);
        if (T > 0 && !sparse_in_place) {
          std::memcpy(out.data + b * out.ld + D, sparse.data + b * sparse.ld, static_cast<size_t>(T * D) * 4);
        }
      }
    });
    return absl::OkStatus();
  }
  internal::DotRowsArgs a = m.DotInputs(dense, sparse);
  a.out = out.data;
  a.out_ld = out.ld;
  m.ParallelRows(batch, [&](int64_t begin, int64_t end, float* scratch) { m.forward(a, begin, end, scratch); });
  return absl::OkStatus();
}

absl::Status Interaction::Backward(ConstMatrixView dense, ConstMatrixView sparse, ConstMatrixView d_out,
                                   MatrixView d_dense, MatrixView d_sparse) {
  Impl& m = *impl_;
  const int64_t D = m.options.dim, T = m.options.num_sparse, batch = d_out.rows;
  if (batch < 0) return absl::InvalidArgumentError(absl::StrCat("Interaction: d_out has ", batch, " rows"));
  const bool dot = m.options.kind == InteractionKind::kDot;
  if (dot) {
    CEMB_RETURN_IF_ERROR(CheckView("dense", dense, batch, D));
    if (T > 0) CEMB_RETURN_IF_ERROR(CheckView("sparse", sparse, batch, T * D));
  }
  CEMB_RETURN_IF_ERROR(CheckView("d_out", d_out, batch, m.width));
  CEMB_RETURN_IF_ERROR(CheckView("d_dense", d_dense, batch, D));
  if (T > 0) CEMB_RETURN_IF_ERROR(CheckView("d_sparse", d_sparse, batch, T * D));
  if (!dot) {
    const bool sparse_in_place = InPlace(d_sparse, d_out, D);
    m.ParallelRows(batch, [&](int64_t begin, int64_t end, float*) {
      for (int64_t b = begin; b < end; ++b) {
        std::memcpy(d_dense.data + b * d_dense.ld, d_out.data + b * d_out.ld, static_cast<size_t>(D) * 4);
        if (T > 0 && !sparse_in_place) {
          std::memcpy(d_sparse.data + b * d_sparse.ld, d_out.data + b * d_out.ld + D,
                      static_cast<size_t>(T * D) * 4);
        }
      }
    });
    return absl::OkStatus();
  }
  internal::DotRowsArgs a = m.DotInputs(dense, sparse);
  a.d_out = d_out.data;
  a.d_out_ld = d_out.ld;
  a.d_dense = d_dense.data;
  a.d_dense_ld = d_dense.ld;
  a.d_sparse = d_sparse.data;
  a.d_sparse_ld = d_sparse.ld;
  m.ParallelRows(batch, [&](int64_t begin, int64_t end, float* scratch) { m.backward(a, begin, end, scratch); });
  return absl::OkStatus();
}

}  // namespace cemb::dlrm
