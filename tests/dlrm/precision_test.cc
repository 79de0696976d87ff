#include "dlrm/precision.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cemb::dlrm {
namespace {

using ::testing::HasSubstr;

// What DetectMatmulCpu reports on the three kinds of CPU (oneDNN 2.6).
MatmulCpu Amx() { return {.isa = "avx512_core_amx", .amx_bf16 = true, .avx512_bf16 = true,
                          .bf16_matmul = "brg:avx512_core_amx"}; }
MatmulCpu Avx512Bf16() { return {.isa = "avx512_core_bf16", .amx_bf16 = false, .avx512_bf16 = true,
                                 .bf16_matmul = "brg:avx512_core_bf16"}; }
MatmulCpu Avx2() { return {.isa = "avx2", .amx_bf16 = false, .avx512_bf16 = false, .bf16_matmul = ""}; }

TEST(ResolveMlpPrecision, AutoChoosesBf16OnlyWithAmx) {
  absl::StatusOr<MlpPrecisionChoice> amx = ResolveMlpPrecision(Precision::kAuto, Amx());
  ASSERT_TRUE(amx.ok()) << amx.status();
  EXPECT_EQ(amx->precision, Precision::kBf16);
  EXPECT_EQ(amx->requested, Precision::kAuto);
  EXPECT_EQ(amx->reason, "auto: AMX");
  EXPECT_EQ(amx->warning, "");

  absl::StatusOr<MlpPrecisionChoice> bf16 = ResolveMlpPrecision(Precision::kAuto, Avx512Bf16());
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  EXPECT_EQ(bf16->precision, Precision::kFp32);
  EXPECT_EQ(bf16->reason, "auto: no AMX, bf16 would be slower on brg:avx512_core_bf16");
  EXPECT_EQ(bf16->warning, "");

  absl::StatusOr<MlpPrecisionChoice> avx2 = ResolveMlpPrecision(Precision::kAuto, Avx2());
  ASSERT_TRUE(avx2.ok()) << avx2.status();
  EXPECT_EQ(avx2->precision, Precision::kFp32);
  EXPECT_EQ(avx2->reason, "auto: no bf16 matmul on avx2");
  EXPECT_EQ(avx2->warning, "");
}

// Measured, auto goes by the times, not the flags: bf16 where fp32 takes at
// least kBf16Margin (1.10) times as long, on AMX and AVX512-BF16 alike; fp32
// within the margin; never bf16 where oneDNN has no bf16 matmul.
TEST(ResolveMlpPrecision, AutoMeasuredTakesBf16OnlyBeyondTheMargin) {
  const MlpTimings zen4{.fp32_ms = 37.2, .bf16_ms = 23.7};
  for (const MatmulCpu& cpu : {Amx(), Avx512Bf16()}) {
    absl::StatusOr<MlpPrecisionChoice> c = ResolveMlpPrecision(Precision::kAuto, cpu, {.measured = zen4});
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(c->precision, Precision::kBf16) << cpu.isa;
    EXPECT_EQ(c->reason, "auto: bf16 23.7 vs fp32 37.2 ms per MLP step measured");
    EXPECT_EQ(c->warning, "");
  }
  const MlpTimings slower_bf16{.fp32_ms = 34.0, .bf16_ms = 50.0};
  absl::StatusOr<MlpPrecisionChoice> amx = ResolveMlpPrecision(Precision::kAuto, Amx(), {.measured = slower_bf16});
  ASSERT_TRUE(amx.ok());
  EXPECT_EQ(amx->precision, Precision::kFp32);  // AMX, but measured slower here
  EXPECT_EQ(amx->reason, "auto: fp32 34.0 vs bf16 50.0 ms per MLP step measured");

  const MlpTimings at_margin{.fp32_ms = 11.0, .bf16_ms = 10.0};
  const MlpTimings within{.fp32_ms = 10.9, .bf16_ms = 10.0};
  EXPECT_EQ(ResolveMlpPrecision(Precision::kAuto, Avx512Bf16(), {.measured = at_margin})->precision, Precision::kBf16);
  EXPECT_EQ(ResolveMlpPrecision(Precision::kAuto, Avx512Bf16(), {.measured = within})->precision, Precision::kFp32);

  absl::StatusOr<MlpPrecisionChoice> avx2 = ResolveMlpPrecision(Precision::kAuto, Avx2(), {.measured = zen4});
  ASSERT_TRUE(avx2.ok());
  EXPECT_EQ(avx2->precision, Precision::kFp32);
  EXPECT_EQ(avx2->reason, "auto: no bf16 matmul on avx2");
}

// Resuming, auto keeps the checkpoint's precision whatever was measured; a
// bf16 checkpoint where oneDNN has no bf16 matmul is refused, never run in fp32.
TEST(ResolveMlpPrecision, AutoResumingKeepsTheCheckpointsPrecision) {
  const MlpTimings bf16_faster{.fp32_ms = 20.0, .bf16_ms = 10.0};
  absl::StatusOr<MlpPrecisionChoice> fp32 =
      ResolveMlpPrecision(Precision::kAuto, Amx(), {.resumed = Precision::kFp32, .measured = bf16_faster});
  ASSERT_TRUE(fp32.ok());
  EXPECT_EQ(fp32->precision, Precision::kFp32);
  EXPECT_EQ(fp32->reason, "auto: as the checkpoint it resumes");
  EXPECT_EQ(ResolveMlpPrecision(Precision::kAuto, Avx512Bf16(), {.resumed = Precision::kBf16})->precision,
            Precision::kBf16);
  absl::StatusOr<MlpPrecisionChoice> refused = ResolveMlpPrecision(Precision::kAuto, Avx2(), {.resumed = Precision::kBf16});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("the checkpoint this run resumes ran bf16 MLPs"));
}

// An explicit precision is obeyed whatever was measured.
TEST(ResolveMlpPrecision, ExplicitPrecisionIgnoresTheTimes) {
  const MlpTimings bf16_slower{.fp32_ms = 10.0, .bf16_ms = 20.0};
  EXPECT_EQ(ResolveMlpPrecision(Precision::kBf16, Amx(), {.measured = bf16_slower})->precision, Precision::kBf16);
  const MlpTimings bf16_faster{.fp32_ms = 20.0, .bf16_ms = 10.0};
  EXPECT_EQ(ResolveMlpPrecision(Precision::kFp32, Amx(), {.measured = bf16_faster})->precision, Precision::kFp32);
}

TEST(ResolveMlpPrecision, Fp32IsFp32EverywhereWithoutAWord) {
  for (const MatmulCpu& cpu : {Amx(), Avx512Bf16(), Avx2()}) {
    absl::StatusOr<MlpPrecisionChoice> c = ResolveMlpPrecision(Precision::kFp32, cpu);
    ASSERT_TRUE(c.ok()) << cpu.isa << ": " << c.status();
    EXPECT_EQ(c->precision, Precision::kFp32) << cpu.isa;
    EXPECT_EQ(c->reason, "") << cpu.isa;
    EXPECT_EQ(c->warning, "") << cpu.isa;
  }
}

TEST(ResolveMlpPrecision, ExplicitBf16WithAmxIsQuiet) {
  absl::StatusOr<MlpPrecisionChoice> c = ResolveMlpPrecision(Precision::kBf16, Amx());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->precision, Precision::kBf16);
  EXPECT_EQ(c->warning, "");
}

TEST(ResolveMlpPrecision, ExplicitBf16WithoutAmxRunsButWarnsWhy) {
  absl::StatusOr<MlpPrecisionChoice> c = ResolveMlpPrecision(Precision::kBf16, Avx512Bf16());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->precision, Precision::kBf16);
  EXPECT_EQ(c->warning,
            "model.mlp_precision=bf16 on a CPU without AMX: oneDNN runs the bf16 matmuls on brg:avx512_core_bf16, "
            "which can be slower than fp32 (on one AVX512-BF16 Xeon the Kaggle step took 50 ms against 34 ms); "
            "auto measures which is faster here");
  EXPECT_EQ(c->warning.find('\n'), std::string::npos);  // one line
}

TEST(ResolveMlpPrecision, ExplicitBf16WithoutABf16MatmulIsRefused) {
  absl::StatusOr<MlpPrecisionChoice> c = ResolveMlpPrecision(Precision::kBf16, Avx2());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(c.status().message(),
            "model.mlp_precision=bf16: oneDNN has no bf16 matmul on this CPU (it runs avx2 kernels; bf16 needs "
            "AVX-512): use auto or fp32");
}

// The detection is whatever this machine is; it must agree with itself and
// with oneDNN's ability to build a bf16 MLP.
TEST(DetectMatmulCpu, AgreesWithWhatTheMlpCanBuild) {
  const MatmulCpu cpu = DetectMatmulCpu();
  EXPECT_FALSE(cpu.isa.empty());
  if (cpu.amx_bf16) {
    EXPECT_TRUE(cpu.avx512_bf16);
  }
  absl::StatusOr<Mlp> mlp = Mlp::Create({.sizes = {16, 32, 1}, .precision = Precision::kBf16, .max_batch = 8});
  EXPECT_EQ(mlp.ok(), !cpu.bf16_matmul.empty()) << cpu.isa << " " << cpu.bf16_matmul << ": " << mlp.status();
  const MatmulCpu again = DetectMatmulCpu();
  EXPECT_EQ(again.isa, cpu.isa);
  EXPECT_EQ(again.bf16_matmul, cpu.bf16_matmul);
}

TEST(Mlp, RefusesAnUnresolvedAutoPrecision) {
  absl::StatusOr<Mlp> mlp = Mlp::Create({.sizes = {4, 1}, .precision = Precision::kAuto, .max_batch = 8});
  ASSERT_FALSE(mlp.ok());
  EXPECT_EQ(mlp.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(mlp.status().message()), HasSubstr("resolve it"));
}

}  // namespace
}  // namespace cemb::dlrm
