#include "dlrm/mlp.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/npy.h"
#include "base/parallel.h"
#include "base/random.h"
#include "base/status_macros.h"
#include "dlrm/internal/aligned_buffer.h"
#include "dlrm/internal/batch_plans.h"
#include "dlrm/internal/bias_grad.h"
#include "dlrm/internal/dnnl_call.h"
#include "dlrm/dense_optimizer.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace cemb::dlrm {
namespace {

using internal::AlignedBuffer;
using internal::Call;
using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;
using dims = dnnl::memory::dims;

size_t SizeOf(dt t) { return t == dt::bf16 ? 2 : 4; }

dnnl::memory::desc Plain(int64_t rows, int64_t cols, dt type) {
  return dnnl::memory::desc(dims{rows, cols}, type, tag::ab);
}
// The transpose view of a row-major [cols x rows] matrix, as [rows x cols].
dnnl::memory::desc Transposed(int64_t rows, int64_t cols, dt type) {
  return dnnl::memory::desc(dims{rows, cols}, type, tag::ba);
}

dnnl::algorithm ForwardAlg(Activation a) {
  return a == Activation::kRelu ? dnnl::algorithm::eltwise_relu : dnnl::algorithm::eltwise_logistic;
}
dnnl::algorithm BackwardAlg(Activation a) {
  return a == Activation::kRelu ? dnnl::algorithm::eltwise_relu_use_dst_for_bwd
                                : dnnl::algorithm::eltwise_logistic_use_dst_for_bwd;
}

}  // namespace

struct Mlp::Impl {
  // A copy of W in the layout a matmul prefers (blocked; chosen for the
  // largest batch), refreshed from Layer::w by `to` before the first Forward /
  // Backward after the weights change. A plain layout is used directly:
  // `mem` is then the view of Layer::w and `to` is empty.
  struct WeightCopy {
    AlignedBuffer buf;
    dnnl::memory mem;
    Call to;
  };
  struct Layer {
    int64_t in = 0, out = 0;
    Activation act = Activation::kNone;
    AlignedBuffer w;     // fp32 [out, in], or bf16 hi halves in bf16 mode
    AlignedBuffer w_lo;  // bf16 mode: low halves of the master weights
    AlignedBuffer bias;  // fp32 [out]
    float* dw = nullptr;  // fp32 [out, in], in `gradients`
    float* db = nullptr;  // fp32 [out], in `gradients`
    WeightCopy fwd_w, bwd_w;  // for the forward (W^T) and backward-data (W) matmuls
  };
  struct LayerPlan {
    Call fwd, act_bwd, grad_reorder, grad_transpose, bwd_w, dw_transpose, bwd_d;
    // The bias gradient, fused with the ReLU backward where the layer has
    // one (act_bwd is then empty): g_in is the caller's diff_output when
    // bias_user_g, bound in Backward.
    internal::BiasGradArgs bias;
    bool bias_user_g = false;
  };
  struct BatchPlan {  // one batch size's (BatchPlans)
    // Views of the caller's buffers, rebound by Forward / Backward.
    dnnl::memory user_input, user_input_t, user_diff_output, user_diff_output_t, user_diff_input;
    Call input_reorder;
    std::vector<LayerPlan> layers;
    std::vector<std::string> impls;
  };

  MlpOptions options;
  dnnl::engine engine;
  dnnl::stream stream;
  std::vector<Layer> layers;
  // Every layer's dw and db, one after the other (each 64-byte aligned), so
  // that a data-parallel step sums them across processes in one allreduce.
  AlignedBuffer gradients;
  // act[l]: output of layer l-1 (l >= 1), [max_batch x sizes[l]];
  // act[0] unused (the input is the caller's, or x_bf16).
  std::vector<AlignedBuffer> act;
  // grad[l]: gradient of act[l] for 1 <= l < L, fp32 in both modes (in
  // place through ReLU in fp32 mode).
  std::vector<AlignedBuffer> grad;
  AlignedBuffer x_bf16;          // bf16 mode: the input converted
  AlignedBuffer grad_last;       // fp32 gradient of the last pre-activation
  AlignedBuffer g_bf16;          // bf16 mode: a layer's g (its pre-activation gradient) in bf16
  AlignedBuffer g_transposed;    // bf16 mode: a layer's g, transposed [out x n]
  AlignedBuffer dw_t;            // fp32 wide layers: dW^T [in x out] before its transpose
  AlignedBuffer scratchpad;
  AlignedBuffer bias_scratch;  // BiasGrad's partial sums
  DenseOptimizer optimizer;    // over Parameters()
  internal::BiasGradBlockFn bias_block = nullptr;
  int threads = 1;
  internal::BatchPlans<BatchPlan> plans;
  int64_t last_batch = -1;
  const BatchPlan* last_plan = nullptr;
  // Whether the weight copies are stale (set by Update, SetWeight, LoadNpy).
  bool weights_dirty = true;

  bool bf16() const { return options.precision == Precision::kBf16; }
  dt act_type() const { return bf16() ? dt::bf16 : dt::f32; }
  int L() const { return static_cast<int>(layers.size()); }

  absl::Status Build();
  BatchPlan MakePlan(int64_t n, size_t& scratch);
  // Refreshes the blocked weight copies if stale.
  dnnl_status_t SyncWeights();
  // A matmul over the weights `plain` (a view of Layer::w); make(desc) creates
  // its primitive desc for a weights desc. fp32: the layout the primitive
  // prefers for format `any` on the first (largest-batch) plan, kept in
  // `copy`, and that layout on later plans (the plain view if a batch has no
  // implementation for it). bf16: the plain view (AMX brgemm packs B itself;
  // blocked copies showed no gain). Sets `weights` to the memory to bind.
  template <typename Make>
  dnnl::matmul::primitive_desc MatmulOverWeights(const dnnl::memory& plain, const Make& make, WeightCopy& copy,
                                                 size_t& scratch, dnnl::memory& weights);
};

template <typename Make>
dnnl::matmul::primitive_desc Mlp::Impl::MatmulOverWeights(const dnnl::memory& plain, const Make& make,
                                                          WeightCopy& copy, size_t& scratch,
                                                          dnnl::memory& weights) {
  const dnnl::memory::desc plain_desc = plain.get_desc();
  const dnnl::memory::desc want = bf16()     ? plain_desc
                                  : copy.mem ? copy.mem.get_desc()
                                             : dnnl::memory::desc(plain_desc.dims(), plain_desc.data_type(), tag::any);
  dnnl::matmul::primitive_desc pd;
  try {
    pd = make(want);
  } catch (const dnnl::error&) {
    weights = plain;
    return make(plain_desc);
  }
  if (!copy.mem) {
    const dnnl::memory::desc preferred = pd.weights_desc();
    if (preferred == plain_desc) {
      copy.mem = plain;
    } else {
      copy.buf = AlignedBuffer(std::max<size_t>(preferred.get_size(), 64));
      copy.mem = dnnl::memory(preferred, engine, copy.buf.data());
      dnnl::reorder::primitive_desc rpd(engine, plain_desc, engine, preferred, internal::ScratchpadAttr());
      scratch = std::max(scratch, rpd.scratchpad_desc().get_size());
      copy.to = Call(dnnl::reorder(rpd), {{DNNL_ARG_FROM, plain}, {DNNL_ARG_TO, copy.mem}});
    }
  }
  weights = copy.mem;
  return pd;
}

dnnl_status_t Mlp::Impl::SyncWeights() {
  if (!weights_dirty) return dnnl_success;
  for (const Layer& layer : layers) {
    for (const Call* c : {&layer.fwd_w.to, &layer.bwd_w.to}) {
      if (c->empty()) continue;
      const dnnl_status_t st = c->Execute(stream);
      if (st != dnnl_success) return st;
    }
  }
  weights_dirty = false;
  return dnnl_success;
}

Mlp::Impl::BatchPlan Mlp::Impl::MakePlan(int64_t n, size_t& scratch) {
  const dt at = act_type();
  const dt wt = at;
  const dnnl::primitive_attr attr = internal::ScratchpadAttr();
  auto note = [&](const dnnl::primitive_desc_base& pd) {
    scratch = std::max(scratch, pd.scratchpad_desc().get_size());
  };
  BatchPlan plan;
  const int64_t in0 = layers.front().in;
  const int64_t outL = layers.back().out;
  plan.user_input = dnnl::memory(Plain(n, in0, dt::f32), engine, DNNL_MEMORY_NONE);
  plan.user_diff_output = dnnl::memory(Plain(n, outL, dt::f32), engine, DNNL_MEMORY_NONE);
  plan.user_diff_input = dnnl::memory(Plain(n, in0, dt::f32), engine, DNNL_MEMORY_NONE);

  dnnl::memory x0 = plan.user_input;
  if (bf16()) {
    x0 = dnnl::memory(Plain(n, in0, dt::bf16), engine, x_bf16.data());
    dnnl::reorder::primitive_desc pd(engine, plan.user_input.get_desc(), engine, x0.get_desc(), attr);
    note(pd);
    plan.input_reorder = Call(dnnl::reorder(pd), {{DNNL_ARG_FROM, plan.user_input}, {DNNL_ARG_TO, x0}});
  }

  for (int l = 0; l < L(); ++l) {
    Layer& layer = layers[l];
    LayerPlan lp;
    const bool last = l == L() - 1;
    const dt yt = last ? dt::f32 : at;  // the last layer writes fp32
    dnnl::memory x = l == 0 ? x0 : dnnl::memory(Plain(n, layer.in, at), engine, act[l].data());
    dnnl::memory y(Plain(n, layer.out, yt), engine, act[l + 1].data());
    dnnl::memory w_t(Transposed(layer.in, layer.out, wt), engine, layer.w.data());  // W^T view
    dnnl::memory w(Plain(layer.out, layer.in, wt), engine, layer.w.data());
    dnnl::memory b(Plain(1, layer.out, dt::f32), engine, layer.bias.data());
    dnnl::memory dw(Plain(layer.out, layer.in, dt::f32), engine, layer.dw);
    dnnl::memory db(Plain(1, layer.out, dt::f32), engine, layer.db);

    // Forward: y = act(x W^T + b).
    {
      dnnl::primitive_attr fattr = internal::ScratchpadAttr();
      if (layer.act != Activation::kNone) {
        dnnl::post_ops po;
        po.append_eltwise(1.f, ForwardAlg(layer.act), 0.f, 0.f);
        fattr.set_post_ops(po);
      }
      // fp32 weights blocked: faster on every Kaggle layer measured
      // (docs/dlrm-layers.md).
      dnnl::memory wm;
      const dnnl::matmul::primitive_desc pd = MatmulOverWeights(
          w_t,
          [&](const dnnl::memory::desc& wd) {
            return dnnl::matmul::primitive_desc(
                dnnl::matmul::desc(x.get_desc(), wd, b.get_desc(), y.get_desc()), fattr, engine);
          },
          layer.fwd_w, scratch, wm);
      note(pd);
      plan.impls.push_back(pd.impl_info_str());
      lp.fwd = Call(dnnl::matmul(pd), {{DNNL_ARG_SRC, x}, {DNNL_ARG_WEIGHTS, wm},
                                       {DNNL_ARG_BIAS, b}, {DNNL_ARG_DST, y}});
    }

    // The gradient w.r.t. this layer's pre-activation: `g` (type `at`) for
    // the matmuls. It comes from the gradient of y, `gy`, always fp32: the
    // caller's diff_output for the last layer, else the next layer's
    // backward-data matmul (which accumulates in fp32 and writes fp32, also
    // in bf16 mode). The bias gradient sums the fp32 values; in bf16 mode g
    // is gy rounded once, to nearest, for the bf16 matmuls (rounding the
    // matmul's output to bf16 and summing that, as before, put the rounding
    // error of each of the n rows into the bias gradient: fidelity run,
    // configs/fidelity.yaml with bf16 MLPs). ReLU's backward is fused into
    // the bias pass (mask, sums, store g: internal/bias_grad.h); the
    // sigmoid's is oneDNN's, into grad_last. (db by hand: oneDNN 2.6 has only
    // a reference reduction for this shape, ~100x slower.)
    const dnnl::memory gy =
        last ? plan.user_diff_output : dnnl::memory(Plain(n, layer.out, dt::f32), engine, grad[l + 1].data());
    dnnl::memory g32 = gy;  // fp32, after the activation's backward
    if (layer.act == Activation::kSigmoid) {
      g32 = dnnl::memory(Plain(n, layer.out, dt::f32), engine, grad_last.data());
      dnnl::eltwise_forward::primitive_desc hint(
          {dnnl::prop_kind::forward_training, BackwardAlg(layer.act), y.get_desc(), 0.f, 0.f}, engine);
      dnnl::eltwise_backward::primitive_desc pd(
          {BackwardAlg(layer.act), g32.get_desc(), y.get_desc(), 0.f, 0.f}, attr, engine, hint);
      note(pd);
      lp.act_bwd = Call(dnnl::eltwise_backward(pd), {{DNNL_ARG_DST, y}, {DNNL_ARG_DIFF_DST, gy},
                                                     {DNNL_ARG_DIFF_SRC, g32}});
    }
    const bool relu = layer.act == Activation::kRelu;
    dnnl::memory g;
    if (bf16()) {
      g = dnnl::memory(Plain(n, layer.out, dt::bf16), engine, g_bf16.data());
    } else {
      // In place through the ReLU, except into the caller's diff_output.
      g = relu && last ? dnnl::memory(Plain(n, layer.out, dt::f32), engine, grad_last.data()) : g32;
    }
    using BT = internal::BiasGradType;
    lp.bias.n = n;
    lp.bias.out = layer.out;
    lp.bias_user_g = g32.get() == plan.user_diff_output.get();
    lp.bias.g_in = lp.bias_user_g ? nullptr : g32.get_data_handle();
    if (relu) {
      lp.bias.y = y.get_data_handle();
      lp.bias.y_type = yt == dt::bf16 ? BT::kBf16 : BT::kFp32;
      lp.bias.g_out = g.get_data_handle();
      lp.bias.g_out_type = bf16() ? BT::kBf16 : BT::kFp32;
    } else if (bf16()) {
      dnnl::reorder::primitive_desc pd(engine, g32.get_desc(), engine, g.get_desc(), attr);
      note(pd);
      lp.grad_reorder = Call(dnnl::reorder(pd), {{DNNL_ARG_FROM, g32}, {DNNL_ARG_TO, g}});
    }

    // dW [out, in] = g^T [out, N] x x [N, in]. fp32: g seen transposed
    // through strides. bf16: g is first transposed by a reorder into
    // g_transposed, because AMX brgemm with a strided (transposed) source
    // runs at about half the speed of a plain one, more than the reorder costs
    // (docs/dlrm-layers.md).
    //
    // fp32 layers with both widths >= 256 compute dW^T [in, out] = x^T g
    // instead (x seen transposed, g plain) into dw_t, then transpose it into
    // dW with a reorder: faster, reorder included, on the wide Kaggle layers
    // (docs/dlrm-layers.md). Narrow layers keep g^T x (x^T g was slower for N=1).
    if (!bf16() && layer.in >= 256 && layer.out >= 256) {
      const bool user_x = l == 0;
      dnnl::memory x_t(Transposed(layer.in, n, dt::f32), engine, user_x ? DNNL_MEMORY_NONE : x.get_data_handle());
      if (user_x) plan.user_input_t = x_t;  // rebound with it in Forward
      dnnl::memory dwt(Plain(layer.in, layer.out, dt::f32), engine, dw_t.data());
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(x_t.get_desc(), g.get_desc(), dwt.get_desc()), attr,
                                      engine);
      note(pd);
      lp.bwd_w = Call(dnnl::matmul(pd), {{DNNL_ARG_SRC, x_t}, {DNNL_ARG_WEIGHTS, g}, {DNNL_ARG_DST, dwt}});
      dnnl::memory dwt_view(Transposed(layer.out, layer.in, dt::f32), engine, dw_t.data());
      dnnl::reorder::primitive_desc rpd(engine, dwt_view.get_desc(), engine, dw.get_desc(), attr);
      note(rpd);
      lp.dw_transpose = Call(dnnl::reorder(rpd), {{DNNL_ARG_FROM, dwt_view}, {DNNL_ARG_TO, dw}});
    } else {
      const bool user_g = g.get() == plan.user_diff_output.get();
      const dt gt_type = g.get_desc().data_type();
      dnnl::memory g_view(Transposed(layer.out, n, gt_type), engine,
                          user_g ? DNNL_MEMORY_NONE : g.get_data_handle());
      if (user_g) plan.user_diff_output_t = g_view;  // rebound with it in Backward
      dnnl::memory g_t = g_view;
      if (bf16()) {
        g_t = dnnl::memory(Plain(layer.out, n, gt_type), engine, g_transposed.data());
        dnnl::reorder::primitive_desc pd(engine, g_view.get_desc(), engine, g_t.get_desc(), attr);
        note(pd);
        lp.grad_transpose = Call(dnnl::reorder(pd), {{DNNL_ARG_FROM, g_view}, {DNNL_ARG_TO, g_t}});
      }
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(g_t.get_desc(), x.get_desc(), dw.get_desc()),
                                      attr, engine);
      note(pd);
      lp.bwd_w = Call(dnnl::matmul(pd), {{DNNL_ARG_SRC, g_t}, {DNNL_ARG_WEIGHTS, x}, {DNNL_ARG_DST, dw}});
    }
    // dx [N, in] = g [N, out] x W [out, in].
    if (l > 0 || options.compute_input_grad) {
      dnnl::memory dx = l > 0 ? dnnl::memory(Plain(n, layer.in, dt::f32), engine, grad[l].data())
                              : plan.user_diff_input;
      // Weights as in the forward: blocked in fp32 (docs/dlrm-layers.md).
      dnnl::memory wm;
      const dnnl::matmul::primitive_desc pd = MatmulOverWeights(
          w,
          [&](const dnnl::memory::desc& wd) {
            return dnnl::matmul::primitive_desc(dnnl::matmul::desc(g.get_desc(), wd, dx.get_desc()), attr, engine);
          },
          layer.bwd_w, scratch, wm);
      note(pd);
      lp.bwd_d = Call(dnnl::matmul(pd), {{DNNL_ARG_SRC, g}, {DNNL_ARG_WEIGHTS, wm}, {DNNL_ARG_DST, dx}});
    }
    plan.layers.push_back(std::move(lp));
  }
  return plan;
}

absl::Status Mlp::Impl::Build() {
  const int64_t max_n = options.max_batch;
  const size_t as = SizeOf(act_type());
  const int nl = static_cast<int>(options.sizes.size()) - 1;
  layers.resize(nl);
  for (int l = 0; l < nl; ++l) {
    Layer& layer = layers[l];
    layer.in = options.sizes[l];
    layer.out = options.sizes[l + 1];
    layer.act = l + 1 < nl ? Activation::kRelu : options.last_activation;
    const size_t nw = static_cast<size_t>(layer.in * layer.out);
    layer.w = AlignedBuffer(nw * (bf16() ? 2 : 4));
    if (bf16()) layer.w_lo = AlignedBuffer(nw * 2);
    layer.bias = AlignedBuffer(layer.out * 4);
  }
  {
    // 16 floats: 64 bytes.
    auto padded = [](int64_t floats) { return (floats + 15) / 16 * 16; };
    int64_t total = 0;
    for (const Layer& layer : layers) total += padded(layer.in * layer.out) + padded(layer.out);
    gradients = AlignedBuffer(static_cast<size_t>(total) * 4);
    float* next = gradients.as<float>();
    for (Layer& layer : layers) {
      layer.dw = next;
      next += padded(layer.in * layer.out);
      layer.db = next;
      next += padded(layer.out);
    }
  }
  act.resize(nl + 1);
  grad.resize(nl);
  for (int l = 1; l <= nl; ++l) {
    const size_t elems = static_cast<size_t>(max_n * options.sizes[l]);
    act[l] = AlignedBuffer(elems * (l == nl ? 4 : as));
    if (l < nl) grad[l] = AlignedBuffer(elems * 4);
  }
  const int64_t out_l = options.sizes.back();
  if (bf16()) {
    x_bf16 = AlignedBuffer(static_cast<size_t>(max_n * options.sizes[0]) * 2);
    const int64_t widest = *std::max_element(options.sizes.begin() + 1, options.sizes.end());
    g_bf16 = AlignedBuffer(static_cast<size_t>(max_n * widest) * 2);
    g_transposed = AlignedBuffer(static_cast<size_t>(max_n * widest) * 2);
  }
  {
    int64_t widest_w = 64;
    for (const Layer& layer : layers) widest_w = std::max(widest_w, layer.in * layer.out);
    if (!bf16()) dw_t = AlignedBuffer(static_cast<size_t>(widest_w) * 4);
  }
  if (options.last_activation != Activation::kNone) {
    grad_last = AlignedBuffer(static_cast<size_t>(max_n * out_l) * 4);
  }

  // Initialise as dlrm_s_pytorch does (through SetWeight, so that bf16 mode
  // splits the fp32 values exactly).
  for (int l = 0; l < nl; ++l) {
    const Layer& layer = layers[l];
    std::vector<float> w(static_cast<size_t>(layer.in * layer.out)), b(layer.out);
    FillNormal(w, std::sqrt(2.0 / static_cast<double>(layer.in + layer.out)),
               SplitMix64::Mix(options.seed, 2 * l));
    FillNormal(b, std::sqrt(1.0 / static_cast<double>(layer.out)), SplitMix64::Mix(options.seed, 2 * l + 1));
    if (bf16()) {
      uint16_t* hi = layers[l].w.as<uint16_t>();
      uint16_t* lo = layers[l].w_lo.as<uint16_t>();
      for (size_t i = 0; i < w.size(); ++i) SplitFloat(w[i], hi[i], lo[i]);
    } else {
      std::memcpy(layers[l].w.data(), w.data(), w.size() * 4);
    }
    std::memcpy(layers[l].bias.data(), b.data(), b.size() * 4);
  }

  threads = DefaultThreads();
  CEMB_ASSIGN_OR_RETURN(bias_block, internal::BiasGradBlockFor(Isa::kAuto));
  {
    const int64_t widest = *std::max_element(options.sizes.begin() + 1, options.sizes.end());
    bias_scratch = AlignedBuffer(static_cast<size_t>(internal::BiasGradScratchFloats(threads, widest)) * 4);
  }
  engine = dnnl::engine(dnnl::engine::kind::cpu, 0);
  stream = dnnl::stream(engine);
  size_t scratch = 0;
  CEMB_RETURN_IF_ERROR(plans.Make(options.batch_sizes, max_n,
                                  [&](int64_t n) -> absl::StatusOr<BatchPlan> { return MakePlan(n, scratch); }));
  scratchpad = AlignedBuffer(std::max<size_t>(scratch, 64));
  dnnl::memory pad(dnnl::memory::desc(dims{static_cast<int64_t>(scratchpad.size())}, dt::u8, tag::a), engine,
                   scratchpad.data());
  for (Layer& layer : layers) {
    for (Call* c : {&layer.fwd_w.to, &layer.bwd_w.to}) {
      if (!c->empty()) c->BindScratchpad(pad);
    }
  }
  weights_dirty = true;
  for (BatchPlan& plan : plans.plans()) {
    if (!plan.input_reorder.empty()) plan.input_reorder.BindScratchpad(pad);
    for (LayerPlan& lp : plan.layers) {
      for (Call* c : {&lp.fwd, &lp.act_bwd, &lp.grad_reorder, &lp.grad_transpose, &lp.bwd_w, &lp.dw_transpose,
                       &lp.bwd_d}) {
        if (!c->empty()) c->BindScratchpad(pad);
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Mlp> Mlp::Create(const MlpOptions& options) {
  if (options.precision != Precision::kFp32 && options.precision != Precision::kBf16) {
    return absl::InvalidArgumentError(
        "MLP precision auto: resolve it to fp32 or bf16 first (ResolveMlpPrecision, dlrm/precision.h)");
  }
  if (options.sizes.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat("MLP needs at least 2 sizes (input and output), got ",
                                                   options.sizes.size()));
  }
  for (size_t i = 0; i < options.sizes.size(); ++i) {
    if (options.sizes[i] <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("MLP size ", i, " is ", options.sizes[i], ", must be > 0"));
    }
  }
  if (options.max_batch <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("MLP max_batch is ", options.max_batch, ", must be > 0"));
  }
  for (int64_t n : options.batch_sizes) {
    if (n < 1 || n > options.max_batch) {
      return absl::InvalidArgumentError(
          absl::StrCat("MLP batch size ", n, " is outside [1, max_batch = ", options.max_batch, "]"));
    }
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  std::vector<int64_t> sizes;  // Parameters()' sizes
  for (size_t l = 0; l + 1 < options.sizes.size(); ++l) {
    sizes.push_back(options.sizes[l] * options.sizes[l + 1]);
    sizes.push_back(options.sizes[l + 1]);
  }
  impl->optimizer = DenseOptimizer(options.optimizer, sizes);
  try {
    CEMB_RETURN_IF_ERROR(impl->Build());
  } catch (const dnnl::error& e) {
    return internal::FromDnnlError(
        e, absl::StrCat("MLP ", absl::StrJoin(options.sizes, "-"),
                        " ", PrecisionName(options.precision), ": creating primitives"));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError("MLP: out of memory allocating buffers");
  }
  return Mlp(std::move(impl));
}

Mlp::Mlp(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Mlp::Mlp(Mlp&&) noexcept = default;
Mlp& Mlp::operator=(Mlp&&) noexcept = default;
Mlp::~Mlp() = default;

const MlpOptions& Mlp::options() const { return impl_->options; }
int Mlp::num_layers() const { return impl_->L(); }
int64_t Mlp::input_width() const { return impl_->options.sizes.front(); }
int64_t Mlp::output_width() const { return impl_->options.sizes.back(); }

namespace {
absl::Status Nothing() { return absl::OkStatus(); }
}  // namespace

absl::StatusOr<std::span<const float>> Mlp::Forward(int64_t batch, const float* input) {
  return Forward(batch, input, Nothing);
}

absl::Status Mlp::Backward(int64_t batch, const float* diff_output, float* diff_input) {
  return Backward(batch, diff_output, diff_input, Nothing);
}

absl::StatusOr<std::span<const float>> Mlp::Forward(int64_t batch, const float* input,
                                                    absl::FunctionRef<absl::Status()> between_layers) {
  Impl& m = *impl_;
  CEMB_ASSIGN_OR_RETURN(const Impl::BatchPlan* plan, m.plans.Get(batch, "MLP Forward (MlpOptions::batch_sizes)"));
  if (input == nullptr) return absl::InvalidArgumentError("MLP Forward: null input");
  m.last_batch = -1;
  dnnl_status_t st = m.SyncWeights();
  if (st == dnnl_success) {
    st = dnnl_memory_set_data_handle_v2(plan->user_input.get(), const_cast<float*>(input), nullptr);
  }
  if (st == dnnl_success && plan->user_input_t) {
    st = dnnl_memory_set_data_handle_v2(plan->user_input_t.get(), const_cast<float*>(input), nullptr);
  }
  if (st == dnnl_success && !plan->input_reorder.empty()) st = plan->input_reorder.Execute(m.stream);
  for (size_t l = 0; l < plan->layers.size() && st == dnnl_success; ++l) {
    if (l > 0) CEMB_RETURN_IF_ERROR(between_layers());
    st = plan->layers[l].fwd.Execute(m.stream);
  }
  CEMB_RETURN_IF_ERROR(internal::DnnlStatus(st, "MLP Forward"));
  m.last_batch = batch;
  m.last_plan = plan;
  return std::span<const float>(m.act.back().as<const float>(), static_cast<size_t>(batch * output_width()));
}

absl::Status Mlp::Backward(int64_t batch, const float* diff_output, float* diff_input,
                           absl::FunctionRef<absl::Status()> between_layers) {
  Impl& m = *impl_;
  if (batch != m.last_batch || m.last_plan == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("MLP Backward: batch ", batch, " does not follow a Forward of that batch (last: ",
                     m.last_batch, ")"));
  }
  if (diff_output == nullptr) return absl::InvalidArgumentError("MLP Backward: null diff_output");
  if (m.options.compute_input_grad != (diff_input != nullptr)) {
    return absl::InvalidArgumentError(
        m.options.compute_input_grad ? "MLP Backward: diff_input is null but compute_input_grad is set"
                                     : "MLP Backward: diff_input given but compute_input_grad is not set");
  }
  const Impl::BatchPlan& plan = *m.last_plan;
  void* dy = const_cast<float*>(diff_output);  // read only: no primitive writes it
  dnnl_status_t st = m.SyncWeights();  // in case SetWeight came after Forward
  if (st == dnnl_success) st = dnnl_memory_set_data_handle_v2(plan.user_diff_output.get(), dy, nullptr);
  if (st == dnnl_success && plan.user_diff_output_t) {
    st = dnnl_memory_set_data_handle_v2(plan.user_diff_output_t.get(), dy, nullptr);
  }
  if (st == dnnl_success && diff_input != nullptr) {
    st = dnnl_memory_set_data_handle_v2(plan.user_diff_input.get(), diff_input, nullptr);
  }
  for (int l = m.L() - 1; l >= 0 && st == dnnl_success; --l) {
    if (l < m.L() - 1) CEMB_RETURN_IF_ERROR(between_layers());
    const Impl::LayerPlan& lp = plan.layers[l];
    if (!lp.act_bwd.empty()) st = lp.act_bwd.Execute(m.stream);
    if (st != dnnl_success) break;
    internal::BiasGradArgs bias = lp.bias;
    if (lp.bias_user_g) bias.g_in = diff_output;
    internal::BiasGrad(m.bias_block, bias, m.threads, m.bias_scratch.as<float>(), m.layers[l].db);
    for (const Call* c : {&lp.grad_reorder, &lp.grad_transpose, &lp.bwd_w, &lp.dw_transpose, &lp.bwd_d}) {
      if (c->empty()) continue;
      st = c->Execute(m.stream);
      if (st != dnnl_success) break;
    }
  }
  return internal::DnnlStatus(st, "MLP Backward");
}

void Mlp::Update(float lr) {
  Impl& m = *impl_;
  for (int l = 0; l < m.L(); ++l) {
    Impl::Layer& layer = m.layers[l];
    const auto n = static_cast<size_t>(layer.in * layer.out);
    const std::span<const float> dw(layer.dw, n);
    if (m.bf16()) {
      m.optimizer.Update(2 * l, std::span(layer.w.as<uint16_t>(), n), std::span(layer.w_lo.as<uint16_t>(), n), dw, lr);
    } else {
      m.optimizer.Update(2 * l, std::span(layer.w.as<float>(), n), dw, lr);
    }
    const auto out = static_cast<size_t>(layer.out);
    m.optimizer.Update(2 * l + 1, std::span(layer.bias.as<float>(), out), std::span<const float>(layer.db, out), lr);
  }
  m.weights_dirty = true;
}

DenseOptimizer& Mlp::optimizer() { return impl_->optimizer; }

std::vector<ParameterInfo> Mlp::Parameters() const {
  std::vector<ParameterInfo> out;
  for (int l = 0; l < num_layers(); ++l) {
    const Impl::Layer& layer = impl_->layers[l];
    out.push_back({absl::StrCat(2 * l, ".weight"), {layer.out, layer.in}});
    out.push_back({absl::StrCat(2 * l, ".bias"), {layer.out}});
  }
  return out;
}

namespace {
absl::Status CheckParam(int layer, int layers, size_t got, int64_t want, const char* what) {
  if (layer < 0 || layer >= layers) {
    return absl::OutOfRangeError(absl::StrCat("MLP layer ", layer, " is outside [0, ", layers, ")"));
  }
  if (got != static_cast<size_t>(want)) {
    return absl::InvalidArgumentError(
        absl::StrCat("MLP layer ", layer, " ", what, ": ", got, " values where ", want, " are needed"));
  }
  return absl::OkStatus();
}
}  // namespace

absl::Status Mlp::GetWeight(int layer, std::span<float> out) const {
  const Impl& m = *impl_;
  const int64_t n = layer >= 0 && layer < m.L() ? m.layers[layer].in * m.layers[layer].out : 0;
  CEMB_RETURN_IF_ERROR(CheckParam(layer, m.L(), out.size(), n, "weight"));
  const Impl::Layer& l = m.layers[layer];
  if (m.bf16()) {
    for (int64_t i = 0; i < n; ++i) out[i] = CombineSplit(l.w.as<uint16_t>()[i], l.w_lo.as<uint16_t>()[i]);
  } else {
    std::memcpy(out.data(), l.w.data(), static_cast<size_t>(n) * 4);
  }
  return absl::OkStatus();
}

absl::Status Mlp::SetWeight(int layer, std::span<const float> in) {
  Impl& m = *impl_;
  const int64_t n = layer >= 0 && layer < m.L() ? m.layers[layer].in * m.layers[layer].out : 0;
  CEMB_RETURN_IF_ERROR(CheckParam(layer, m.L(), in.size(), n, "weight"));
  Impl::Layer& l = m.layers[layer];
  if (m.bf16()) {
    for (int64_t i = 0; i < n; ++i) SplitFloat(in[i], l.w.as<uint16_t>()[i], l.w_lo.as<uint16_t>()[i]);
  } else {
    std::memcpy(l.w.data(), in.data(), static_cast<size_t>(n) * 4);
  }
  m.weights_dirty = true;
  return absl::OkStatus();
}

absl::Status Mlp::GetBias(int layer, std::span<float> out) const {
  const Impl& m = *impl_;
  const int64_t n = layer >= 0 && layer < m.L() ? m.layers[layer].out : 0;
  CEMB_RETURN_IF_ERROR(CheckParam(layer, m.L(), out.size(), n, "bias"));
  std::memcpy(out.data(), m.layers[layer].bias.data(), static_cast<size_t>(n) * 4);
  return absl::OkStatus();
}

absl::Status Mlp::SetBias(int layer, std::span<const float> in) {
  Impl& m = *impl_;
  const int64_t n = layer >= 0 && layer < m.L() ? m.layers[layer].out : 0;
  CEMB_RETURN_IF_ERROR(CheckParam(layer, m.L(), in.size(), n, "bias"));
  std::memcpy(m.layers[layer].bias.data(), in.data(), static_cast<size_t>(n) * 4);
  return absl::OkStatus();
}

std::span<float> Mlp::gradients() {
  return {impl_->gradients.as<float>(), impl_->gradients.size() / sizeof(float)};
}

std::span<const float> Mlp::weight_grad(int layer) const {
  const Impl::Layer& l = impl_->layers[layer];
  return {l.dw, static_cast<size_t>(l.in * l.out)};
}
std::span<const float> Mlp::bias_grad(int layer) const {
  const Impl::Layer& l = impl_->layers[layer];
  return {l.db, static_cast<size_t>(l.out)};
}

absl::Status Mlp::SaveNpy(const std::string& dir, const std::string& prefix) const {
  for (int l = 0; l < num_layers(); ++l) {
    const Impl::Layer& layer = impl_->layers[l];
    std::vector<float> w(static_cast<size_t>(layer.in * layer.out)), b(layer.out);
    CEMB_RETURN_IF_ERROR(GetWeight(l, w));
    CEMB_RETURN_IF_ERROR(GetBias(l, b));
    CEMB_RETURN_IF_ERROR(WriteNpy<float>(absl::StrCat(dir, "/", prefix, 2 * l, ".weight.npy"), w,
                                         {layer.out, layer.in}));
    CEMB_RETURN_IF_ERROR(WriteNpy<float>(absl::StrCat(dir, "/", prefix, 2 * l, ".bias.npy"), b, {layer.out}));
  }
  return absl::OkStatus();
}

absl::Status Mlp::LoadNpy(const std::string& dir, const std::string& prefix) {
  // Read and check everything first, so that a bad file leaves the MLP as it was.
  std::vector<std::vector<float>> weights(num_layers()), biases(num_layers());
  for (int l = 0; l < num_layers(); ++l) {
    const Impl::Layer& layer = impl_->layers[l];
    CEMB_RETURN_IF_ERROR(
        ReadNpyFloats(absl::StrCat(dir, "/", prefix, 2 * l, ".weight.npy"), {layer.out, layer.in}, weights[l]));
    CEMB_RETURN_IF_ERROR(ReadNpyFloats(absl::StrCat(dir, "/", prefix, 2 * l, ".bias.npy"), {layer.out}, biases[l]));
  }
  for (int l = 0; l < num_layers(); ++l) {
    CEMB_RETURN_IF_ERROR(SetWeight(l, weights[l]));
    CEMB_RETURN_IF_ERROR(SetBias(l, biases[l]));
  }
  return absl::OkStatus();
}

std::vector<std::string> Mlp::ImplementationNames() const { return impl_->plans.plans().front().impls; }

}  // namespace cemb::dlrm
