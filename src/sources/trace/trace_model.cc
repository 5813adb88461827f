#include "sources/trace/trace_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <memory>

#include "base/size_math.h"
#include "graph/device_rules.h"
#include "graph/dtype.h"
#include "lower/optimizer_step.h"

namespace trainfit {
namespace {

constexpr std::string_view kMismatchHint =
    "the model's ops depend on its data or on the batch size, which a trace cannot "
    "extrapolate; trace with inputs that take the same path, or estimate at a traced batch";

std::string describe(const Trace& t, const TraceRun& run, size_t i) {
  const TraceEvent& e = run.events[i];
  std::string what = e.alloc ? fmt::format("an allocation of {} bytes", e.bytes) : "a free";
  if (e.op >= 0) what += fmt::format(" by {}", t.ops[e.op]);
  if (e.module >= 0) what += fmt::format(" in {}", t.modules[e.module]);
  // Events count iterations from 0; the trace and the message from 1.
  const std::string when =
      e.phase == Phase::kSetup
          ? std::string("setup")
          : fmt::format("{} of iteration {}", phase_name(e.phase), e.iteration + 1);
  if (!e.alloc) return fmt::format("{} ({})", what, when);
  return fmt::format("{} ({}, {})", what, when, category_name(e.category));
}

bool same_event(const TraceEvent& a, const TraceEvent& b) {
  return a.alloc == b.alloc && a.buffer == b.buffer && a.category == b.category &&
         a.phase == b.phase && a.iteration == b.iteration && a.op == b.op && a.module == b.module &&
         a.param == b.param && a.dtype == b.dtype && a.dropout_noise == b.dropout_noise &&
         a.sums == b.sums && a.conv_role == b.conv_role && a.attention_role == b.attention_role &&
         (a.reduce >= 0) == (b.reduce >= 0);
}

// A shape held by the record (a convolution, a sum, an attention core) of the base run's event
// `i`, at `batch`: fitted as affine in the batch from the same record in the first two runs.
template <typename Record>
std::optional<Dims> record_shape(const Trace& t, size_t i, int64_t batch,
                                 std::vector<Record> TraceRun::*records, int32_t TraceEvent::*index,
                                 Dims Record::*shape) {
  const TraceRun& base = t.runs[0];
  const Record& first = (base.*records)[static_cast<size_t>(base.events[i].*index)];
  if (t.runs.size() < 2) return affine_dims(first.*shape, base.batch, nullptr, base.batch, batch);
  const TraceRun& run = t.runs[1];
  const Record& second = (run.*records)[static_cast<size_t>(run.events[i].*index)];
  return affine_dims(first.*shape, base.batch, &(second.*shape), run.batch, batch);
}

// Note [Reductions' staging] for the sum that made allocation `i` of the base run, at `batch`:
// its input fitted as affine in the batch from the first two runs.
Result<ReduceScratch> reduce_scratch(const Trace& t, size_t i, int64_t batch,
                                     const KernelTarget& target) {
  const TraceRun& base = t.runs[0];
  const TraceEvent& e = base.events[i];
  const TraceReduce& r = base.reduces[static_cast<size_t>(e.reduce)];
  const std::optional<Dims> in =
      record_shape(t, i, batch, &TraceRun::reduces, &TraceEvent::reduce, &TraceReduce::input);
  if (!in) {
    return invalid_argument(
        fmt::format("the sum that made event {} does not grow with the batch in whole sizes, so "
                    "its staging at batch {} is unknown",
                    i, batch),
        std::string(kMismatchHint));
  }
  ReduceProblem p;
  bool trailing = true;  // the summed dims are the innermost ones
  for (size_t d = 0; d < in->size(); ++d) {
    const bool summed = std::find(r.dims.begin(), r.dims.end(), d) != r.dims.end();
    (summed ? p.inputs_per_output : p.outputs) *= (*in)[d];
    if (!summed && d >= in->size() - r.dims.size()) trailing = false;
  }
  p.contiguous_inputs = r.contiguous && trailing;
  const int64_t itemsize = e.dtype >= 0 ? dtype_itemsize(t.dtypes[e.dtype]) : 0;
  p.itemsize = itemsize > 0 ? itemsize : 4;
  p.sm_count = target.sm_count;
  p.sm = target.sm;
  return cuda_reduce_scratch(p);
}

// The convolution that made allocation `i` of the base run, at `batch`: its input and output
// shapes fitted as affine in the batch from the first two runs, as cuDNN sees it.
Result<ConvProblem> conv_problem(const Trace& t, size_t i, int64_t batch) {
  const TraceRun& base = t.runs[0];
  const TraceEvent& e = base.events[i];
  const TraceConv& c = base.convs[static_cast<size_t>(e.conv)];
  const std::optional<Dims> in =
      record_shape(t, i, batch, &TraceRun::convs, &TraceEvent::conv, &TraceConv::input);
  const std::optional<Dims> out =
      record_shape(t, i, batch, &TraceRun::convs, &TraceEvent::conv, &TraceConv::output);
  if (!in || !out) {
    return invalid_argument(
        fmt::format("the convolution that made event {} does not grow with the batch in whole "
                    "sizes, so its workspace at batch {} is unknown",
                    i, batch),
        std::string(kMismatchHint));
  }
  // A transposed convolution is cuDNN's backward-data of the convolution whose input is its
  // output.
  const Dims& x = c.transposed ? *out : *in;
  const Dims& y = c.transposed ? *in : *out;
  ConvProblem p;
  p.batch = (*in)[0];
  p.in_channels = x[1];
  p.out_channels = y[1];
  p.groups = c.groups;
  p.in_spatial = Dims(x.begin() + 2, x.end());
  p.out_spatial = Dims(y.begin() + 2, y.end());
  p.kernel = Dims(c.weight.begin() + 2, c.weight.end());
  p.stride = c.stride;
  p.padding = c.padding;
  p.dilation = c.dilation;
  const int64_t itemsize = e.dtype >= 0 ? dtype_itemsize(t.dtypes[e.dtype]) : 0;
  p.itemsize = itemsize > 0 ? itemsize : 4;
  const std::optional<DType> dtype =
      e.dtype >= 0 ? parse_dtype(t.dtypes[e.dtype]) : std::optional<DType>();
  p.dtype = dtype.value_or(p.itemsize == 2 ? DType::kFloat16 : DType::kFloat32);
  p.memory_format = c.channels_last ? MemoryFormat::kChannelsLast : MemoryFormat::kChannelsFirst;
  return p;
}

// The cuDNN workspace of the kernel that fills a convolution's allocation (Note [cuDNN
// convolution workspaces]): forward for the output, backward-data for the input's gradient,
// backward-filter for the weight's, the first two exchanged for a transposed convolution.
struct SizedWorkspace {
  int64_t bytes = 0;
  WorkspaceFigure figure;
};
Result<SizedWorkspace> conv_workspace(const Trace& t, size_t i, int64_t batch,
                                      const KernelTarget& target) {
  const TraceEvent& e = t.runs[0].events[i];
  TF_ASSIGN_OR_RETURN(const ConvProblem p, conv_problem(t, i, batch));
  const ConvWorkspaces ws = cudnn_conv_workspaces(p, target.sm);
  const bool transposed = t.runs[0].convs[static_cast<size_t>(e.conv)].transposed;
  int direction = -1;
  switch (e.conv_role) {
    case ConvRole::kOutput:
      direction = transposed ? 1 : 0;
      break;
    case ConvRole::kGradInput:
      direction = transposed ? 0 : 1;
      break;
    case ConvRole::kGradWeight:
      direction = 2;
      break;
    case ConvRole::kGradBias:
    case ConvRole::kAbsent:
      break;
  }
  if (direction < 0) return SizedWorkspace{};
  const auto d = static_cast<size_t>(direction);
  return SizedWorkspace{ws.bytes(direction), WorkspaceFigure{ws.source[d], ws.bound[d]}};
}

// Note [Fused attention in a 1.13 trace]
//  PyTorch 1.13 runs the core of nn.MultiheadAttention op by op even when no weights are asked
//  for: q_scaled = q / sqrt(E), the (B*H, L, S) scores, softmax, dropout, @ v, each kept for
//  backward. 2.x calls scaled_dot_product_attention there, which on CUDA is one fused kernel
//  (device_rules.h, Note [Fused attention]). The tracer marks each such core (its first
//  allocation, its output, the q, k and v it read, where its backward starts and the gradients
//  of q, k and v), and a CUDA replay puts the fused kernel's memory in its place: of the core's
//  forward allocations only the output is made, with the fp32 logsumexp beside it; of its
//  backward's only the three gradients, then the kernel's scratch; q, k, v and the output stay
//  until the core's backward is done, as the kernel keeps them, and go with the logsumexp then.
struct FusedCore {
  size_t backward_end = 0;  // the event of its last gradient's allocation (base run)
  FusedAttentionBytes bytes;
  std::vector<int32_t> held;  // trace buffers whose frees wait for backward_end
  BufferId logsumexp = kNone;
};

struct FusedReplay {
  IdVector<bool> dropped;   // trace buffers the fused kernels never allocate
  IdVector<bool> deferred;  // trace buffers freed at their core's backward_end instead
  std::vector<FusedCore> cores;
  std::map<size_t, size_t> at_output, at_end;  // event -> core
};

// The marked attention cores of the base run that a CUDA replay fuses at `batch`.
Result<FusedReplay> plan_fused_attention(const Trace& t, int64_t batch,
                                         const KernelTarget& target) {
  const TraceRun& base = t.runs[0];
  FusedReplay plan;
  plan.dropped.assign(static_cast<size_t>(base.allocations), false);
  plan.deferred.assign(static_cast<size_t>(base.allocations), false);
  if (base.attentions.empty() || target.device != Device::kCuda ||
      target.torch != TorchVersion::k2) {
    return plan;
  }
  const size_t n = base.events.size();
  IdVector<size_t> freed_at(static_cast<size_t>(base.allocations), n);
  for (size_t i = 0; i < n; ++i) {
    if (!base.events[i].alloc) freed_at[base.events[i].buffer] = i;
  }
  for (size_t i = 0; i < n; ++i) {
    const TraceEvent& e = base.events[i];
    if (!e.alloc || e.attention_role != AttentionRole::kOutput) continue;
    const TraceAttention& core = base.attentions[static_cast<size_t>(e.attention)];
    if (core.backward_from < 0) continue;  // no backward: replayed as traced
    // Its gradients: one of each after the backward starts.
    std::vector<size_t> grads;
    for (size_t j = static_cast<size_t>(core.backward_from); j < n; ++j) {
      const TraceEvent& g = base.events[j];
      if (g.alloc && g.attention == e.attention && g.attention_role != AttentionRole::kOutput) {
        grads.push_back(j);
      }
    }
    if (grads.size() != 3) continue;
    // q and v at `batch`, fitted from the first two runs as a convolution's shapes are.
    const auto at_batch = [&](Dims TraceAttention::*shape) {
      return record_shape(t, i, batch, &TraceRun::attentions, &TraceEvent::attention, shape);
    };
    const std::optional<Dims> q = at_batch(&TraceAttention::q_shape);
    const std::optional<Dims> v = at_batch(&TraceAttention::v_shape);
    if (!q || !v) {
      return invalid_argument(
          fmt::format("the attention whose output is event {} does not grow with the batch in "
                      "whole sizes, so its fused kernel at batch {} is unknown",
                      i, batch),
          std::string(kMismatchHint));
    }
    int64_t rows = 1;
    for (size_t d = 0; d + 2 < q->size(); ++d) rows *= (*q)[d];
    const int64_t queries = (*q)[q->size() - 2];
    const int64_t head_dim = q->back();
    const DType dtype =
        e.dtype >= 0 ? parse_dtype(t.dtypes[e.dtype]).value_or(DType::kFloat32) : DType::kFloat32;
    // The trace gives no dropout probability; the backend is chosen as without one. (cuDNN's
    // output takes q's layout, which can spare a later copy; the replay keeps the trace's.)
    const SdpaBackend backend = cuda_sdpa_backend({.dtype = dtype,
                                                   .mask = core.mask,
                                                   .head_dim = head_dim,
                                                   .value_dim = v->back(),
                                                   .keys = (*v)[v->size() - 2],
                                                   .sm = target.sm});
    if (backend == SdpaBackend::kMath) continue;  // 2.x runs it op by op too
    FusedCore fused;
    fused.backward_end = grads.back();
    fused.bytes = fused_attention_bytes(backend, {.rows = rows,
                                                  .queries = queries,
                                                  .keys = (*v)[v->size() - 2],
                                                  .head_dim = head_dim,
                                                  .value_dim = v->back(),
                                                  .dtype = dtype,
                                                  .sm = target.sm});
    // Forward: only the output; backward: only the gradients.
    for (int32_t b = core.first; b < e.buffer; ++b) plan.dropped[b] = true;
    for (size_t j = static_cast<size_t>(core.backward_from); j < fused.backward_end; ++j) {
      const TraceEvent& x = base.events[j];
      if (x.alloc && std::find(grads.begin(), grads.end(), j) == grads.end()) {
        plan.dropped[x.buffer] = true;
      }
    }
    for (const int32_t b : {core.q, core.k, core.v, e.buffer}) {
      if (freed_at[b] < fused.backward_end && !plan.dropped[b] && !plan.deferred[b]) {
        plan.deferred[b] = true;
        fused.held.push_back(b);
      }
    }
    plan.at_output.emplace(i, plan.cores.size());
    plan.at_end.emplace(fused.backward_end, plan.cores.size());
    plan.cores.push_back(std::move(fused));
  }
  return plan;
}

// Appends the optimizer step's buffers and events to an event list.
class ListSink : public EventSink {
 public:
  ListSink(EventList& list, uint8_t iteration) : list_(list), iteration_(iteration) {}
  int32_t alloc(int64_t bytes, Category category, bool host, int32_t param) override {
    return list_.add_alloc({.bytes = bytes, .category = category, .host = host, .param = param},
                           Phase::kOptimizer, iteration_, kNone);
  }
  void release(int32_t buffer) override {
    list_.events.push_back({buffer, false, Phase::kOptimizer, iteration_, kNone});
  }

 private:
  EventList& list_;
  uint8_t iteration_;
};

// The module of `path` in the tree, added with the containers above it when new.
ModuleId add_module(Graph& tree, std::map<std::string, ModuleId, std::less<>>& ids,
                    const std::string& path) {
  if (auto it = ids.find(path); it != ids.end()) return it->second;
  const size_t dot = path.rfind('.');
  const ModuleId parent =
      add_module(tree, ids, dot == std::string::npos ? std::string() : path.substr(0, dot));
  Module module;
  module.path = path;
  module.name = dot == std::string::npos ? path : path.substr(dot + 1);
  module.parent = parent;
  module.depth = tree.modules[parent].depth + 1;
  tree.modules.push_back(std::move(module));
  const auto id = static_cast<ModuleId>(tree.modules.size() - 1);
  ids.emplace(path, id);
  return id;
}

// The first event where the runs differ, as an error; ok when they line up.
Status line_up(const Trace& trace) {
  const TraceRun& base = trace.runs[0];
  const size_t n = base.events.size();
  for (size_t r = 1; r < trace.runs.size(); ++r) {
    const TraceRun& run = trace.runs[r];
    const size_t common = std::min(n, run.events.size());
    for (size_t i = 0; i <= common; ++i) {
      if (i < common && same_event(base.events[i], run.events[i])) continue;
      if (i == common && n == run.events.size()) break;
      const std::string a = i < n ? describe(trace, base, i) : "the end of the run";
      const std::string b = i < run.events.size() ? describe(trace, run, i) : "the end of the run";
      std::string hint;
      if (base.batch == 1) {
        hint =
            "at batch 1 PyTorch can skip copies that larger batches make (a size-1 dimension "
            "keeps a transposed tensor contiguous); trace at 2 and 3 (--batch-sizes 2,3, the "
            "default) or else ";
      }
      hint += kMismatchHint;
      return invalid_argument(
          fmt::format("the traces at batch {} and {} do not line up: event {} is {} at batch {} "
                      "but {} at batch {}",
                      base.batch, run.batch, i, a, base.batch, b, run.batch),
          hint);
    }
  }
  return {};
}

}  // namespace

std::optional<Dims> affine_dims(const Dims& first, int64_t first_batch, const Dims* second,
                                int64_t second_batch, int64_t batch) {
  if (second == nullptr || second_batch == first_batch) {
    return batch == first_batch ? std::optional<Dims>(first) : std::nullopt;
  }
  if (second->size() != first.size()) return std::nullopt;
  const int64_t apart = second_batch - first_batch;
  Dims shape;
  for (size_t i = 0; i < first.size(); ++i) {
    const int64_t rise = (*second)[i] - first[i];
    if (rise % apart != 0) return std::nullopt;
    const std::optional<int64_t> grown = checked_mul(rise / apart, batch - first_batch);
    const std::optional<int64_t> size = grown ? checked_add(first[i], *grown) : grown;
    if (!size || *size < 0) return std::nullopt;
    shape.push_back(*size);
  }
  return shape;
}

int64_t elements(const TraceParam& p) {
  return p.itemsize > 0 ? p.bytes / p.itemsize : p.bytes;
}

std::vector<BlockItem> kept_items(const EventList& list, int64_t sign) {
  std::vector<BlockItem> kept;
  for (const Event& e : list.events) {
    if (e.phase == Phase::kBackward) break;
    const Buffer& b = list.buffers[e.buffer];
    if (b.category != Category::kActivation) continue;
    kept.push_back({.module = b.module, .kept_bytes = (e.alloc ? sign : -sign) * b.bytes});
  }
  return kept;
}

Result<TraceModel> fit_trace(Trace trace) {
  if (trace.runs.empty()) {
    return invalid_argument("the trace has no runs", "trace at two batch sizes, e.g. 1 and 2");
  }
  if (Status aligned = line_up(trace); !aligned.ok()) {
    // Batch 1 is special (see the hint); with two larger runs that agree, fit those.
    if (trace.runs.size() < 3 || trace.runs[0].batch != 1) return aligned;
    Trace rest = trace;
    rest.runs.erase(rest.runs.begin());
    if (!line_up(rest).ok()) return aligned;
    trace = std::move(rest);
  }
  TraceModel m;
  const TraceRun& base = trace.runs[0];
  const size_t n = base.events.size();
  m.intercept.assign(n, 0);
  m.slope.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const TraceEvent& e = base.events[i];
    if (!e.alloc) continue;
    if (trace.runs.size() == 1) {
      m.intercept[i] = e.bytes;
      continue;
    }
    const TraceRun& second = trace.runs[1];
    const int64_t rise = second.events[i].bytes - e.bytes;
    const int64_t apart = second.batch - base.batch;
    const auto not_affine = [&](const std::string& why) {
      std::string sizes;
      for (const TraceRun& r : trace.runs) {
        sizes += fmt::format("{}{} bytes at batch {}", sizes.empty() ? "" : ", ", r.events[i].bytes,
                             r.batch);
      }
      return invalid_argument(
          fmt::format("{} is not affine in the batch size ({}): {}", describe(trace, base, i),
                      sizes, why),
          "a size that grows faster than the batch (batch x batch) cannot be extrapolated; "
          "trace at three or more batch sizes to check, or estimate at a traced batch");
    };
    if (rise < 0) return not_affine("it shrinks as the batch grows");
    if (rise % apart != 0) return not_affine("it does not grow by whole bytes per sample");
    const int64_t slope = rise / apart;
    const int64_t intercept = e.bytes - slope * base.batch;
    for (size_t r = 2; r < trace.runs.size(); ++r) {
      const TraceRun& other = trace.runs[r];
      const std::optional<int64_t> grown = checked_mul(slope, other.batch);
      const std::optional<int64_t> predicted = grown ? checked_add(intercept, *grown) : grown;
      if (!predicted || *predicted != other.events[i].bytes) {
        return not_affine("the sizes do not lie on one line");
      }
    }
    if (intercept < 0 && trace.runs.size() == 2) {
      return not_affine(
          "it would be negative at batch 0, so it likely grows faster than the batch");
    }
    m.intercept[i] = intercept;
    m.slope[i] = slope;
  }
  for (const TraceParam& p : trace.params) {
    if (p.buffer) continue;
    const int64_t numel = elements(p);
    m.parameters += numel;
    if (p.trainable) m.trainable_parameters += numel;
  }
  Module root;
  root.name = trace.model;
  m.tree.modules.push_back(std::move(root));
  std::map<std::string, ModuleId, std::less<>> ids{{"", 0}};
  for (const std::string& path : trace.modules)
    m.module_of.push_back(add_module(m.tree, ids, path));
  // A parameter's module: the nearest enclosing one the trace saw ("layer1.0.conv1.weight" ->
  // layer1.0.conv1), else the model.
  for (const TraceParam& p : trace.params) {
    std::string_view path = p.name;
    ModuleId module = 0;
    for (size_t dot = path.rfind('.'); dot != std::string_view::npos; dot = path.rfind('.')) {
      path = path.substr(0, dot);
      if (auto it = ids.find(path); it != ids.end()) {
        module = it->second;
        break;
      }
    }
    m.param_module.push_back(module);
  }
  m.trace = std::move(trace);
  return m;
}

Result<std::shared_ptr<const TraceModel>> load_trace(std::string_view text,
                                                     std::string_view source) {
  TF_ASSIGN_OR_RETURN(Trace trace, parse_trace(text, source));
  Result<TraceModel> model = fit_trace(std::move(trace));
  if (!model.ok()) return model.status().with_context(std::string(source));
  return std::make_shared<const TraceModel>(std::move(model).value());
}

ModuleId tree_module(const TraceModel& m, const TraceEvent& e) {
  return e.module >= 0 ? m.module_of[e.module] : kNone;
}

Result<EventList> trace_events(const TraceModel& m, int64_t batch, const EstimateOptions& options) {
  const Trace& t = m.trace;
  const TraceRun& base = t.runs[0];
  if (t.runs.size() == 1 && batch != base.batch) {
    return invalid_argument(
        fmt::format("the trace has one run, at batch {}; it cannot say what batch {} needs",
                    base.batch, batch),
        "trace at two batch sizes (batch_sizes=(2, 3)) to estimate any batch");
  }
  const KernelTarget target = options.device.target;
  const bool cuda = target.device == Device::kCuda;
  const bool workspaces = kernels_take_workspaces(target);
  OptimizerImpl impl = options.training.optimizer.impl;
  if (impl == OptimizerImpl::kDefault && t.optimizer.impl != OptimizerImpl::kLoop) {
    impl = t.optimizer.impl;  // the user's script asked for it
  }
  const bool restep = t.optimizer.kind.has_value() &&
                      (cuda || (impl != OptimizerImpl::kDefault && impl != t.optimizer.impl));
  if (!t.optimizer.kind && options.training.optimizer.impl != OptimizerImpl::kDefault) {
    return unsupported(fmt::format("the traced optimizer {} is not one trainfit models, so its "
                                   "implementation cannot be changed",
                                   t.optimizer.type),
                       "leave out --optimizer-impl to replay the traced step");
  }

  const bool scaler = options.training.trace_grad_scaler;
  if (scaler && !restep) {
    return unsupported(fmt::format("GradScaler's step is modelled for trainfit's optimizers, and "
                                   "the traced {} is not one",
                                   t.optimizer.type),
                       "estimate under --precision amp-bf16, or trace with SGD, Adam or AdamW");
  }

  // The optimizer step, generated for the requested implementation.
  OptimizerStep step;
  step.grad_scaler = scaler;
  if (restep) {
    step.optimizer.kind = *t.optimizer.kind;
    step.optimizer.impl = impl;
    if (!t.optimizer.groups.empty())
      step.optimizer.weight_decay = t.optimizer.groups[0].weight_decay;
    step.target = target;
    IdVector<bool> has_grad(t.params.size(), false);
    for (const TraceEvent& e : base.events) {
      if (e.alloc && e.category == Category::kGradient && e.param >= 0) {
        has_grad[e.param] = true;
      }
    }
    for (size_t g = 0; g < t.optimizer.groups.size(); ++g) {
      for (int32_t p : t.optimizer.groups[g].params) {
        const TraceParam& param = t.params[p];
        if (!has_grad[p]) continue;
        step.params.push_back({p, param.bytes, static_cast<int>(g),
                               param.itemsize > 0 ? param.bytes / param.itemsize : param.bytes});
      }
    }
  }

  EventList list;
  list.buffers.reserve(static_cast<size_t>(base.allocations) + 64);
  list.events.reserve(base.events.size() + 64);
  IdVector<BufferId> buffer_of(static_cast<size_t>(base.allocations), -1);
  IdVector<bool> added_into(static_cast<size_t>(base.allocations), false);
  CublasHandles cublas;
  // GradScaler (grad_scaler.py): scale(loss) makes _scale and _growth_tracker on first use and a
  // scaled loss (one fp32 element) that backward starts from and that goes when backward is done.
  BufferId scaled_loss = kNone;
  int scaled = 0;  // iterations whose loss has been scaled
  const auto scale_loss = [&](uint8_t iteration) {
    const auto scalar = [&](Category category) {
      return list.add_alloc({.bytes = 4, .category = category}, Phase::kForward, iteration, kNone);
    };
    if (scaled++ == 0) {
      scalar(Category::kOptimizerState);  // _scale
      scalar(Category::kOptimizerState);  // _growth_tracker
    }
    scaled_loss = scalar(Category::kTemporary);
  };
  const auto unscaled = [&](Phase phase, uint8_t iteration) {
    if (scaled_loss == kNone) return;
    list.events.push_back({scaled_loss, false, phase, iteration, kNone});
    scaled_loss = kNone;
  };
  TF_ASSIGN_OR_RETURN(FusedReplay fused, plan_fused_attention(t, batch, target));
  int stepped = 0;  // iterations whose step has been generated
  bool stepped_once = false;
  const auto emit_step = [&](int up_to) {
    for (; stepped < up_to; ++stepped) {
      const auto iteration = static_cast<uint8_t>(stepped);
      unscaled(Phase::kOptimizer, iteration);
      step.skipped = scaler && stepped < options.training.grad_scaler_skips;
      step.first_step = !step.skipped && !stepped_once;
      stepped_once = stepped_once || !step.skipped;
      ListSink sink(list, iteration);
      lower_optimizer_step(step, sink);
    }
  };
  for (size_t i = 0; i < base.events.size(); ++i) {
    const TraceEvent& e = base.events[i];
    if (restep) {
      // A step runs when its iteration's optimizer phase starts (or, with no events there,
      // before the next iteration begins).
      if (e.phase == Phase::kOptimizer) emit_step(e.iteration + 1);
      if (e.phase == Phase::kForward) emit_step(e.iteration);
    }
    if (scaler && e.phase == Phase::kBackward && scaled == e.iteration) scale_loss(e.iteration);
    const auto node = static_cast<NodeId>(i);
    if (e.alloc ? fused.dropped[e.buffer] : fused.deferred[e.buffer]) continue;
    if (!e.alloc) {
      const BufferId b = buffer_of[e.buffer];
      if (b >= 0 && !added_into[e.buffer]) {
        list.events.push_back({b, false, e.phase, e.iteration, node});
      }
      continue;
    }
    if (e.sums >= 0 && buffer_of[e.sums] >= 0) {
      // 1.13 made a new tensor for old + new; the input buffer held the last reference to the
      // old one when it is freed right after the sum is made (before the next allocation).
      bool last_reference = false;
      for (size_t j = i + 1; j < base.events.size() && !base.events[j].alloc; ++j) {
        last_reference = last_reference || base.events[j].buffer == e.sums;
      }
      if (adds_gradient_in_place(target, last_reference)) {
        buffer_of[e.buffer] = buffer_of[e.sums];
        added_into[e.sums] = true;
        continue;
      }
    }
    if (restep && e.phase == Phase::kOptimizer) continue;  // replaced by the generated step
    const std::optional<int64_t> grown = checked_mul(m.slope[i], batch);
    std::optional<int64_t> bytes = grown ? checked_add(m.intercept[i], *grown) : std::nullopt;
    if (!bytes) {
      return out_of_range(fmt::format("at batch {} an allocation's size overflows", batch),
                          "use a smaller --batch");
    }
    if (*bytes < 0) {
      return invalid_argument(
          fmt::format("at batch {} an allocation's size would be negative", batch),
          "estimate at a batch between the traced ones or above");
    }
    if (e.dropout_noise && e.dtype >= 0) {
      *bytes = dropout_kept_bytes(target, *bytes, dtype_itemsize(t.dtypes[e.dtype]));
    }
    if (*bytes > 0) {
      // What a fused attention kernel keeps for its backward is an activation, whatever 1.13
      // did with it (Note [Fused attention in a 1.13 trace]).
      const Category category = fused.deferred[e.buffer] ? Category::kActivation : e.category;
      buffer_of[e.buffer] = list.add_alloc({.bytes = *bytes,
                                            .category = category,
                                            .node = node,
                                            .module = tree_module(m, e),
                                            .param = e.param},
                                           e.phase, e.iteration, node);
    }
    // The kernel runs once its output exists: a library handle's first use takes its
    // workspace, then the call its own (device_rules.h).
    const auto workspace = [&](int64_t size) {
      return list.add_alloc({.bytes = size,
                             .category = Category::kWorkspace,
                             .node = node,
                             .module = tree_module(m, e)},
                            e.phase, e.iteration, node);
    };
    const bool backward = e.phase == Phase::kBackward;
    if (e.op >= 0 && e.phase != Phase::kOptimizer && workspaces &&
        aten_op_uses_cublas(t.ops[e.op])) {
      if (options.device.cublas_workspace_bytes > 0 &&
          cublas.creates_handle(target, /*autograd_thread=*/backward)) {
        workspace(options.device.cublas_workspace_bytes);
      }
      // Note [cuBLASLt's workspace]: addmm's bias epilogue, on the forward thread.
      if (!backward && t.ops[e.op] == "aten::addmm" && cublas.creates_lt_handle(target)) {
        workspace(cublaslt_workspace_bytes());
      }
    }
    if (workspaces && e.conv_role != ConvRole::kAbsent) {
      TF_ASSIGN_OR_RETURN(const SizedWorkspace ws, conv_workspace(t, i, batch, target));
      const FigureSource source = ws.figure.source;
      if (source != FigureSource::kDerived && e.iteration == 0) {
        ++list.workspace_sources[static_cast<size_t>(source)];
      }
      const int64_t bound = is_unmeasured(source) ? std::max(ws.bytes, ws.figure.bound_bytes) : -1;
      if (ws.bytes > 0 || bound > 0) {
        const BufferId b = workspace(ws.bytes);
        list.buffers[b].source = source;
        list.buffers[b].bound_bytes = bound;
        list.events.push_back({b, false, e.phase, e.iteration, node});
      }
    }
    const auto release = [&](BufferId b) {
      if (b >= 0) list.events.push_back({b, false, e.phase, e.iteration, node});
    };
    if (workspaces && e.reduce >= 0) {
      TF_ASSIGN_OR_RETURN(const ReduceScratch scratch, reduce_scratch(t, i, batch, target));
      if (scratch.buffer > 0) {
        const BufferId staged = workspace(scratch.buffer);
        if (scratch.semaphores > 0) release(workspace(scratch.semaphores));
        release(staged);
      }
    }
    // Note [Fused attention in a 1.13 trace]
    if (const auto it = fused.at_output.find(i); it != fused.at_output.end()) {
      FusedCore& core = fused.cores[it->second];
      core.logsumexp = list.add_alloc({.bytes = core.bytes.logsumexp,
                                       .category = Category::kActivation,
                                       .node = node,
                                       .module = tree_module(m, e)},
                                      e.phase, e.iteration, node);
      if (core.bytes.forward_workspace > 0) release(workspace(core.bytes.forward_workspace));
    }
    if (const auto it = fused.at_end.find(i); it != fused.at_end.end()) {
      const FusedCore& core = fused.cores[it->second];
      if (core.bytes.backward_workspace > 0) release(workspace(core.bytes.backward_workspace));
      for (const BufferId b : play_steps(
               std::span<const MemoryStep>(core.bytes.backward_steps), BufferId{kNone},
               [](int64_t) {}, workspace, release)) {
        release(b);
      }
      release(core.logsumexp);
      for (const int32_t b : core.held) release(buffer_of[b]);
    }
  }
  if (restep) emit_step(base.iterations);
  return list;
}

EventNames trace_names(const TraceModel& m) {
  const Trace& t = m.trace;
  const TraceRun& base = t.runs[0];
  EventNames names;
  names.op = [&](NodeId n) {
    const int32_t op = base.events[n].op;
    return op >= 0 ? t.ops[op] : std::string();
  };
  names.node_module = [&](NodeId n) { return tree_module(m, base.events[n]); };
  names.module = [&](ModuleId id) {
    const Module& module = m.tree.modules[id];
    return module.path.empty() ? module.name : module.path;
  };
  names.param = [&](int32_t p) { return t.params[p].name; };
  names.blocks = module_blocks(m.tree);
  return names;
}

Result<Estimate> estimate_trace(const TraceModel& m, int64_t batch,
                                const EstimateOptions& options) {
  TF_ASSIGN_OR_RETURN(const EventList list, trace_events(m, batch, options));
  Estimate facts;
  facts.parameters = m.parameters;
  facts.trainable_parameters = m.trainable_parameters;
  for (const BlockItem& k : kept_items(list, 1)) facts.activation_bytes += k.kept_bytes;
  const EventNames names = trace_names(m);
  TF_ASSIGN_OR_RETURN(Estimate e, estimate_events(list, names, std::move(facts), options));
  TF_RETURN_IF_ERROR(add_workspace_bound(e, list, names, options));
  return e;
}

Result<BlockFigures> per_sample_blocks(const TraceModel& m, const EstimateOptions& options) {
  std::vector<BlockItem> items;
  for (size_t i = 0; i < m.trace.params.size(); ++i) {
    const TraceParam& p = m.trace.params[i];
    if (!p.buffer) items.push_back({.module = m.param_module[i], .parameters = elements(p)});
  }
  // What one more sample keeps: the traced batch and one more, as the zoo's batch 1 and 2.
  const int64_t batch = m.trace.runs[0].batch;
  for (const int64_t b : {batch, batch + 1}) {
    TF_ASSIGN_OR_RETURN(const EventList list, trace_events(m, b, options));
    std::vector<BlockItem> kept = kept_items(list, b == batch ? -1 : 1);
    items.insert(items.end(), kept.begin(), kept.end());
  }
  BlockFigures figures = block_figures(m.tree, items);
  figures.attention_known = false;
  return figures;
}

std::vector<std::string> trace_notes(const TraceModel& m, const KernelTarget& target) {
  std::vector<std::string> notes;
  // A softmax outside the loss (log_softmax) is attention's, which PyTorch 2.x fuses on CUDA
  // where 1.x runs it op by op. The cores the tracer marked are replayed fused (Note [Fused
  // attention in a 1.13 trace]); others show the path of the PyTorch that made the trace.
  const Trace& t = m.trace;
  const TraceRun& base = t.runs[0];
  std::vector<std::pair<int32_t, int32_t>> cores;  // [first, output] buffers of marked cores
  for (const TraceEvent& e : base.events) {
    if (e.alloc && e.attention_role == AttentionRole::kOutput) {
      cores.emplace_back(base.attentions[static_cast<size_t>(e.attention)].first, e.buffer);
    }
  }
  const auto unmarked_softmax = [&](const TraceEvent& e) {
    return e.alloc && e.op >= 0 && t.ops[e.op] == "aten::_softmax" &&
           std::none_of(cores.begin(), cores.end(),
                        [&](const auto& c) { return c.first <= e.buffer && e.buffer <= c.second; });
  };
  if (target.device == Device::kCuda && t.torch.starts_with("1.") &&
      std::any_of(base.events.begin(), base.events.end(), unmarked_softmax)) {
    notes.push_back(fmt::format(
        "traced under PyTorch {0}: attention written out op by op (by hand, "
        "nn.MultiheadAttention asked for its weights, or Hugging Face's sdpa, which falls back "
        "to eager under {0}) replays as traced, where a model that calls "
        "scaled_dot_product_attention under 2.x gets a fused kernel on CUDA and keeps less; "
        "trace under PyTorch 2.x for that",
        t.torch));
  }
  // Traces from before convolutions recorded their problems replay without cuDNN's workspaces.
  const auto unrecorded_conv = [&](const TraceEvent& e) {
    return e.alloc && e.op >= 0 && e.conv_role == ConvRole::kAbsent &&
           t.ops[e.op].starts_with("aten::convolution");
  };
  if (kernels_take_workspaces(target) &&
      std::any_of(t.runs[0].events.begin(), t.runs[0].events.end(), unrecorded_conv)) {
    notes.emplace_back(
        "the trace does not record its convolutions' shapes (an earlier trainfit made it), so "
        "cuDNN's workspaces are left out and the figures are low; trace it again");
  }
  return notes;
}

}  // namespace trainfit
