#include "dlrm/cross_network.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/npy.h"
#include "base/parallel.h"
#include "base/random.h"
#include "base/status_macros.h"
#include "dlrm/internal/aligned_buffer.h"
#include "dlrm/internal/batch_plans.h"
#include "dlrm/internal/dnnl_call.h"
#include "dlrm/dense_optimizer.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace cemb::dlrm {
namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;
using dims = dnnl::memory::dims;
using internal::AlignedBuffer;
using internal::Call;

// Elements of the elementwise loops per parallel_for item.
constexpr int64_t kChunk = 1 << 14;
// Backward's fused pass sums the bias gradient's columns per block of rows,
// at most this many blocks (their partial sums in `db_partial`), then the
// blocks: the same order whatever the number of threads.
constexpr int64_t kMaxSumBlocks = 256;

size_t SizeOf(dt t) { return t == dt::bf16 ? 2 : 4; }
dnnl::memory::desc Plain(int64_t rows, int64_t cols, dt type = dt::f32) { return {dims{rows, cols}, type, tag::ab}; }
// The transpose view of a row-major [cols x rows] matrix, as [rows x cols].
dnnl::memory::desc Transposed(int64_t rows, int64_t cols, dt type = dt::f32) {
  return {dims{rows, cols}, type, tag::ba};
}

}  // namespace

struct CrossNetwork::Impl {
  CrossNetworkOptions options;
  int64_t d = 0, r = 0;  // r = 0: full rank
  int L = 0;
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  AlignedBuffer scratchpad;

  // Per layer: the kernel applied first (V_l [r x d], or the full W_l
  // [d x d]), the second (U_l [d x r]; low rank only), the bias, and their
  // gradients (views of `grads`). The kernels are fp32, or in bf16 their
  // split halves: v, u the bf16 hi halves the matmuls read, v_lo, u_lo the
  // low halves.
  struct Layer {
    AlignedBuffer v, u, b;
    AlignedBuffer v_lo, u_lo;
    std::span<float> dv, du, db;
  };
  // Parameter i of Parameters(): its value (fp32, or the hi halves where
  // `lo` is set) and its gradient.
  struct Param {
    AlignedBuffer* value = nullptr;
    AlignedBuffer* lo = nullptr;
    std::span<float> grad;
  };
  std::vector<Layer> layers;
  // Every gradient, one after the other at 64-byte boundaries (zero
  // padding between them): what a data-parallel step sums across processes.
  AlignedBuffer grads;
  DenseOptimizer optimizer;  // over Parameters()
  // Forward's: x[l] the input of layer l, fp32 (x[0] is the caller's x0,
  // not kept; in bf16 only x[1] exists and x_{l+1} overwrites x_l in it),
  // xb[l] x_l in bf16 for the matmuls (bf16 only), o[l] = W_l x_l + b_l
  // (fp32), t[l] = V_l x_l (low rank; bf16 in bf16). Backward's: g, the
  // gradient of x_l, going down (fp32); go = the gradient of o (fp32, and
  // go_b its bf16 copy for the matmuls in bf16); gt of t (bf16 in bf16);
  // dx0 accumulates x0's.
  std::vector<AlignedBuffer> x, xb, o, t;
  AlignedBuffer g, go, go_b, gt;
  AlignedBuffer db_partial;  // [kMaxSumBlocks x d] doubles

  struct LayerPlan {
    Call v_x;    // t = x V^T                 (low rank)   | o = x W^T + b (full rank)
    Call u_t;    // o = t U^T + b             (low rank)
    Call du;     // dU = go^T t               (low rank)   | dW = go^T x   (full rank)
    Call gt_go;  // gt = go U                 (low rank)
    Call dv;     // dV = gt^T x               (low rank)
    Call gx;     // g += gt V (low rank)  | g += go W (full rank); g holds dy_l on entry
                 // (layer 0: into the caller's dx0, which holds the rest of x0's gradient)
    dnnl::memory x_in;    // fp32: rebound to the caller's x0 for layer 0
    dnnl::memory gx_dst;  // layer 0: rebound to the caller's dx0
  };
  struct BatchPlan {  // one batch size's (BatchPlans)
    std::vector<LayerPlan> layers;
  };
  internal::BatchPlans<BatchPlan> plans;
  const BatchPlan* last = nullptr;  // the last Forward's plan, of batch last_batch
  int64_t last_batch = -1;
  const float* last_x0 = nullptr;

  bool bf16() const { return options.precision == Precision::kBf16; }
  // The type of the matmuls' inputs.
  dt mt() const { return bf16() ? dt::bf16 : dt::f32; }
  // The fp32 buffer that holds x_l, l >= 1.
  float* XOut(int l) const { return x[bf16() ? 1 : l].as<float>(); }
  Param Nth(int i);
  void Get(int i, std::span<float> out);
  void Set(int i, std::span<const float> in);
  absl::StatusOr<BatchPlan> Plan(int64_t n, size_t* scratch);
};

// Per layer: U (or the full W, kept in `v`), V (low rank), bias.
CrossNetwork::Impl::Param CrossNetwork::Impl::Nth(int i) {
  const int per_layer = r > 0 ? 3 : 2;
  Layer& layer = layers[static_cast<size_t>(i / per_layer)];
  const int k = i % per_layer;
  if (k == per_layer - 1) return {&layer.b, nullptr, layer.db};
  if (r > 0 && k == 0) return {&layer.u, bf16() ? &layer.u_lo : nullptr, layer.du};
  return {&layer.v, bf16() ? &layer.v_lo : nullptr, layer.dv};
}

void CrossNetwork::Impl::Get(int i, std::span<float> out) {
  const Param p = Nth(i);
  if (p.lo == nullptr) {
    std::memcpy(out.data(), p.value->data(), out.size() * sizeof(float));
    return;
  }
  const uint16_t* hi = p.value->as<uint16_t>();
  const uint16_t* lo = p.lo->as<uint16_t>();
  for (size_t k = 0; k < out.size(); ++k) out[k] = CombineSplit(hi[k], lo[k]);
}

void CrossNetwork::Impl::Set(int i, std::span<const float> in) {
  const Param p = Nth(i);
  if (p.lo == nullptr) {
    std::memcpy(p.value->data(), in.data(), in.size() * sizeof(float));
    return;
  }
  uint16_t* hi = p.value->as<uint16_t>();
  uint16_t* lo = p.lo->as<uint16_t>();
  for (size_t k = 0; k < in.size(); ++k) SplitFloat(in[k], hi[k], lo[k]);
}

absl::StatusOr<CrossNetwork::Impl::BatchPlan> CrossNetwork::Impl::Plan(int64_t n, size_t* scratch) {
  BatchPlan plan;
  dnnl::primitive_attr attr = internal::ScratchpadAttr();
  dnnl::primitive_attr sum_attr = internal::ScratchpadAttr();
  {
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    sum_attr.set_post_ops(ops);
  }
  const auto matmul = [&](const dnnl::memory& a, const dnnl::memory& b, const dnnl::memory* bias,
                          const dnnl::memory& c, const dnnl::primitive_attr& at) {
    const dnnl::matmul::desc desc = bias != nullptr
                                        ? dnnl::matmul::desc(a.get_desc(), b.get_desc(), bias->get_desc(), c.get_desc())
                                        : dnnl::matmul::desc(a.get_desc(), b.get_desc(), c.get_desc());
    dnnl::matmul::primitive_desc pd(desc, at, engine);
    *scratch = std::max(*scratch, pd.scratchpad_desc().get_size());
    return bias != nullptr ? Call(dnnl::matmul(pd), {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b},
                                                     {DNNL_ARG_BIAS, *bias}, {DNNL_ARG_DST, c}})
                           : Call(dnnl::matmul(pd), {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
  };
  // The weight-gradient matmuls read go and gt through transposed views,
  // in bf16 too: AMX brgemm runs them about 1.3x slower than with a plain
  // source at MLPerf's shape, but transposing them first with oneDNN's
  // reorder (jit:uni), as the MLP does, costs about as much as it saves
  // (bench/history/dcnv2.md), and far more on a loaded machine.
  const dt mt = this->mt();
  try {
    for (int l = 0; l < L; ++l) {
      Layer& layer = layers[l];
      LayerPlan lp;
      lp.x_in = dnnl::memory(Plain(n, d, mt), engine,
                             bf16() ? xb[l].data() : l == 0 ? DNNL_MEMORY_NONE : x[l].data());
      dnnl::memory o(Plain(n, d), engine, this->o[l].data());
      dnnl::memory go(Plain(n, d, mt), engine, bf16() ? go_b.data() : this->go.data());
      dnnl::memory go_t(Transposed(d, n, mt), engine, go.get_data_handle());
      dnnl::memory g(Plain(n, d), engine, l == 0 ? DNNL_MEMORY_NONE : this->g.data());
      if (l == 0) lp.gx_dst = g;
      dnnl::memory b(Plain(1, d), engine, layer.b.data());
      if (r > 0) {
        dnnl::memory v_t(Transposed(d, r, mt), engine, layer.v.data());  // V^T
        dnnl::memory v(Plain(r, d, mt), engine, layer.v.data());
        dnnl::memory u_t(Transposed(r, d, mt), engine, layer.u.data());  // U^T
        dnnl::memory u(Plain(d, r, mt), engine, layer.u.data());
        dnnl::memory t(Plain(n, r, mt), engine, this->t[l].data());
        dnnl::memory gt(Plain(n, r, mt), engine, this->gt.data());
        dnnl::memory gt_t(Transposed(r, n, mt), engine, this->gt.data());
        dnnl::memory dv(Plain(r, d), engine, layer.dv.data());
        dnnl::memory du(Plain(d, r), engine, layer.du.data());
        lp.v_x = matmul(lp.x_in, v_t, nullptr, t, attr);
        lp.u_t = matmul(t, u_t, &b, o, attr);
        lp.du = matmul(go_t, t, nullptr, du, attr);
        lp.gt_go = matmul(go, u, nullptr, gt, attr);
        lp.dv = matmul(gt_t, lp.x_in, nullptr, dv, attr);
        lp.gx = matmul(gt, v, nullptr, g, sum_attr);
      } else {
        dnnl::memory w_t(Transposed(d, d, mt), engine, layer.v.data());
        dnnl::memory w(Plain(d, d, mt), engine, layer.v.data());
        dnnl::memory dw(Plain(d, d), engine, layer.dv.data());
        lp.v_x = matmul(lp.x_in, w_t, &b, o, attr);
        lp.du = matmul(go_t, lp.x_in, nullptr, dw, attr);
        lp.gx = matmul(go, w, nullptr, g, sum_attr);
      }
      plan.layers.push_back(std::move(lp));
    }
  } catch (const dnnl::error& e) {
    return internal::FromDnnlError(e, absl::StrCat("CrossNetwork: planning batch ", n));
  }
  return plan;
}

absl::StatusOr<CrossNetwork> CrossNetwork::Create(const CrossNetworkOptions& options) {
  if (options.precision != Precision::kFp32 && options.precision != Precision::kBf16) {
    return absl::InvalidArgumentError(
        "CrossNetwork precision auto: resolve it to fp32 or bf16 first (ResolveMlpPrecision, dlrm/precision.h)");
  }
  if (options.width <= 0 || options.layers <= 0 || options.rank < 0 || options.max_batch <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("CrossNetwork: width ", options.width, ", layers ", options.layers,
                                                   ", rank ", options.rank, ", max_batch ", options.max_batch,
                                                   ": each must be > 0 (rank >= 0)"));
  }
  for (int64_t b : options.batch_sizes) {
    if (b <= 0 || b > options.max_batch) {
      return absl::InvalidArgumentError(
          absl::StrCat("CrossNetwork: batch size ", b, " not in [1, max_batch ", options.max_batch, "]"));
    }
  }
  auto m = std::make_unique<Impl>();
  m->options = options;
  m->d = options.width;
  m->r = options.rank;
  m->L = options.layers;
  const int64_t d = m->d, r = m->r, n = options.max_batch;
  const auto floats = [](int64_t count) { return AlignedBuffer(static_cast<size_t>(count) * sizeof(float)); };
  const bool bf16 = m->bf16();
  // Buffers of the matmuls' inputs: bf16 or fp32.
  const auto inputs = [&](int64_t count) { return AlignedBuffer(static_cast<size_t>(count) * SizeOf(m->mt())); };
  m->layers.resize(static_cast<size_t>(m->L));
  const int64_t first = r > 0 ? r * d : d * d;  // V_l's (or W_l's) elements
  // The gradients, in Parameters()' order: per layer U (low rank), V (or
  // W), bias, each padded to 16 floats.
  const auto padded = [](int64_t count) { return (count + 15) / 16 * 16; };
  const int64_t per_layer = padded(first) + (r > 0 ? padded(d * r) : 0) + padded(d);
  m->grads = floats(per_layer * m->L);
  float* next_grad = m->grads.as<float>();
  const auto take = [&](int64_t count) {
    std::span<float> g(next_grad, static_cast<size_t>(count));
    next_grad += padded(count);
    return g;
  };
  for (int l = 0; l < m->L; ++l) {
    Impl::Layer& layer = m->layers[l];
    if (r > 0) {
      layer.du = take(d * r);
      layer.u = inputs(d * r);
      if (bf16) layer.u_lo = inputs(d * r);
    }
    layer.v = inputs(first);
    if (bf16) layer.v_lo = inputs(first);
    layer.dv = take(first);
    layer.b = floats(d);
    layer.db = take(d);
  }
  const int num_params = m->L * (r > 0 ? 3 : 2);
  std::vector<int64_t> param_sizes;  // Parameters()' sizes
  for (int i = 0; i < num_params; ++i) param_sizes.push_back(static_cast<int64_t>(m->Nth(i).grad.size()));
  // Xavier-normal (std = sqrt(2 / (fan_in + fan_out))), zero bias, as
  // TorchRec's LowRankCrossNet; drawn in fp32 and split in bf16.
  for (int l = 0; l < m->L; ++l) {
    const int per_layer = r > 0 ? 3 : 2;
    std::vector<float> w(static_cast<size_t>(first));
    FillNormal(w, std::sqrt(2.0 / static_cast<double>(r > 0 ? r + d : 2 * d)), SplitMix64::Mix(options.seed, 2 * l));
    m->Set(l * per_layer + per_layer - 2, w);
    if (r > 0) {
      w.resize(static_cast<size_t>(d * r));
      FillNormal(w, std::sqrt(2.0 / static_cast<double>(r + d)), SplitMix64::Mix(options.seed, 2 * l + 1));
      m->Set(l * per_layer, w);
    }
  }
  m->x.resize(static_cast<size_t>(m->L + 1));
  m->o.resize(static_cast<size_t>(m->L));
  m->t.resize(static_cast<size_t>(m->L));
  for (int l = 1; l <= (bf16 ? 1 : m->L); ++l) m->x[l] = floats(n * d);
  if (bf16) {
    m->xb.resize(static_cast<size_t>(m->L));
    for (int l = 0; l < m->L; ++l) m->xb[l] = inputs(n * d);
  }
  for (int l = 0; l < m->L; ++l) {
    m->o[l] = floats(n * d);
    if (r > 0) m->t[l] = inputs(n * r);
  }
  m->optimizer = DenseOptimizer(options.optimizer, param_sizes);
  m->g = floats(n * d);
  m->go = floats(n * d);
  if (r > 0) m->gt = inputs(n * r);
  if (bf16) m->go_b = inputs(n * d);
  m->db_partial = AlignedBuffer(static_cast<size_t>(kMaxSumBlocks * d) * sizeof(double));

  size_t scratch = 0;
  CEMB_RETURN_IF_ERROR(m->plans.Make(options.batch_sizes, n, [&](int64_t b) { return m->Plan(b, &scratch); }));
  m->scratchpad = AlignedBuffer(std::max<size_t>(scratch, 64));
  dnnl::memory pad({dims{static_cast<int64_t>(m->scratchpad.size())}, dt::u8, tag::a}, m->engine,
                   m->scratchpad.data());
  for (Impl::BatchPlan& p : m->plans.plans()) {
    for (Impl::LayerPlan& lp : p.layers) {
      for (Call* c : {&lp.v_x, &lp.u_t, &lp.du, &lp.gt_go, &lp.dv, &lp.gx}) {
        if (!c->empty()) c->BindScratchpad(pad);
      }
    }
  }
  return CrossNetwork(std::move(m));
}

CrossNetwork::CrossNetwork(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CrossNetwork::CrossNetwork(CrossNetwork&&) noexcept = default;
CrossNetwork& CrossNetwork::operator=(CrossNetwork&&) noexcept = default;
CrossNetwork::~CrossNetwork() = default;

const CrossNetworkOptions& CrossNetwork::options() const { return impl_->options; }

absl::StatusOr<std::span<const float>> CrossNetwork::Forward(int64_t batch, const float* x0) {
  Impl& m = *impl_;
  CEMB_ASSIGN_OR_RETURN(const Impl::BatchPlan* plan,
                        m.plans.Get(batch, "CrossNetwork Forward (CrossNetworkOptions::batch_sizes)"));
  if (x0 == nullptr) return absl::InvalidArgumentError("CrossNetwork Forward: null input");
  m.last = nullptr;
  const int64_t d = m.d, n = batch * d;
  if (m.bf16()) {
    uint16_t* x0b = m.xb[0].as<uint16_t>();
    parallel_for_ranges(n, kChunk, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) x0b[i] = FloatToBf16(x0[i]);
    });
  }
  for (int l = 0; l < m.L; ++l) {
    const Impl::LayerPlan& lp = plan->layers[l];
    dnnl_status_t st = dnnl_success;
    if (l == 0 && !m.bf16()) st = dnnl_memory_set_data_handle_v2(lp.x_in.get(), const_cast<float*>(x0), nullptr);
    if (st == dnnl_success) st = lp.v_x.Execute(m.stream);
    if (st == dnnl_success && !lp.u_t.empty()) st = lp.u_t.Execute(m.stream);
    CEMB_RETURN_IF_ERROR(internal::DnnlStatus(st, "CrossNetwork Forward"));
    // x_{l+1} = x0 * o_l + x_l, and in bf16 its copy for the next layer's matmuls.
    const float* xl = l == 0 ? x0 : m.XOut(l);
    const float* o = m.o[l].as<float>();
    float* next = m.XOut(l + 1);
    uint16_t* next_b = m.bf16() && l + 1 < m.L ? m.xb[l + 1].as<uint16_t>() : nullptr;
    parallel_for_ranges(n, kChunk, [&](int64_t begin, int64_t end) {
      if (next_b == nullptr) {
        for (int64_t i = begin; i < end; ++i) next[i] = x0[i] * o[i] + xl[i];
        return;
      }
      for (int64_t i = begin; i < end; ++i) {
        const float v = x0[i] * o[i] + xl[i];
        next[i] = v;
        next_b[i] = FloatToBf16(v);
      }
    });
  }
  m.last = plan;
  m.last_batch = batch;
  m.last_x0 = x0;
  return std::span<const float>(m.XOut(m.L), static_cast<size_t>(n));
}

namespace {

// One layer's elementwise backward over rows [r0, r1) of x_{l+1} = x0 * o + x_l,
// from gin = the gradient of x_{l+1} (the caller's dy for the top layer, else g):
//   go = gin * x0 (and its bf16 copy), part[c] += go's column sums,
//   dx0 = (kTop ? 0 : dx0) + gin * o (+ gin at layer 0: x_0's residual share),
//   g = gin (the top layer above layer 0: the gx matmul adds the rest to it).
// Each element reads gin before it writes dx0, which may be dy.
template <bool kTop, bool kBottom, bool kBf16>
void BackwardRows(int64_t r0, int64_t r1, int64_t d, const float* gin, const float* x0, const float* o, float* go,
                  uint16_t* go_b, float* g, float* dx0, double* part) {
  for (int64_t c = 0; c < d; ++c) part[c] = 0;
  for (int64_t i = r0; i < r1; ++i) {
    const int64_t row = i * d;
#pragma omp simd
    for (int64_t c = 0; c < d; ++c) {
      const int64_t k = row + c;
      const float v = gin[k], w = v * x0[k];
      go[k] = w;
      if constexpr (kBf16) go_b[k] = FloatToBf16(w);
      part[c] += w;
      float acc = v * o[k];
      if constexpr (!kTop) acc += dx0[k];
      if constexpr (kBottom) acc += v;
      if constexpr (kTop && !kBottom) g[k] = v;
      dx0[k] = acc;
    }
  }
}

}  // namespace

absl::Status CrossNetwork::Backward(int64_t batch, const float* dy, float* dx0) {
  Impl& m = *impl_;
  if (m.last == nullptr || m.last_batch != batch) {
    return absl::FailedPreconditionError(absl::StrCat("CrossNetwork Backward: batch ", batch,
                                                      " does not follow a Forward of that batch"));
  }
  if (dy == nullptr || dx0 == nullptr) return absl::InvalidArgumentError("CrossNetwork Backward: null gradient");
  const int64_t d = m.d;
  const float* x0 = m.last_x0;
  float* g = m.g.as<float>();
  float* go = m.go.as<float>();
  uint16_t* go_b = m.bf16() ? m.go_b.as<uint16_t>() : nullptr;  // go rounded for the matmuls
  double* partial = m.db_partial.as<double>();
  const int64_t blocks = std::min(batch, kMaxSumBlocks), rows_per_block = (batch + blocks - 1) / blocks;
  for (int l = m.L - 1; l >= 0; --l) {
    const Impl::LayerPlan& lp = m.last->layers[l];
    Impl::Layer& layer = m.layers[l];
    // One pass: go, its column sums (db, in fp32 before any rounding, then
    // in double), dx0's share, and g for the matmuls (BackwardRows).
    const float* gin = l == m.L - 1 ? dy : g;
    const float* o = m.o[l].as<float>();
    const bool top = l == m.L - 1, bottom = l == 0;
    using Rows = void (*)(int64_t, int64_t, int64_t, const float*, const float*, const float*, float*, uint16_t*,
                          float*, float*, double*);
    static constexpr Rows kRows[2][2][2] = {
        {{BackwardRows<false, false, false>, BackwardRows<false, false, true>},
         {BackwardRows<false, true, false>, BackwardRows<false, true, true>}},
        {{BackwardRows<true, false, false>, BackwardRows<true, false, true>},
         {BackwardRows<true, true, false>, BackwardRows<true, true, true>}}};
    const Rows rows = kRows[top][bottom][go_b != nullptr];
    parallel_for(blocks, 0, [&](int64_t b) {
      const int64_t r0 = b * rows_per_block, r1 = std::min(batch, r0 + rows_per_block);
      if (r0 < r1) rows(r0, r1, d, gin, x0, o, go, go_b, g, dx0, partial + b * d);
    });
    float* db = layer.db.data();
    parallel_for_ranges(d, 256, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        double sum = 0;
        for (int64_t b = 0; b < blocks; ++b) sum += partial[b * d + c];
        db[c] = static_cast<float>(sum);
      }
    });
    dnnl_status_t st = dnnl_success;
    if (bottom && !m.bf16()) st = dnnl_memory_set_data_handle_v2(lp.x_in.get(), const_cast<float*>(x0), nullptr);
    if (bottom && st == dnnl_success) st = dnnl_memory_set_data_handle_v2(lp.gx_dst.get(), dx0, nullptr);
    for (const Call* c : {&lp.du, &lp.gt_go, &lp.dv, &lp.gx}) {
      if (st != dnnl_success) break;
      if (!c->empty()) st = c->Execute(m.stream);
    }
    CEMB_RETURN_IF_ERROR(internal::DnnlStatus(st, "CrossNetwork Backward"));
  }
  return absl::OkStatus();
}

std::vector<ParameterInfo> CrossNetwork::Parameters() const {
  const Impl& m = *impl_;
  std::vector<ParameterInfo> out;
  for (int l = 0; l < m.L; ++l) {
    if (m.r > 0) {
      out.push_back({absl::StrCat("W_kernels.", l), {m.d, m.r}});
      out.push_back({absl::StrCat("V_kernels.", l), {m.r, m.d}});
    } else {
      out.push_back({absl::StrCat("kernels.", l), {m.d, m.d}});
    }
    out.push_back({absl::StrCat("bias.", l), {m.d}});
  }
  return out;
}


int CrossNetwork::num_parameters() const { return impl_->L * (impl_->r > 0 ? 3 : 2); }

namespace {
absl::Status CheckParameter(int i, int count, size_t got, size_t want) {
  if (i < 0 || i >= count) {
    return absl::OutOfRangeError(absl::StrCat("CrossNetwork parameter ", i, " is outside [0, ", count, ")"));
  }
  if (got != want) {
    return absl::InvalidArgumentError(
        absl::StrCat("CrossNetwork parameter ", i, ": ", got, " values where ", want, " are needed"));
  }
  return absl::OkStatus();
}
}  // namespace

absl::Status CrossNetwork::GetParameter(int i, std::span<float> out) const {
  const int count = num_parameters();
  CEMB_RETURN_IF_ERROR(CheckParameter(i, count, out.size(), i >= 0 && i < count ? gradient(i).size() : 0));
  impl_->Get(i, out);
  return absl::OkStatus();
}

absl::Status CrossNetwork::SetParameter(int i, std::span<const float> in) {
  const int count = num_parameters();
  CEMB_RETURN_IF_ERROR(CheckParameter(i, count, in.size(), i >= 0 && i < count ? gradient(i).size() : 0));
  impl_->Set(i, in);
  return absl::OkStatus();
}

std::span<const float> CrossNetwork::gradient(int i) const { return impl_->Nth(i).grad; }

std::span<float> CrossNetwork::gradients() { return {impl_->grads.as<float>(), impl_->grads.size() / sizeof(float)}; }

void CrossNetwork::Update(float lr) {
  for (int i = 0; i < num_parameters(); ++i) {
    const Impl::Param p = impl_->Nth(i);
    const size_t size = p.grad.size();
    if (p.lo == nullptr) {
      impl_->optimizer.Update(i, std::span(p.value->as<float>(), size), p.grad, lr);
    } else {
      impl_->optimizer.Update(i, std::span(p.value->as<uint16_t>(), size), std::span(p.lo->as<uint16_t>(), size),
                              p.grad, lr);
    }
  }
}

DenseOptimizer& CrossNetwork::optimizer() { return impl_->optimizer; }

absl::Status CrossNetwork::SaveNpy(const std::string& dir, const std::string& prefix) const {
  const std::vector<ParameterInfo> params = Parameters();
  std::vector<float> values;
  for (int i = 0; i < num_parameters(); ++i) {
    values.resize(gradient(i).size());
    impl_->Get(i, values);
    CEMB_RETURN_IF_ERROR(
        WriteNpy<float>(absl::StrCat(dir, "/", prefix, params[i].name, ".npy"), values, params[i].shape));
  }
  return absl::OkStatus();
}

absl::Status CrossNetwork::LoadNpy(const std::string& dir, const std::string& prefix) {
  // Every file read and checked before any parameter changes.
  const std::vector<ParameterInfo> params = Parameters();
  std::vector<std::vector<float>> values(params.size());
  for (int i = 0; i < num_parameters(); ++i) {
    const std::string path = absl::StrCat(dir, "/", prefix, params[i].name, ".npy");
    std::vector<int64_t> shape = params[i].shape;
    if (params[i].name.starts_with("bias.")) {
      // TorchRec's full-rank CrossNet keeps each bias as [N, 1] (its
      // LowRankCrossNet as [N], our shape): both are the same N values.
      CEMB_ASSIGN_OR_RETURN(NpyReader r, NpyReader::Open(path));
      if (r.shape() == std::vector<int64_t>{shape[0], 1}) shape.push_back(1);
    }
    CEMB_RETURN_IF_ERROR(ReadNpyFloats(path, shape, values[i]));
  }
  for (int i = 0; i < num_parameters(); ++i) impl_->Set(i, values[i]);
  return absl::OkStatus();
}

}  // namespace cemb::dlrm
