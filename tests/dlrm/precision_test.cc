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
            "slower than fp32 (on AVX512-BF16 the Kaggle step takes 50 ms against 34 ms); auto would choose fp32");
  EXPECT_EQ(c->warning.find('\n'), std::string::npos);  // one line
}

TEST(ResolveMlpPrecision, ExplicitBf16WithoutABf16MatmulIsRefused) {
  absl::StatusOr<MlpPrecisionChoice> c = ResolveMlpPrecision(Precision::kBf16, Avx2());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(c.status().message(),
            "model.mlp_precision=bf16: oneDNN has no bf16 matmul on this CPU (it runs avx2 kernels; bf16 needs "
            "AVX-512 and is faster than fp32 only with AMX): use auto or fp32");
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
