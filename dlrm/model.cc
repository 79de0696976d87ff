#include "dlrm/model.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <optional>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/timer.h"
#include "dlrm/internal/aligned_buffer.h"
#include "dlrm/loss.h"

namespace cemb::dlrm {
namespace {

// Table t's files: "emb_l.<t>.<ext>" (dlrm_s_pytorch's state_dict name), in
// checkpoints and exports alike; the MLPs' and the cross network's.
constexpr char kTablePrefix[] = "emb_l.";
constexpr char kBottomPrefix[] = "bot_l.";
constexpr char kTopPrefix[] = "top_l.";
constexpr char kCrossPrefix[] = "crossnet.";

std::vector<int64_t> Concat(int64_t first, const std::vector<int64_t>& rest) {
  std::vector<int64_t> sizes = {first};
  sizes.insert(sizes.end(), rest.begin(), rest.end());
  return sizes;
}

// The model's tables: all of them, held here or by other processes.
int64_t NumTables(const DlrmOptions& o) {
  return o.num_tables > 0 ? o.num_tables : static_cast<int64_t>(o.embeddings.tables.size());
}

// The model's interaction over its tables' outputs.
absl::StatusOr<Interaction> MakeInteraction(const DlrmOptions& o) {
  return Interaction::Create({.kind = o.interaction,
                              .num_sparse = NumTables(o),
                              .dim = o.embeddings.dim,
                              .self_interaction = o.self_interaction,
                              .threads = o.threads});
}

// A model's bottom MLP (dense features -> dim, ReLU last) and top MLP
// (the interaction's output -> one logit) in `precision`.
struct Mlps {
  Mlp bottom;
  Mlp top;
};
absl::StatusOr<Mlps> MakeMlps(const DlrmOptions& o, int64_t top_input, Precision precision, int64_t max_batch,
                              const std::vector<int64_t>& batch_sizes) {
  CEMB_ASSIGN_OR_RETURN(Mlp bottom, Mlp::Create({.sizes = Concat(o.num_dense, o.bottom_mlp),
                                                 .last_activation = Activation::kRelu,
                                                 .precision = precision,
                                                 .max_batch = max_batch,
                                                 .batch_sizes = batch_sizes,
                                                 .compute_input_grad = false,
                                                 .optimizer = o.dense_optimizer,
                                                 .seed = o.seed}));
  CEMB_ASSIGN_OR_RETURN(Mlp top, Mlp::Create({.sizes = Concat(top_input, o.top_mlp),
                                              .last_activation = Activation::kNone,
                                              .precision = precision,
                                              .max_batch = max_batch,
                                              .batch_sizes = batch_sizes,
                                              .compute_input_grad = true,
                                              .optimizer = o.dense_optimizer,
                                              .seed = o.seed + 1}));
  return Mlps{std::move(bottom), std::move(top)};
}

// The first `rows` rows of a dense [max_batch x cols] float buffer.
MatrixView Rows(const internal::AlignedBuffer& buffer, int64_t rows, int64_t cols) {
  return {buffer.as<float>(), rows, cols, cols};
}

}  // namespace

const char* PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kData: return "data";
    case Phase::kSsdWait: return "ssd wait";
    case Phase::kEmbeddingLookup: return "embedding lookup";
    case Phase::kInteraction: return "interaction";
    case Phase::kCrossNetwork: return "cross network";
    case Phase::kBottomForward: return "bottom MLP forward";
    case Phase::kBottomBackward: return "bottom MLP backward";
    case Phase::kTopForward: return "top MLP forward + loss";
    case Phase::kTopBackward: return "top MLP backward";
    case Phase::kMlpUpdate: return "MLP update";
    case Phase::kEmbeddingUpdate: return "embedding update";
    case Phase::kCacheFlush: return "cache flush";
    case Phase::kAllToAll: return "all-to-all";
    case Phase::kAllreduce: return "allreduce";
    case Phase::kOther: return "other";
  }
  return "?";
}

double PhaseTimes::total() const {
  double sum = 0;
  for (double s : seconds) sum += s;
  return sum;
}

PhaseTimes& PhaseTimes::operator+=(const PhaseTimes& o) {
  for (int i = 0; i < kNumPhases; ++i) seconds[i] += o.seconds[i];
  return *this;
}

namespace {

// One process's EmbeddingStep: the model's own tables, which hold every
// table. Pools the rows once the bottom MLP has run (FinishPooledRows) and
// updates them after the dense step (FinishGradients); nothing to sum.
class LocalEmbeddingStep final : public EmbeddingStep {
 public:
  int64_t global_batch() const override { return 0; }  // the batch itself
  absl::Status StartPooledRows(const absl::Status& local, EmbeddingLayer& layer, const BatchView& batch,
                               MatrixView emb, PhaseTimes*) override {
    layer_ = &layer, batch_ = &batch, emb_ = emb;
    return local;
  }
  absl::Status FinishPooledRows(const absl::Status& local, PhaseTimes* times) override {
    CEMB_RETURN_IF_ERROR(local);
    ScopedSeconds timer(PhaseSeconds(times, Phase::kEmbeddingLookup));
    return batch_->checked != nullptr ? layer_->Lookup(*batch_->checked, emb_) : layer_->Lookup(batch_->bags, emb_);
  }
  absl::Status Progress() override { return absl::OkStatus(); }
  absl::Status StartGradients(ConstMatrixView d_emb, PhaseTimes*) override {
    d_emb_ = d_emb;
    return absl::OkStatus();
  }
  absl::Status SumGradients(std::span<float>, PhaseTimes*) override { return absl::OkStatus(); }
  absl::Status SumLoss(double*, PhaseTimes*) override { return absl::OkStatus(); }
  absl::Status FinishGradients(const absl::Status& local, EmbeddingLayer& layer, const BatchView& batch, float lr,
                               PhaseTimes* times) override {
    CEMB_RETURN_IF_ERROR(local);
    ScopedSeconds timer(PhaseSeconds(times, Phase::kEmbeddingUpdate));
    return batch.checked != nullptr ? layer.Update(*batch.checked, d_emb_, lr) : layer.Update(batch.bags, d_emb_, lr);
  }

 private:
  // The step's, from StartPooledRows and StartGradients to their Finish.
  EmbeddingLayer* layer_ = nullptr;
  const BatchView* batch_ = nullptr;
  MatrixView emb_;
  ConstMatrixView d_emb_;
};

}  // namespace

struct Dlrm::Impl {
  DlrmOptions options;  // mlp_precision resolved
  MlpPrecisionChoice precision;
  int64_t dim = 0, num_tables = 0, max_batch = 0;
  std::unique_ptr<EmbeddingLayer> embeddings;
  LocalEmbeddingStep local_step;  // the step of a batch without its own (one process)
  std::optional<Mlp> bottom, top;
  std::optional<Interaction> interaction;
  std::optional<CrossNetwork> cross;  // dcn only
  // [max_batch x T*dim] embedding outputs and their gradient; the
  // interaction's output and its gradient (with dcn: the cross network's
  // input x0, and the gradient of its output, then of x0, in place); the
  // bottom output's gradient; the loss gradient.
  // 64-byte aligned: the embedding lookup's threads write 64-byte column
  // blocks of `emb` for different tables; in a 16-byte aligned std::vector
  // those straddle cache lines and the threads false-share every row (the
  // Kaggle lookup took about 4x as long: bench/history/training-step.md, "false sharing").
  internal::AlignedBuffer emb, d_emb, top_in, d_top_in, d_bottom, d_logits;
  // The bottom MLP's output of the last Forward (owned by the MLP).
  std::span<const float> bottom_out;

  // Where the lookup writes the embedding outputs [n x T*dim] and where
  // their gradient goes: `emb` and `d_emb` for the dot interaction; for
  // concat and dcn, columns [dim, (T+1)*dim) of top_in and d_top_in, so that
  // the interaction copies only the bottom output (Interaction's in-place
  // layout) and neither buffer is allocated.
  MatrixView EmbOut(int64_t n) const { return EmbView(emb, top_in, n); }
  MatrixView EmbGrad(int64_t n) const { return EmbView(d_emb, d_top_in, n); }
  MatrixView EmbView(const internal::AlignedBuffer& own, const internal::AlignedBuffer& interaction_side,
                     int64_t n) const {
    const int64_t width = num_tables * dim;
    if (options.interaction == InteractionKind::kDot) return Rows(own, n, width);
    return {interaction_side.as<float>() + dim, n, width, width + dim};
  }

  absl::Status CheckBatch(const BatchView& b) const {
    if (b.size <= 0 || b.size > max_batch) {
      return absl::InvalidArgumentError(absl::StrCat("batch of ", b.size, " samples; planned at most ", max_batch));
    }
    if (static_cast<int64_t>(b.dense.size()) != b.size * options.num_dense ||
        static_cast<int64_t>(b.bags.size()) != num_tables) {
      return absl::InvalidArgumentError(absl::StrCat("batch of ", b.size, " samples has ", b.dense.size(),
                                                     " dense values and ", b.bags.size(), " tables; expected ",
                                                     b.size * options.num_dense, " and ", num_tables));
    }
    for (int64_t t = 0; t < num_tables; ++t) {
      if (b.bags[t].nbags() != b.size) {
        return absl::InvalidArgumentError(
            absl::StrCat("table ", t, " has ", b.bags[t].nbags(), " bags for ", b.size, " samples"));
      }
    }
    return absl::OkStatus();
  }

  // The batch's EmbeddingStep: its own (several processes), else this
  // model's tables alone.
  EmbeddingStep* StepOf(const BatchView& b) { return b.embedding_step != nullptr ? b.embedding_step : &local_step; }

  // The forward pass up to the logits (top MLP output). One path for one
  // process and for several: the step pools the rows (a process that failed
  // still takes part: the others wait for it), while the bottom MLP runs.
  absl::StatusOr<std::span<const float>> Forward(const BatchView& b, PhaseTimes* times, LapSeconds& watch) {
    const int64_t n = b.size;
    if (b.embedding_step == nullptr && embeddings->num_tables() != num_tables) {
      return absl::FailedPreconditionError(absl::StrCat("model: the layer holds ", embeddings->num_tables(), " of its ",
                                                        num_tables, " tables and no other process holds the rest: "
                                                        "score through MakeForward"));
    }
    EmbeddingStep* step = StepOf(b);
    absl::Status local = CheckBatch(b);
    CEMB_RETURN_IF_ERROR(step->StartPooledRows(local, *embeddings, b, EmbOut(n), times));
    watch.Skip();
    if (local.ok()) {
      absl::StatusOr<std::span<const float>> out =
          bottom->Forward(n, b.dense.data(), [step] { return step->Progress(); });
      if (out.ok()) bottom_out = *out;
      local = out.status();
      watch.Lap(PhaseSeconds(times, Phase::kBottomForward));
    }
    CEMB_RETURN_IF_ERROR(step->FinishPooledRows(local, times));
    watch.Skip();
    CEMB_RETURN_IF_ERROR(interaction->Forward({bottom_out.data(), n, dim, dim}, EmbOut(n),
                                              Rows(top_in, n, interaction->output_width())));
    watch.Lap(PhaseSeconds(times, Phase::kInteraction));
    const float* z = top_in.as<float>();
    if (cross) {
      CEMB_ASSIGN_OR_RETURN(std::span<const float> x_l, cross->Forward(n, z));
      z = x_l.data();
      watch.Lap(PhaseSeconds(times, Phase::kCrossNetwork));
    }
    return top->Forward(n, z);
  }

  // The optimizer's step on the dense parameters: the MLPs and the cross network.
  void DenseStep(float lr) {
    top->Update(lr);
    if (cross) cross->Update(lr);
    bottom->Update(lr);
  }

  // The MLPs' and the cross network's parameters as .npy files (Save and
  // ExportNpy alike), and with `state` their optimizer's accumulators (Save);
  // the tables are the caller's.
  absl::Status SaveDense(const std::string& dir, bool state);
  absl::Status LoadDense(const std::string& dir, bool state);

  // TrainStep's backward from the logits' gradient to the MLPs' and the
  // embeddings' gradients (d_emb), on this process's samples.
  absl::Status Backward(int64_t n, PhaseTimes* times, LapSeconds& watch) {
    const int64_t w_top = interaction->output_width();
    CEMB_RETURN_IF_ERROR(top->Backward(n, d_logits.as<float>(), d_top_in.as<float>()));
    watch.Lap(PhaseSeconds(times, Phase::kTopBackward));
    if (cross) {
      CEMB_RETURN_IF_ERROR(cross->Backward(n, d_top_in.as<float>(), d_top_in.as<float>()));
      watch.Lap(PhaseSeconds(times, Phase::kCrossNetwork));
    }
    CEMB_RETURN_IF_ERROR(interaction->Backward({bottom_out.data(), n, dim, dim}, EmbOut(n),
                                               Rows(d_top_in, n, w_top), Rows(d_bottom, n, dim),
                                               EmbGrad(n)));
    watch.Lap(PhaseSeconds(times, Phase::kInteraction));
    return absl::OkStatus();
  }
};

absl::StatusOr<std::unique_ptr<Dlrm>> Dlrm::Create(const DlrmOptions& options) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  CEMB_ASSIGN_OR_RETURN(impl->precision,
                        ResolveMlpPrecision(options.mlp_precision, DetectMatmulCpu(), options.mlp_auto));
  impl->options.mlp_precision = impl->precision.precision;
  impl->dim = options.embeddings.dim;
  impl->num_tables = NumTables(options);
  if (impl->num_tables < static_cast<int64_t>(options.embeddings.tables.size())) {
    return absl::InvalidArgumentError(absl::StrCat("model: ", impl->num_tables, " tables but the layer has ",
                                                   options.embeddings.tables.size()));
  }
  impl->max_batch = options.batch_size;
  for (int64_t b : options.extra_batch_sizes) impl->max_batch = std::max(impl->max_batch, b);
  if (options.bottom_mlp.empty() || options.bottom_mlp.back() != impl->dim) {
    return absl::InvalidArgumentError(absl::StrCat("model: the bottom MLP must end in the embedding dim ", impl->dim));
  }
  if (options.top_mlp.empty() || options.top_mlp.back() != 1) {
    return absl::InvalidArgumentError("model: the top MLP must end in one output");
  }
  std::vector<int64_t> batch_sizes = options.extra_batch_sizes;
  batch_sizes.push_back(options.batch_size);

  EmbeddingLayerOptions emb = options.embeddings;
  emb.threads = options.threads;
  CEMB_ASSIGN_OR_RETURN(impl->embeddings, EmbeddingLayer::Create(emb));
  CEMB_ASSIGN_OR_RETURN(impl->interaction, MakeInteraction(options));
  CEMB_ASSIGN_OR_RETURN(Mlps mlps, MakeMlps(options, impl->interaction->output_width(), impl->options.mlp_precision,
                                            impl->max_batch, batch_sizes));
  impl->bottom = std::move(mlps.bottom);
  impl->top = std::move(mlps.top);
  if (options.interaction == InteractionKind::kDcn) {
    CEMB_ASSIGN_OR_RETURN(impl->cross, CrossNetwork::Create({.width = impl->interaction->output_width(),
                                                             .layers = options.dcn_layers,
                                                             .rank = options.dcn_rank,
                                                             .max_batch = impl->max_batch,
                                                             .batch_sizes = batch_sizes,
                                                             .optimizer = options.dense_optimizer,
                                                             .precision = impl->options.mlp_precision,
                                                             .seed = options.seed + 2}));
  }
  const size_t m = static_cast<size_t>(impl->max_batch);
  auto floats = [](size_t count) { return internal::AlignedBuffer(count * sizeof(float)); };
  if (options.interaction == InteractionKind::kDot) {
    impl->emb = floats(m * impl->num_tables * impl->dim);
    impl->d_emb = floats(m * impl->num_tables * impl->dim);
  }
  impl->top_in = floats(m * impl->interaction->output_width());
  impl->d_top_in = floats(m * impl->interaction->output_width());
  impl->d_bottom = floats(m * impl->dim);
  impl->d_logits = floats(m);
  return std::unique_ptr<Dlrm>(new Dlrm(std::move(impl)));
}

absl::StatusOr<MlpTimings> Dlrm::TimeMlpPrecisions(const DlrmOptions& options) {
  CEMB_ASSIGN_OR_RETURN(Interaction interaction, MakeInteraction(options));
  const int64_t n = options.batch_size, top_in = interaction.output_width();
  // The dense layers of one precision: the MLPs, and with dcn the cross network.
  struct Dense {
    Mlps mlps;
    std::optional<CrossNetwork> cross;
  };
  auto make = [&](Precision precision) -> absl::StatusOr<Dense> {
    CEMB_ASSIGN_OR_RETURN(Mlps mlps, MakeMlps(options, top_in, precision, n, {}));
    Dense d{std::move(mlps), std::nullopt};
    if (options.interaction == InteractionKind::kDcn) {
      CEMB_ASSIGN_OR_RETURN(d.cross, CrossNetwork::Create({.width = top_in,
                                                           .layers = options.dcn_layers,
                                                           .rank = options.dcn_rank,
                                                           .max_batch = n,
                                                           .precision = precision,
                                                           .seed = options.seed + 2}));
    }
    return d;
  };
  CEMB_ASSIGN_OR_RETURN(Dense fp32, make(Precision::kFp32));
  CEMB_ASSIGN_OR_RETURN(Dense bf16, make(Precision::kBf16));
  // Inputs and output gradients of a plausible size (the values do not
  // change the time; the learning rate is 0, the weights stay as made).
  auto filled = [](int64_t count, float value) { return std::vector<float>(static_cast<size_t>(count), value); };
  const std::vector<float> dense = filled(n * options.num_dense, 0.5f), top_input = filled(n * top_in, 0.1f);
  const std::vector<float> d_bottom = filled(n * options.embeddings.dim, 1e-3f), d_logit = filled(n, 1e-3f);
  std::vector<float> d_top_input = filled(n * top_in, 0.f);
  auto step = [&](Dense& d) -> absl::StatusOr<double> {
    Mlps& m = d.mlps;
    const SteadyClock::time_point t0 = SteadyClock::now();
    CEMB_RETURN_IF_ERROR(m.bottom.Forward(n, dense.data()).status());
    const float* z = top_input.data();
    if (d.cross) {
      CEMB_ASSIGN_OR_RETURN(std::span<const float> x_l, d.cross->Forward(n, z));
      z = x_l.data();
    }
    CEMB_RETURN_IF_ERROR(m.top.Forward(n, z).status());
    CEMB_RETURN_IF_ERROR(m.top.Backward(n, d_logit.data(), d_top_input.data()));
    if (d.cross) CEMB_RETURN_IF_ERROR(d.cross->Backward(n, d_top_input.data(), d_top_input.data()));
    CEMB_RETURN_IF_ERROR(m.bottom.Backward(n, d_bottom.data(), nullptr));
    m.top.Update(0.f);
    if (d.cross) d.cross->Update(0.f);
    m.bottom.Update(0.f);
    return 1e3 * SecondsSince(t0);
  };
  constexpr int kRounds = 3;
  std::vector<double> ms[2];
  for (int round = -1; round < kRounds; ++round) {  // round -1: the warm-up
    for (int p = 0; p < 2; ++p) {
      CEMB_ASSIGN_OR_RETURN(const double t, step(p == 0 ? fp32 : bf16));
      if (round >= 0) ms[p].push_back(t);
    }
  }
  for (std::vector<double>& v : ms) std::sort(v.begin(), v.end());
  return MlpTimings{.fp32_ms = ms[0][kRounds / 2], .bf16_ms = ms[1][kRounds / 2]};
}

Dlrm::Dlrm(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Dlrm::~Dlrm() = default;

const DlrmOptions& Dlrm::options() const { return impl_->options; }
const MlpPrecisionChoice& Dlrm::mlp_precision_choice() const { return impl_->precision; }
EmbeddingLayer& Dlrm::embeddings() { return *impl_->embeddings; }
const Mlp& Dlrm::bottom_mlp() const { return *impl_->bottom; }
const Mlp& Dlrm::top_mlp() const { return *impl_->top; }
const CrossNetwork* Dlrm::cross_network() const { return impl_->cross ? &*impl_->cross : nullptr; }

absl::StatusOr<double> Dlrm::TrainStep(const BatchView& batch, float lr, PhaseTimes* times) {
  Impl& m = *impl_;
  LapSeconds watch;
  const int64_t n = batch.size;
  CEMB_ASSIGN_OR_RETURN(std::span<const float> logits, m.Forward(batch, times, watch));
  absl::Status local = static_cast<int64_t>(batch.labels.size()) == n
                           ? absl::OkStatus()
                           : absl::InvalidArgumentError(absl::StrCat(batch.labels.size(), " labels for ", n, " samples"));
  EmbeddingStep* step = m.StepOf(batch);
  double loss = 0;
  if (local.ok()) {
    // The mean over the global batch (several processes): the processes'
    // losses and gradients add up to the single process's.
    absl::StatusOr<double> l =
        BceWithLogits(logits, batch.labels, std::span<float>(m.d_logits.as<float>(), n), step->global_batch());
    loss = l.value_or(0);
    local = l.status();
    watch.Lap(PhaseSeconds(times, Phase::kTopForward));
  }
  if (local.ok()) local = m.Backward(n, times, watch);
  // The tables' gradients go to the step (to their owners, on several
  // processes, while the bottom MLP runs backward and the MLPs' gradients
  // are summed). A process whose step failed still makes every call
  // (FinishGradients returns the failure everywhere and no table is
  // updated).
  CEMB_RETURN_IF_ERROR(step->StartGradients(m.EmbGrad(n), times));
  watch.Skip();
  if (local.ok()) {
    local = m.bottom->Backward(n, m.d_bottom.as<float>(), nullptr, [step] { return step->Progress(); });
    watch.Lap(PhaseSeconds(times, Phase::kBottomBackward));
  }
  CEMB_RETURN_IF_ERROR(step->SumGradients(m.top->gradients(), times));
  CEMB_RETURN_IF_ERROR(step->SumGradients(m.bottom->gradients(), times));
  if (m.cross) CEMB_RETURN_IF_ERROR(step->SumGradients(m.cross->gradients(), times));
  CEMB_RETURN_IF_ERROR(step->SumLoss(&loss, times));
  watch.Skip();
  if (local.ok()) {
    m.DenseStep(lr);
    watch.Lap(PhaseSeconds(times, Phase::kMlpUpdate));
  }
  CEMB_RETURN_IF_ERROR(step->FinishGradients(local, *m.embeddings, batch, lr, times));
  watch.Skip();
  return loss;
}

absl::Status Dlrm::Predict(const BatchView& batch, std::span<float> probabilities, PhaseTimes* times) {
  LapSeconds watch;
  CEMB_ASSIGN_OR_RETURN(std::span<const float> logits, impl_->Forward(batch, times, watch));
  if (probabilities.size() < logits.size()) {
    return absl::InvalidArgumentError(absl::StrCat(probabilities.size(), " probabilities for ", logits.size(), " samples"));
  }
  Sigmoid(logits, probabilities.first(logits.size()));
  watch.Lap(PhaseSeconds(times, Phase::kTopForward));
  return absl::OkStatus();
}

absl::Status Dlrm::Impl::SaveDense(const std::string& dir, bool state) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create '", dir, "': ", ec.message()));
  for (auto [mlp, prefix] : {std::pair{&*bottom, kBottomPrefix}, std::pair{&*top, kTopPrefix}}) {
    CEMB_RETURN_IF_ERROR(mlp->SaveNpy(dir, prefix));
    if (state) CEMB_RETURN_IF_ERROR(mlp->optimizer().SaveNpy(dir, prefix, mlp->Parameters()));
  }
  if (!cross) return absl::OkStatus();
  CEMB_RETURN_IF_ERROR(cross->SaveNpy(dir, kCrossPrefix));
  return state ? cross->optimizer().SaveNpy(dir, kCrossPrefix, cross->Parameters()) : absl::OkStatus();
}

absl::Status Dlrm::Impl::LoadDense(const std::string& dir, bool state) {
  for (auto [mlp, prefix] : {std::pair{&*bottom, kBottomPrefix}, std::pair{&*top, kTopPrefix}}) {
    CEMB_RETURN_IF_ERROR(mlp->LoadNpy(dir, prefix));
    if (state) CEMB_RETURN_IF_ERROR(mlp->optimizer().LoadNpy(dir, prefix, mlp->Parameters()));
  }
  if (!cross) return absl::OkStatus();
  CEMB_RETURN_IF_ERROR(cross->LoadNpy(dir, kCrossPrefix));
  return state ? cross->optimizer().LoadNpy(dir, kCrossPrefix, cross->Parameters()) : absl::OkStatus();
}

absl::Status Dlrm::Save(const std::string& dir) {
  CEMB_RETURN_IF_ERROR(impl_->SaveDense(dir, /*state=*/true));
  return impl_->embeddings->Save(dir, kTablePrefix);
}

std::string Dlrm::TableFileName(int table, std::string_view extension) {
  return absl::StrCat(kTablePrefix, table, ".", absl::string_view(extension.data(), extension.size()));
}

int Dlrm::TableOfFile(std::string_view name) {
  const size_t slash = name.rfind('/');
  std::string_view base = slash == std::string_view::npos ? name : name.substr(slash + 1);
  if (!base.starts_with(kTablePrefix)) return -1;
  base.remove_prefix(std::string_view(kTablePrefix).size());
  // "<digits>.<ext>": the digits, then a dot.
  int t = -1;
  const char* const last = base.data() + base.size();
  const auto [end, error] = std::from_chars(base.data(), last, t);
  const bool digits_then_dot = error == std::errc() && end != base.data() && end != last && *end == '.';
  return digits_then_dot && t >= 0 ? t : -1;
}

absl::Status Dlrm::Load(const std::string& dir) {
  CEMB_RETURN_IF_ERROR(impl_->LoadDense(dir, /*state=*/true));
  return impl_->embeddings->Load(dir, kTablePrefix);
}

absl::Status Dlrm::ExportNpy(const std::string& dir) {
  CEMB_RETURN_IF_ERROR(impl_->SaveDense(dir, /*state=*/false));
  return impl_->embeddings->ExportNpy(dir, kTablePrefix);
}

absl::Status Dlrm::ImportNpy(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return absl::NotFoundError(absl::StrCat(dir, ": no such directory (the .npy files of a model)"));
  }
  CEMB_RETURN_IF_ERROR(impl_->LoadDense(dir, /*state=*/false));
  return impl_->embeddings->ImportNpy(dir, kTablePrefix);
}

struct DlrmForward::Impl {
  DlrmForwardOptions options;
  InteractionKind kind = InteractionKind::kDot;
  int64_t dim = 0, num_tables = 0;
  std::vector<int64_t> planned;  // sorted
  std::optional<Mlp> bottom, top;
  std::optional<Interaction> interaction;
  std::optional<CrossNetwork> cross;
  // As Dlrm::Impl's: the pooled rows (dot; concat and dcn write into
  // top_in's columns [dim, (T+1)*dim)) and the interaction's output.
  internal::AlignedBuffer emb, top_in;
};

absl::StatusOr<std::unique_ptr<DlrmForward>> Dlrm::MakeForward(const DlrmForwardOptions& options) const {
  const Impl& m = *impl_;
  if (options.max_batch <= 0) return absl::InvalidArgumentError("MakeForward: max_batch must be > 0");
  auto f = std::make_unique<DlrmForward::Impl>();
  f->options = options;
  f->kind = m.options.interaction;
  f->dim = m.dim;
  f->num_tables = m.num_tables;
  f->planned = options.batch_sizes;
  f->planned.push_back(options.max_batch);
  std::sort(f->planned.begin(), f->planned.end());
  f->planned.erase(std::unique(f->planned.begin(), f->planned.end()), f->planned.end());
  DlrmOptions o = m.options;
  o.threads = options.threads;
  CEMB_ASSIGN_OR_RETURN(f->interaction, MakeInteraction(o));
  CEMB_ASSIGN_OR_RETURN(Mlps mlps, MakeMlps(o, f->interaction->output_width(), m.options.mlp_precision,
                                            options.max_batch, options.batch_sizes));
  f->bottom = std::move(mlps.bottom);
  f->top = std::move(mlps.top);
  // The weights: each layer's copied out of the model's and into the copy's.
  for (auto [from, to] : {std::pair{&*m.bottom, &*f->bottom}, std::pair{&*m.top, &*f->top}}) {
    const std::vector<int64_t>& sizes = from->options().sizes;
    for (int l = 0; l < from->num_layers(); ++l) {
      std::vector<float> w(static_cast<size_t>(sizes[l] * sizes[l + 1])), b(static_cast<size_t>(sizes[l + 1]));
      CEMB_RETURN_IF_ERROR(from->GetWeight(l, w));
      CEMB_RETURN_IF_ERROR(to->SetWeight(l, w));
      CEMB_RETURN_IF_ERROR(from->GetBias(l, b));
      CEMB_RETURN_IF_ERROR(to->SetBias(l, b));
    }
  }
  if (m.cross) {
    CrossNetworkOptions co = m.cross->options();
    co.max_batch = options.max_batch;
    co.batch_sizes = options.batch_sizes;
    CEMB_ASSIGN_OR_RETURN(f->cross, CrossNetwork::Create(co));
    const std::vector<ParameterInfo> params = m.cross->Parameters();
    for (int i = 0; i < static_cast<int>(params.size()); ++i) {
      int64_t count = 1;
      for (int64_t s : params[i].shape) count *= s;
      std::vector<float> p(static_cast<size_t>(count));
      CEMB_RETURN_IF_ERROR(m.cross->GetParameter(i, p));
      CEMB_RETURN_IF_ERROR(f->cross->SetParameter(i, p));
    }
  }
  const size_t rows = static_cast<size_t>(options.max_batch);
  if (f->kind == InteractionKind::kDot) {
    f->emb = internal::AlignedBuffer(rows * f->num_tables * f->dim * sizeof(float));
  }
  f->top_in = internal::AlignedBuffer(rows * f->interaction->output_width() * sizeof(float));
  return std::unique_ptr<DlrmForward>(new DlrmForward(std::move(f)));
}

DlrmForward::DlrmForward(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DlrmForward::~DlrmForward() = default;
const DlrmForwardOptions& DlrmForward::options() const { return impl_->options; }

bool DlrmForward::planned(int64_t n) const {
  return std::binary_search(impl_->planned.begin(), impl_->planned.end(), n);
}

MatrixView DlrmForward::embeddings(int64_t n) const {
  const Impl& f = *impl_;
  const int64_t width = f.num_tables * f.dim;
  if (f.kind == InteractionKind::kDot) return Rows(f.emb, n, width);
  return {f.top_in.as<float>() + f.dim, n, width, width + f.dim};
}

absl::Status DlrmForward::Run(int64_t n, const float* dense, std::span<float> probabilities) {
  Impl& f = *impl_;
  if (!planned(n)) return absl::InvalidArgumentError(absl::StrCat("batch of ", n, " samples was not planned"));
  if (static_cast<int64_t>(probabilities.size()) < n) {
    return absl::InvalidArgumentError(absl::StrCat(probabilities.size(), " probabilities for ", n, " samples"));
  }
  CEMB_ASSIGN_OR_RETURN(std::span<const float> bottom_out, f.bottom->Forward(n, dense));
  CEMB_RETURN_IF_ERROR(f.interaction->Forward({bottom_out.data(), n, f.dim, f.dim}, embeddings(n),
                                              Rows(f.top_in, n, f.interaction->output_width())));
  const float* z = f.top_in.as<float>();
  if (f.cross) {
    CEMB_ASSIGN_OR_RETURN(std::span<const float> x_l, f.cross->Forward(n, z));
    z = x_l.data();
  }
  CEMB_ASSIGN_OR_RETURN(std::span<const float> logits, f.top->Forward(n, z));
  Sigmoid(logits, probabilities.first(static_cast<size_t>(n)));
  return absl::OkStatus();
}

}  // namespace cemb::dlrm
