#include "dlrm/precision.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace cemb::dlrm {
namespace {

// The public ISA values are bit masks that contain those of the ISAs below
// them (avx512_core_amx = 0x3e7 contains avx512_core_bf16 = 0xe7), so
// "includes" is a mask test, which also holds for the later ISAs of newer
// oneDNN versions.
bool Includes(dnnl_cpu_isa_t isa, dnnl_cpu_isa_t part) { return (isa & part) == part; }

std::string IsaName(dnnl_cpu_isa_t isa) {
  switch (isa) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: break;
  }
  char hex[16];
  std::snprintf(hex, sizeof(hex), "0x%x", static_cast<unsigned>(isa));
  return absl::StrCat("isa ", hex);
}

// The implementation oneDNN picks for a 64x64 bf16 matmul with fp32 output
// (the MLPs' shapes of operands), or "" when it has none.
std::string Bf16MatmulImplementation() {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  try {
    const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    const dnnl::memory::desc src({64, 64}, dt::bf16, tag::ab);
    const dnnl::memory::desc weights({64, 64}, dt::bf16, tag::any);
    const dnnl::memory::desc dst({64, 64}, dt::f32, tag::ab);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, weights, dst), engine);
    return pd.impl_info_str();
  } catch (const dnnl::error&) {
    return "";
  }
}

}  // namespace

MatmulCpu DetectMatmulCpu() {
  static const MatmulCpu cpu = [] {
    const dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    MatmulCpu c;
    c.isa = IsaName(isa);
    c.amx_bf16 = Includes(isa, dnnl_cpu_isa_avx512_core_amx);
    c.avx512_bf16 = Includes(isa, dnnl_cpu_isa_avx512_core_bf16);
    c.bf16_matmul = Bf16MatmulImplementation();
    return c;
  }();
  return cpu;
}

absl::StatusOr<MlpPrecisionChoice> ResolveMlpPrecision(Precision requested, const MatmulCpu& cpu,
                                                       const AutoPrecisionInputs& in) {
  MlpPrecisionChoice c;
  c.requested = requested;
  const bool bf16_runs = !cpu.bf16_matmul.empty();
  const bool bf16_fast = bf16_runs && cpu.amx_bf16;
  switch (requested) {
    case Precision::kFp32:
      c.precision = Precision::kFp32;
      return c;
    case Precision::kAuto:
      if (in.resumed.has_value()) {
        if (*in.resumed == Precision::kBf16 && !bf16_runs) {
          return absl::FailedPreconditionError(absl::StrCat(
              "model.mlp_precision=auto: the checkpoint this run resumes ran bf16 MLPs, and oneDNN has no bf16 "
              "matmul on this CPU (it runs ", cpu.isa, " kernels; bf16 needs AVX-512)"));
        }
        c.precision = *in.resumed == Precision::kBf16 ? Precision::kBf16 : Precision::kFp32;
        c.reason = "auto: as the checkpoint it resumes";
        return c;
      }
      if (bf16_runs && in.measured.has_value()) {
        const MlpTimings* measured = &*in.measured;
        const bool bf16 = measured->fp32_ms >= kBf16Margin * measured->bf16_ms;
        c.precision = bf16 ? Precision::kBf16 : Precision::kFp32;
        c.reason = bf16 ? absl::StrFormat("auto: bf16 %.1f vs fp32 %.1f ms per MLP step measured", measured->bf16_ms,
                                          measured->fp32_ms)
                        : absl::StrFormat("auto: fp32 %.1f vs bf16 %.1f ms per MLP step measured", measured->fp32_ms,
                                          measured->bf16_ms);
        return c;
      }
      c.precision = bf16_fast ? Precision::kBf16 : Precision::kFp32;
      c.reason = bf16_fast   ? "auto: AMX"
                 : bf16_runs ? absl::StrCat("auto: no AMX, bf16 would be slower on ", cpu.bf16_matmul)
                             : absl::StrCat("auto: no bf16 matmul on ", cpu.isa);
      return c;
    case Precision::kBf16:
      if (!bf16_runs) {
        return absl::FailedPreconditionError(absl::StrCat(
            "model.mlp_precision=bf16: oneDNN has no bf16 matmul on this CPU (it runs ", cpu.isa,
            " kernels; bf16 needs AVX-512): use auto or fp32"));
      }
      c.precision = Precision::kBf16;
      if (!bf16_fast) {
        c.warning = absl::StrCat(
            "model.mlp_precision=bf16 on a CPU without AMX: oneDNN runs the bf16 matmuls on ", cpu.bf16_matmul,
            ", which can be slower than fp32 (on one AVX512-BF16 Xeon the Kaggle step took 50 ms against 34 ms); "
            "auto measures which is faster here");
      }
      return c;
  }
  return absl::InvalidArgumentError("ResolveMlpPrecision: unknown precision");
}

}  // namespace cemb::dlrm
