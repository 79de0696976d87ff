// The MLPs' precision on this CPU: what `model.mlp_precision: auto` becomes,
// and what an explicit `bf16` costs here.
//
// oneDNN runs the bf16 matmuls, so oneDNN is asked what it will use
// (DetectMatmulCpu): its effective ISA, which honours ONEDNN_MAX_CPU_ISA and
// the OS's AMX permission (oneDNN requests it itself), and the
// implementation it picks for a small bf16 matmul. Seen with oneDNN 2.6:
//   AMX                 brg:avx512_core_amx    bf16 faster than fp32
//   AVX512-BF16, no AMX brg:avx512_core_bf16   bf16 slower than fp32 on one
//                                              Xeon, faster on a Zen 4 EPYC
//                                              (bench/history/training-step.md)
//   AVX2 only (EPYC)    none                   no bf16 matmul at all
// What is fast depends on the microarchitecture, not only on those flags, so
// kAuto measures where oneDNN has a bf16 matmul: the caller times one step
// of the model's own MLPs in each precision (Dlrm::TimeMlpPrecisions) and
// passes the timings.
// ResolveMlpPrecision turns a request and those facts into a precision:
//   kFp32  fp32.
//   kAuto  resuming: the checkpoint's precision. No bf16 matmul: fp32.
//          Measured: bf16 where fp32 takes at least
//          kBf16Margin times as long, else fp32. Not measured: bf16 with
//          AMX, else fp32. `reason` says which and why ("auto: bf16 23.7 vs
//          fp32 37.2 ms per MLP step measured").
//   kBf16  bf16 with AMX; bf16 plus a one-line `warning` where oneDNN runs
//          it without AMX (it may be slower than fp32); FailedPrecondition where oneDNN
//          has no bf16 matmul (it is never silently run in fp32: a bf16
//          checkpoint must not resume as fp32).
// Dlrm::Create resolves once; the trainer prints the result on its model line
// and stores the resolved precision in the checkpoint's fingerprint.
//
// Thread safety: DetectMatmulCpu may be called from any thread (it asks
// oneDNN once per process); ResolveMlpPrecision is a pure function.
// NOTE: measurements differ between runs; the trainer measures once per
// machine and model shape and keeps the answer in its work directory, rank 0
// for every rank, and a resumed run keeps its checkpoint's precision
// (train/trainer.cc).
//
//   CEMB_ASSIGN_OR_RETURN(MlpTimings measured, Dlrm::TimeMlpPrecisions(model_options));
//   CEMB_ASSIGN_OR_RETURN(MlpPrecisionChoice c,
//                         ResolveMlpPrecision(Precision::kAuto, DetectMatmulCpu(), {.measured = measured}));
//   std::printf("%s MLPs (%s)\n", PrecisionName(c.precision), c.reason.c_str());
//   if (!c.warning.empty()) std::printf("warning: %s\n", c.warning.c_str());
#ifndef CEMB_DLRM_PRECISION_H_
#define CEMB_DLRM_PRECISION_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "dlrm/mlp.h"

namespace cemb::dlrm {

// What oneDNN can run the MLPs' matmuls on, on this CPU.
struct MatmulCpu {
  // oneDNN's name for the ISA of its kernels here, e.g. "avx2",
  // "avx512_core_bf16", "avx512_core_amx".
  std::string isa;
  bool amx_bf16 = false;     // AMX tiles with bf16, usable (isa includes avx512_core_amx)
  bool avx512_bf16 = false;  // AVX512-BF16 instructions (isa includes avx512_core_bf16)
  // oneDNN's implementation of a bf16 matmul, e.g. "brg:avx512_core_amx";
  // empty: oneDNN has none on this CPU.
  std::string bf16_matmul;
};

// Asks oneDNN (once per process; later calls return the same value).
MatmulCpu DetectMatmulCpu();

struct MlpPrecisionChoice {
  Precision requested = Precision::kAuto;
  Precision precision = Precision::kFp32;  // kFp32 or kBf16, never kAuto
  // For kAuto: why, in a few words for the model line ("auto: AMX").
  std::string reason;
  // An explicit kBf16 that runs slower than fp32 would here: one line with
  // the reason (no "warning:" prefix). Empty otherwise.
  std::string warning;
};

// One training step of the model's MLPs (bottom and top: forward, backward,
// update; with dcn the cross network too) at its batch, in each precision,
// in milliseconds.
struct MlpTimings {
  double fp32_ms = 0;
  double bf16_ms = 0;
};

// kAuto takes bf16 only where fp32 takes at least this many times as long:
// bf16 rounds the activations and gradients, so it must pay clearly, beyond
// the run-to-run noise of a shared machine (5-7% between rounds of the same
// run on the development VMs).
inline constexpr double kBf16Margin = 1.10;

// What kAuto goes by besides the CPU. A run that resumes a checkpoint keeps
// the precision the checkpoint ran in (a second measurement could choose the
// other, and a checkpoint's precision never changes on resume); a fresh run
// goes by the measurement, and without one by the ISA.
struct AutoPrecisionInputs {
  std::optional<Precision> resumed;    // the checkpoint's: kFp32 or kBf16
  std::optional<MlpTimings> measured;  // Dlrm::TimeMlpPrecisions
};

// See the top of this file; `in` is used by kAuto only. Errors:
// FailedPrecondition for bf16 (kBf16, or kAuto resuming a bf16 checkpoint)
// where oneDNN has no bf16 matmul (the message names model.mlp_precision and
// the ISA).
[[nodiscard]] absl::StatusOr<MlpPrecisionChoice> ResolveMlpPrecision(Precision requested, const MatmulCpu& cpu,
                                                                     const AutoPrecisionInputs& in = {});

}  // namespace cemb::dlrm

#endif  // CEMB_DLRM_PRECISION_H_
