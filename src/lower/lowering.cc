#include "lower/lowering.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <set>
#include <span>
#include <unordered_map>

#include "base/size_math.h"
#include "graph/device_rules.h"
#include "graph/op_registry.h"
#include "lower/grad_layout.h"
#include "lower/optimizer_step.h"

namespace trainfit {
namespace {

constexpr BufferId kNoBuffer = -1;

using Segment = CheckpointSegment;

// Storages the training loop holds to the step's end whatever the graph does: the loss, the
// model's output and what it returns beside it.
std::vector<StorageId> loop_held_storages(const Graph& g) {
  std::vector<StorageId> held;
  if (g.loss != kNone) held.push_back(g.value(g.loss).storage);
  if (!g.modules.empty() && g.modules.front().output != kNone) {
    held.push_back(g.value(g.modules.front().output).storage);
  }
  for (ValueId v : g.returned) held.push_back(g.value(v).storage);
  return held;
}

class Lowerer : public EventSink {
 public:
  Lowerer(const Graph& g, const TrainingConfig& c, const LoweringOptions& o)
      : g_(g), config_(c), options_(o) {}

  Result<EventList> run();

 private:
  // Setup and analysis.
  Status find_segments();
  void analyze();
  // Note [A module's arguments]
  // Returns, per storage, the depth of the module whose return releases it (-1: none).
  std::vector<int> hold_module_arguments();
  // The frees at each node in the order Python makes them, given hold_module_arguments().
  void order_frees(const std::vector<int>& argument_of);
  void allocate_parameters();

  // Events.
  BufferId new_buffer(int64_t bytes, Category category, NodeId node, bool host = false);
  void emit(BufferId buffer, bool alloc, NodeId node);
  BufferId alloc_new(int64_t bytes, Category category, NodeId node, bool host = false);
  // A kernel's workspace, counted by where its size comes from (EventList::workspace_sources),
  // with its bound where it was not measured; none where both are 0 bytes.
  BufferId alloc_workspace(int64_t bytes, const WorkspaceFigure& figure, NodeId node);
  void free_buffer(BufferId buffer, NodeId node);
  void unref_grad(BufferId buffer, NodeId node);

  // The node's call as its op's rules see it; `inputs` holds the pointers it refers to.
  OpCall call_of(const Node& node, std::vector<const Value*>& inputs) const;
  // The cuBLAS (and, forward, cuBLASLt) workspaces a node's first library call on a thread
  // takes and keeps (device_rules.h).
  void library_workspaces(const Node& node, bool autograd_thread);
  // cuDNN's benchmark mode: the first call of a problem allocates the largest candidate's
  // workspace, frees it and empties the allocator's cache.
  void search_plans(const PlanSearch& search, NodeId node);
  // An op's own tensors made and freed in order (MemoryStep); kOutput steps make that output.
  // Returns what the steps leave allocated (kNoBuffer where freed).
  std::vector<BufferId> run_steps(std::span<const MemoryStep> steps, Category category,
                                  NodeId node);
  void forward();
  void make_output(NodeId n, ValueId o);
  void backward();
  void recompute(size_t segment);
  // A dense copy of the gradient that arrived for `value` (Note [Gradient layouts]).
  BufferId alloc_dense_copy(ValueId value, NodeId node) {
    return alloc_new(value_bytes(g_.value(value)), Category::kWorkspace, node);
  }
  // The staging of a convolution bias's sum over a gradient whose channels are its innermost
  // dim: every channel's inputs are strided (Note [Reductions' staging]).
  ReduceScratch strided_bias_sum(const Value& grad) const {
    ReduceProblem r;
    r.outputs = grad.shape.size() > 1 ? grad.shape[1] : 1;
    r.inputs_per_output = checked_numel(grad.shape).value_or(0) / std::max<int64_t>(r.outputs, 1);
    r.contiguous_inputs = false;
    r.itemsize = dtype_bytes(grad.dtype);
    r.sm_count = g_.target.sm_count;
    r.sm = g_.target.sm;
    return cuda_reduce_scratch(r);
  }
  void route_gradient(ValueId value, BufferId buffer, bool shared_tensor, NodeId node, Dims strides,
                      bool view);
  void optimizer_step(bool first_step, bool skipped);
  bool uses_grad_scaler() const;
  void scale_loss();
  BufferId alloc(int64_t bytes, Category category, bool host, int32_t param) override;
  BufferId alloc_paged(int64_t bytes, int32_t param) override;
  void release(BufferId buffer) override;
  void zero_grad();
  void end_micro_step();

  // DistributedDataParallel (--strategy ddp).
  // --strategy zero1 is DDP with ZeroRedundancyOptimizer: the same reducer.
  bool ddp() const {
    return config_.distributed.strategy == Strategy::kDdp ||
           config_.distributed.strategy == Strategy::kZero1;
  }
  bool zero_redundancy() const { return config_.distributed.strategy == Strategy::kZero1; }
  void ddp_construct();
  void ddp_pre_forward();
  void broadcast_coalesced(const std::vector<BucketTensor>& tensors);
  void allocate_buckets(const std::vector<GradientBucket>& buckets);
  void grads_to_buckets(NodeId node);
  void zero_partition();
  Status check_ddp_grads() const;

  // FullyShardedDataParallel (--strategy fsdp).
  bool fsdp() const { return config_.distributed.strategy == Strategy::kFsdp; }
  // MixedPrecision in bf16: the graph is bf16, the model FSDP is given is fp32.
  bool fsdp_mixed() const { return fsdp() && config_.distributed.fsdp.mixed_precision_bf16; }
  // The bytes of a floating tensor of the graph as the fp32 model holds it, under
  // MixedPrecision; `bytes` otherwise.
  int64_t full_precision_bytes(int64_t bytes, DType dtype) const {
    return fsdp_mixed() && is_floating(dtype) ? bytes / dtype_bytes(dtype) * 4 : bytes;
  }
  // An input FSDP's root casts to bf16: its copy lives as an activation does.
  bool scoped_loop() const { return config_.loop == LoopStyle::kScoped; }
  // A storage autograd's releases can free: activations, and the batch of a scoped loop.
  bool released_by_autograd(StorageId s) const {
    const StorageKind kind = g_.storages[s].kind;
    return kind == StorageKind::kActivation || cast_input(s) ||
           (scoped_loop() && kind == StorageKind::kInput);
  }
  bool cast_input(StorageId s) const {
    return fsdp_mixed() && g_.storages[s].kind == StorageKind::kInput && cast_inputs_[s];
  }
  Status fsdp_units();
  // 1.13's FSDP runs its forward and its backward hooks under record_function: a 4-byte
  // placeholder, then a 288-byte CPU handle held to the block's end (nothing under 2.x).
  BufferId record_function_enter(NodeId node);
  void fsdp_cast_buffers();
  void fsdp_cast_inputs();
  void fsdp_construct();
  void fsdp_gather(size_t unit, NodeId node);
  void fsdp_reshard(size_t unit, NodeId node);
  void fsdp_post_backward(size_t unit, NodeId node);

  bool is_param(ValueId v) const {
    const Value& val = g_.value(v);
    const StorageKind k = g_.storages[val.storage].kind;
    return val.producer == kNone && k == StorageKind::kParameter;
  }

  const Graph& g_;
  const TrainingConfig& config_;
  const LoweringOptions& options_;
  EventList out_;
  Phase phase_ = Phase::kSetup;
  uint8_t iteration_ = 0;

  // Analysis.
  IdVector<NodeId> last_use_;           // per storage: last forward node touching it
  IdVector<int> forward_savers_;        // per storage: backward nodes that keep it
  IdVector<bool> held_to_end_;          // loss, model output and what it returns: Python holds them
  IdVector<bool> held_to_forward_end_;  // autocast's cached weight casts
  IdVector<std::vector<StorageId>> frees_after_;  // per node
  IdVector<int> segment_of_;                      // per node, or -1
  std::vector<Segment> segments_;
  // Per reentrant segment: the gradients of its outputs, held while its backward runs.
  std::vector<std::vector<BufferId>> held_grads_;
  IdVector<int> param_index_;              // per value: index into g_.params, or -1
  IdVector<BackwardSpec> backward_specs_;  // per node (recorded nodes on the loss path)
  IdVector<int> expected_grads_;           // per param: backward nodes that send it one

  // State.
  IdVector<BufferId> storage_buffer_;  // live buffer of a storage
  IdVector<int> saver_refs_;           // per storage, counting down in backward
  IdVector<BufferId> recomputed_buffer_;
  IdVector<int> recomputed_refs_;
  IdVector<bool> recomputed_;
  IdVector<BufferId> grad_slot_;   // per value: buffer of its accumulated gradient
  IdVector<Dims> grad_strides_;    // per value: that gradient's strides (Note [Gradient layouts])
  IdVector<bool> grad_is_view_;    // per value: that gradient is a view, which keeps its base
  IdVector<int> grad_refs_;        // per buffer: references by gradient slots
  IdVector<BufferId> param_grad_;  // per param: its .grad
  IdVector<int> received_grads_;   // per param, this backward
  bool scaler_created_ = false;    // GradScaler's _scale and _growth_tracker exist
  bool stepped_ = false;           // the optimizer has stepped (its state exists)
  std::set<uint64_t> searched_;    // cuDNN problems whose plans are cached
  BufferId scaled_loss_ = kNoBuffer;
  CublasHandles cublas_;
  int micro_step_ = 0;
  std::vector<BufferId> iteration_buffers_;  // freed at the end of the micro-step
  std::vector<BufferId> leaf_grads_;         // .grad of held leaves, freed with them

  // DDP state.
  std::vector<int32_t> zero_order_;       // ZeroRedundancyOptimizer: rank 0's params, as it steps
  std::vector<BucketTensor> ddp_params_;  // the reducer's parameters, in parameters() order
  IdVector<int32_t> ddp_index_;           // per param: its index there, or -1
  std::vector<int32_t> ready_order_;      // DDP indices as the first backward made them ready
  std::vector<int32_t> node_ready_;       // params made ready by the current backward node
  std::vector<BufferId> buckets_;
  std::vector<BufferId> stale_buckets_;  // replaced, alive through .grad views until backward
  std::vector<int32_t> to_bucket_;       // params whose new .grad becomes a bucket view
  int forwards_ = 0;

  // FSDP state. Unit 0 is the root: the parameters no wrapped module holds.
  struct FsdpUnit {
    ModuleId module = kNone;
    NodeId first = 0;  // nodes [first, end) run inside the wrapped module
    NodeId end = 0;
    std::vector<int32_t> params;  // g_.params indices, flattened in this order
    int64_t flat_bytes = 0;       // the FlatParameter unsharded
    int64_t padded_bytes = 0;     // padded to a multiple of the world size
    int64_t shard_bytes = 0;      // one rank's shard, as the optimizer steps it
    int64_t flat_full_bytes = 0;  // the FlatParameter at construction (fp32 under MixedPrecision)
    int64_t low_shard_bytes = 0;  // MixedPrecision: the shard cast to bf16 for the all-gather
    int trainable = 0;            // parameters whose gradients its backward waits for
    BufferId full = kNoBuffer;    // the gathered parameters, while unsharded
    BufferId forward_handle = kNoBuffer;  // its forward's record_function handle
    BufferId grad = kNoBuffer;            // the sharded gradient (.grad of the FlatParameter)
    int waiting = 0;                      // gradients still to come in this backward
    bool in_backward = false;             // its pre-backward hook has run in this backward
    std::vector<BufferId> grads;          // the parameters' gradients, until flattened
  };
  std::vector<FsdpUnit> units_;
  IdVector<bool> cast_inputs_;   // per storage: a floating input, under MixedPrecision
  IdVector<int> unit_of_node_;   // per node
  IdVector<int> unit_of_param_;  // per param, or -1 (buffers)
};

// A .grad that is a view into a DDP bucket (gradient_as_bucket_view): the bucket holds it.
constexpr BufferId kBucketView = -2;

// ---- events --------------------------------------------------------------------------------

BufferId Lowerer::new_buffer(int64_t bytes, Category category, NodeId node, bool host) {
  Buffer b;
  b.bytes = bytes;
  b.category = category;
  b.node = node;
  b.module = node == kNone ? kNone : g_.nodes[node].module;
  b.host = host;
  const BufferId id = out_.buffers.next_id();
  out_.buffers.push_back(b);
  grad_refs_.push_back(0);
  return id;
}

void Lowerer::emit(BufferId buffer, bool alloc, NodeId node) {
  Event e;
  e.buffer = buffer;
  e.alloc = alloc;
  e.phase = phase_;
  e.iteration = iteration_;
  e.node = node;
  out_.events.push_back(e);
}

BufferId Lowerer::alloc_new(int64_t bytes, Category category, NodeId node, bool host) {
  const BufferId b = new_buffer(bytes, category, node, host);
  emit(b, true, node);
  return b;
}

void Lowerer::free_buffer(BufferId buffer, NodeId node) {
  if (buffer != kNoBuffer) emit(buffer, false, node);
}

void Lowerer::unref_grad(BufferId buffer, NodeId node) {
  if (buffer == kNoBuffer || buffer == kBucketView) return;
  if (--grad_refs_[buffer] == 0) free_buffer(buffer, node);
}

// ---- analysis ------------------------------------------------------------------------------

Status Lowerer::find_segments() {
  TF_ASSIGN_OR_RETURN(segments_,
                      checkpoint_segments(g_, config_.checkpoint, config_.checkpoint_reentrant));
  held_grads_.assign(segments_.size(), {});
  segment_of_.assign(g_.nodes.size(), -1);
  for (size_t id = 0; id < segments_.size(); ++id) {
    for (NodeId n = segments_[id].first; n < segments_[id].end; ++n) {
      segment_of_[n] = static_cast<int>(id);
    }
  }
  return {};
}

void Lowerer::analyze() {
  const size_t n_storages = g_.storages.size();
  last_use_.assign(n_storages, kNone);
  forward_savers_.assign(n_storages, 0);
  held_to_end_.assign(n_storages, false);
  held_to_forward_end_.assign(n_storages, false);
  frees_after_.assign(g_.nodes.size(), {});
  param_index_.assign(g_.values.size(), -1);
  for (size_t i = 0; i < g_.params.size(); ++i) {
    param_index_[g_.params[i].value] = static_cast<int>(i);
  }
  backward_specs_.assign(g_.nodes.size(), {});
  expected_grads_.assign(g_.params.size(), 0);
  std::vector<const Value*> in_values;
  for (size_t n = 0; n < g_.nodes.size(); ++n) {
    const Node& node = g_.nodes[n];
    if (node.recorded && g_.on_loss_path[n]) {
      backward_specs_[n] = backward_of(*node.op, call_of(node, in_values));
      for (const GradRule& rule : backward_specs_[n].grads) {
        const int p = param_index_[node.inputs[static_cast<size_t>(rule.input)]];
        if (p >= 0) ++expected_grads_[p];
      }
    }
  }
  for (size_t n = 0; n < g_.nodes.size(); ++n) {
    const Node& node = g_.nodes[n];
    for (ValueId v : node.inputs) last_use_[g_.value(v).storage] = static_cast<NodeId>(n);
    for (ValueId v : node.outputs) last_use_[g_.value(v).storage] = static_cast<NodeId>(n);
    if (!node.recorded || !g_.on_loss_path[n] || segment_of_[n] >= 0) continue;
    std::vector<StorageId> seen;
    for (ValueId v : node.saved) {
      const StorageId s = g_.value(v).storage;
      if (std::find(seen.begin(), seen.end(), s) != seen.end()) continue;
      seen.push_back(s);
      ++forward_savers_[s];
    }
  }
  for (const auto& [v, n] : g_.held_until) {
    NodeId& last = last_use_[g_.value(v).storage];
    last = std::max(last, n);
  }
  const std::vector<int> argument_of = hold_module_arguments();
  for (const Segment& s : segments_) {
    if (s.last_to_run == kNone) continue;
    for (StorageId st : s.held_inputs) ++forward_savers_[st];
  }
  const std::vector<StorageId> held = loop_held_storages(g_);
  for (StorageId s : held) held_to_end_[s] = true;
  if (scoped_loop()) {
    // The step function returns the loss: the output and the batch are its locals.
    for (size_t i = 1; i < held.size(); ++i) {
      held_to_end_[held[i]] = false;
      held_to_forward_end_[held[i]] = true;
    }
    for (ValueId in : g_.inputs) held_to_forward_end_[g_.value(in).storage] = true;
  }
  for (ValueId v : g_.autocast_cached) {
    held_to_forward_end_[g_.value(v).storage] = true;
  }
  cast_inputs_.assign(n_storages, false);
  for (ValueId in : g_.inputs) {
    if (is_floating(g_.value(in).dtype)) cast_inputs_[g_.value(in).storage] = true;
  }
  for (size_t s = 0; s < n_storages; ++s) {
    const Storage& st = g_.storages[s];
    const bool activation =
        st.kind == StorageKind::kActivation || cast_input(static_cast<StorageId>(s));
    if (!activation || last_use_[s] == kNone) continue;
    if (forward_savers_[s] > 0 || held_to_end_[s] || held_to_forward_end_[s]) continue;
    frees_after_[last_use_[s]].push_back(static_cast<StorageId>(s));
  }
  order_frees(argument_of);
}

void Lowerer::order_frees(const std::vector<int>& argument_of) {
  const size_t n_storages = g_.storages.size();
  // What dies as a node's op returns goes first; then what Python held until that node, in
  // the order its last reference goes: the locals GraphBuilder::hold names, in the order of the
  // holds, then the modules' arguments as each call returns, the innermost first.
  std::vector<size_t> hold_rank(n_storages, 0);
  for (size_t i = 0; i < g_.held_until.size(); ++i) {
    const auto& [v, n] = g_.held_until[i];
    const StorageId s = g_.value(v).storage;
    if (last_use_[s] == n) hold_rank[static_cast<size_t>(s)] = i + 1;
  }
  constexpr int kDeepest = 1 << 16;
  for (size_t s = 0; s < n_storages; ++s) {
    if (argument_of[s] < 0) continue;
    hold_rank[s] = g_.held_until.size() + 1 + static_cast<size_t>(kDeepest - argument_of[s]);
  }
  for (std::vector<StorageId>& frees : frees_after_) {
    std::stable_sort(frees.begin(), frees.end(), [&](StorageId a, StorageId b) {
      return hold_rank[static_cast<size_t>(a)] < hold_rank[static_cast<size_t>(b)];
    });
  }
}

// A ModuleList or ModuleDict is never called: its children are, from its owner's forward.
bool is_container(const Module& m) {
  return m.type == "ModuleList" || m.type == "ModuleDict";
}

// Note [A module's arguments]
// A tensor handed to a module stays referenced until the module's forward returns: the
// caller's frame (its local, or the temporary on its evaluation stack) holds the argument for
// the whole call, whatever forward does with its own name for it. So a tensor made outside a
// module and read inside it lives at least until the module's last op, even where its last
// read comes earlier: torchvision's FrozenBatchNorm2d (ACT's backbone) reads x in x * scale,
// then adds the bias, and x goes only when the caller rebinds it; the H100 recording of ACT
// allocates both products while the 629 MB input is still there. The outermost module that
// did not make it is the one it was passed into from outside; containers (ModuleList,
// ModuleDict) are never called, so their owner's forward holds what it hands their children.
std::vector<int> Lowerer::hold_module_arguments() {
  std::vector<int> depth_of(g_.storages.size(), -1);
  for (size_t n = 0; n < g_.nodes.size(); ++n) {
    const Node& node = g_.nodes[n];
    for (ValueId v : node.inputs) {
      const StorageId s = g_.value(v).storage;
      const Storage& st = g_.storages[s];
      if (st.kind != StorageKind::kActivation) continue;
      NodeId until = kNone;
      int depth = -1;
      for (ModuleId m = node.module; m != kNone; m = g_.modules[m].parent) {
        const Module& mod = g_.modules[m];
        if (st.producer != kNone && st.producer >= mod.first_node) break;
        if (is_container(mod)) continue;
        until = mod.end_node - 1;
        depth = mod.depth;
      }
      if (until == kNone) continue;
      if (until > last_use_[s]) {
        last_use_[s] = until;
        depth_of[static_cast<size_t>(s)] = depth;
      } else if (until == last_use_[s]) {
        depth_of[static_cast<size_t>(s)] = std::max(depth_of[static_cast<size_t>(s)], depth);
      }
    }
  }
  return depth_of;
}

// Module.cuda() moves parameters module by module, children before their parent's own tensors
// (nn.Module._apply); each parameter is its own allocation.
void Lowerer::allocate_parameters() {
  std::vector<std::vector<size_t>> by_module(g_.modules.size() + 1);
  for (size_t i = 0; i < g_.params.size(); ++i) {
    const ModuleId m = g_.params[i].module;
    by_module[m == kNone ? g_.modules.size() : static_cast<size_t>(m)].push_back(i);
  }
  std::vector<std::vector<size_t>> children(g_.modules.size());
  std::vector<size_t> roots;
  for (size_t m = 0; m < g_.modules.size(); ++m) {
    const ModuleId p = g_.modules[m].parent;
    (p == kNone ? roots : children[static_cast<size_t>(p)]).push_back(m);
  }
  std::vector<size_t> order;
  auto visit = [&](auto&& self, size_t m) -> void {
    for (size_t c : children[m]) self(self, c);
    for (size_t p : by_module[m]) order.push_back(p);
  };
  for (size_t r : roots) visit(visit, r);
  for (size_t p : by_module.back()) order.push_back(p);
  for (size_t p : order) {
    const Value& v = g_.value(g_.params[p].value);
    const StorageId s = v.storage;
    const BufferId b = new_buffer(full_precision_bytes(g_.storages[s].bytes, v.dtype),
                                  Category::kParameter, kNone);
    out_.buffers[b].param = static_cast<int32_t>(p);
    out_.buffers[b].module = g_.params[p].module;
    emit(b, true, kNone);
    storage_buffer_[s] = b;
  }
}

// ---- forward -------------------------------------------------------------------------------

OpCall Lowerer::call_of(const Node& node, std::vector<const Value*>& inputs) const {
  inputs.clear();
  for (ValueId v : node.inputs) inputs.push_back(&g_.value(v));
  return OpCall{node.attrs, inputs, g_.target, g_.precision, g_.memory_format};
}

BufferId Lowerer::alloc_workspace(int64_t bytes, const WorkspaceFigure& figure, NodeId node) {
  const FigureSource source = figure.source;
  if (source != FigureSource::kDerived && iteration_ == 0 && micro_step_ == 0) {
    ++out_.workspace_sources[static_cast<size_t>(source)];
  }
  const int64_t bound = is_unmeasured(source) ? std::max(bytes, figure.bound_bytes) : -1;
  if (source != FigureSource::kDerived && bytes <= 0 && bound <= 0) return kNoBuffer;
  const BufferId b = new_buffer(bytes, Category::kWorkspace, node, /*host=*/false);
  out_.buffers[b].source = source;
  out_.buffers[b].bound_bytes = bound;
  emit(b, true, node);
  return b;
}

void Lowerer::search_plans(const PlanSearch& search, NodeId node) {
  if (!searched_.insert(search.problem).second) return;
  ++out_.plan_searches;
  if (!search.measured) ++out_.unmeasured_searches;
  if (search.trial_bytes > 0) {
    free_buffer(alloc_new(search.trial_bytes, Category::kWorkspace, node), node);
  }
  emit(0, /*alloc=*/false, node);
  out_.events.back().empty_cache = true;  // no buffer: torch.cuda.empty_cache()
}

void Lowerer::library_workspaces(const Node& node, bool autograd_thread) {
  const auto n = static_cast<NodeId>(&node - &g_.nodes[0]);
  if (node.op->uses_cublas && options_.cublas_workspace_bytes > 0 &&
      cublas_.creates_handle(g_.target, autograd_thread)) {
    alloc_new(options_.cublas_workspace_bytes, Category::kWorkspace, n);
  }
  if (autograd_thread || options_.cublaslt_workspace_bytes == 0 || !node.op->uses_cublaslt) return;
  std::vector<const Value*> inputs;
  if (node.op->uses_cublaslt(call_of(node, inputs)) && cublas_.creates_lt_handle(g_.target)) {
    alloc_new(options_.cublaslt_workspace_bytes, Category::kWorkspace, n);
  }
}

std::vector<BufferId> Lowerer::run_steps(std::span<const MemoryStep> steps, Category category,
                                         NodeId n) {
  const Node& node = g_.nodes[static_cast<size_t>(n)];
  return play_steps(
      steps, kNoBuffer,
      [&](int64_t output) { make_output(n, node.outputs[static_cast<size_t>(output)]); },
      [&](int64_t bytes) { return alloc_new(bytes, category, n); },
      [&](BufferId b) { free_buffer(b, n); });
}

// Allocates a node's output storage in forward, unless it is a view or is already there.
void Lowerer::make_output(NodeId n, ValueId o) {
  const StorageId s = g_.value(o).storage;
  const Storage& st = g_.storages[s];
  if (st.producer != n || storage_buffer_[s] != kNoBuffer) return;
  const Category c = forward_savers_[s] > 0 ? Category::kActivation : Category::kTemporary;
  storage_buffer_[s] = alloc_new(st.bytes, c, n, st.host);
}

void Lowerer::forward() {
  phase_ = Phase::kForward;
  for (ValueId in : g_.inputs) {
    const StorageId s = g_.value(in).storage;
    // Under MixedPrecision the batch is fp32; the graph's bf16 input is FSDP's cast of it.
    const BufferId b = alloc_new(full_precision_bytes(g_.storages[s].bytes, g_.value(in).dtype),
                                 Category::kInput, kNone);
    if (!cast_input(s)) storage_buffer_[s] = b;
    if (!scoped_loop()) iteration_buffers_.push_back(b);
  }
  if (ddp()) ddp_pre_forward();
  if (fsdp()) {
    units_[0].forward_handle = record_function_enter(kNone);
    if (iteration_ == 0 && micro_step_ == 0) {
      // The root's lazy init casts the buffers, then makes each unit's gather buffers and
      // frees their storage at once: under MixedPrecision the bf16 shard, the bf16 and the
      // fp32 gathered parameters.
      if (fsdp_mixed()) fsdp_cast_buffers();
      for (const FsdpUnit& unit : units_) {
        if (unit.params.empty()) continue;
        if (fsdp_mixed()) {
          free_buffer(alloc_new(unit.low_shard_bytes, Category::kParameter, kNone), kNone);
          free_buffer(alloc_new(unit.padded_bytes, Category::kParameter, kNone), kNone);
          free_buffer(alloc_new(unit.shard_bytes * config_.distributed.world_size,
                                Category::kParameter, kNone),
                      kNone);
        } else {
          free_buffer(alloc_new(unit.padded_bytes, Category::kParameter, kNone), kNone);
        }
      }
    }
    if (fsdp_mixed()) fsdp_cast_inputs();
    fsdp_gather(0, kNone);
  }
  for (size_t i = 0; i < g_.nodes.size(); ++i) {
    const auto n = static_cast<NodeId>(i);
    const Node& node = g_.nodes[i];
    const int unit = fsdp() ? unit_of_node_[i] : 0;
    if (unit > 0 && units_[static_cast<size_t>(unit)].first == n) {
      units_[static_cast<size_t>(unit)].forward_handle = record_function_enter(n);
      fsdp_gather(static_cast<size_t>(unit), n);
    }
    std::vector<BufferId> own;  // the op's own tensors (OpSchema::forward_steps)
    if (node.op->forward_steps) {
      std::vector<const Value*> in_values;
      own = run_steps(node.op->forward_steps(call_of(node, in_values)), Category::kTemporary, n);
    }
    const bool early = options_.op_workspaces && node.op->workspace_first;
    const BufferId early_workspace = early && node.workspace_bytes > 0
                                         ? alloc_new(node.workspace_bytes, Category::kWorkspace, n)
                                         : kNoBuffer;
    for (ValueId o : node.outputs) make_output(n, o);
    // The kernel runs once its outputs exist: a library handle's first use takes its
    // workspace, then the call its own scratch (device_rules.h).
    library_workspaces(node, /*autograd_thread=*/false);
    free_buffer(early_workspace, n);
    if (options_.op_workspaces && !early) {
      int64_t workspace = node.workspace_bytes;
      WorkspaceFigure figure;
      bool searched = false;
      if (config_.switches.cudnn_benchmark && node.op->plan_search) {
        std::vector<const Value*> in_values;
        if (const std::optional<PlanSearch> s = node.op->plan_search(call_of(node, in_values))) {
          search_plans(*s, n);
          workspace = s->chosen_bytes;
          searched = true;
        }
      }
      if (!searched && node.op->workspace_figure) {
        std::vector<const Value*> in_values;
        figure = node.op->workspace_figure(call_of(node, in_values));
      }
      if (workspace > 0 || figure.source != FigureSource::kDerived) {
        free_buffer(alloc_workspace(workspace, figure, n), n);
      }
    }
    for (const BufferId b : own) free_buffer(b, n);
    for (StorageId s : frees_after_[i]) {
      free_buffer(storage_buffer_[s], n);
      storage_buffer_[s] = kNoBuffer;
    }
    // FULL_SHARD frees a wrapped unit's parameters after its forward (the root's stay).
    if (unit > 0 && units_[static_cast<size_t>(unit)].end == n + 1) {
      FsdpUnit& u = units_[static_cast<size_t>(unit)];
      if (config_.distributed.fsdp.sharding == FsdpSharding::kFullShard) {
        fsdp_reshard(static_cast<size_t>(unit), n);
      }
      free_buffer(u.forward_handle, n);
      u.forward_handle = kNoBuffer;
    }
    // The root FSDP's forward returns with the model's output, before the loss.
    if (fsdp() && !g_.modules.empty() && g_.modules.front().end_node == n + 1) {
      free_buffer(units_[0].forward_handle, n);
      units_[0].forward_handle = kNoBuffer;
    }
  }
  // torch.autocast drops its weight-cast cache on exit, after the loss.
  for (size_t s = 0; s < g_.storages.size(); ++s) {
    if (held_to_forward_end_[s] && forward_savers_[s] == 0 && !held_to_end_[s]) {
      free_buffer(storage_buffer_[s], kNone);
      storage_buffer_[s] = kNoBuffer;
    }
  }
}

// ---- backward ------------------------------------------------------------------------------

void Lowerer::recompute(size_t index) {
  Segment& seg = segments_[index];
  recomputed_[index] = true;
  // Which recomputed storages the segment's backward keeps, and the last recomputed use of
  // the others.
  std::unordered_map<StorageId, int> keep;
  std::unordered_map<StorageId, NodeId> last;
  for (NodeId n = seg.first; n <= seg.recompute_stop; ++n) {
    const Node& node = g_.nodes[n];
    for (ValueId v : node.inputs) last[g_.value(v).storage] = n;
    for (ValueId v : node.outputs) last[g_.value(v).storage] = n;
    if (!node.recorded || !g_.on_loss_path[n]) continue;
    std::vector<StorageId> seen;
    for (ValueId v : node.saved) {
      const StorageId s = g_.value(v).storage;
      const Storage& st = g_.storages[s];
      if (st.kind != StorageKind::kActivation || st.producer < seg.first) continue;
      if (std::find(seen.begin(), seen.end(), s) != seen.end()) continue;
      seen.push_back(s);
      ++keep[s];
    }
  }
  // Reentrant: the recomputed outputs stay referenced until the segment's backward returns,
  // and so do the gradients that arrived for them.
  for (StorageId s : seg.outputs) ++keep[s];
  if (seg.reentrant) {
    for (NodeId n = seg.first; n < seg.end; ++n) {
      for (ValueId o : g_.nodes[n].outputs) {
        const BufferId grad = grad_slot_[o];
        if (grad == kNoBuffer) continue;
        ++grad_refs_[grad];
        held_grads_[index].push_back(grad);
      }
    }
  }
  for (NodeId n = seg.first; n <= seg.recompute_stop; ++n) {
    const Node& node = g_.nodes[n];
    for (ValueId o : node.outputs) {
      const StorageId s = g_.value(o).storage;
      const Storage& st = g_.storages[s];
      if (st.producer != n || recomputed_buffer_[s] != kNoBuffer) continue;
      const auto k = keep.find(s);
      const int refs = k != keep.end() ? k->second : 0;
      // Kept by a backward node (an activation), or only by the reentrant `outputs` local.
      const int held =
          std::find(seg.outputs.begin(), seg.outputs.end(), s) != seg.outputs.end() ? 1 : 0;
      recomputed_buffer_[s] = alloc_new(
          st.bytes, refs > held ? Category::kActivation : Category::kTemporary, n, st.host);
      recomputed_refs_[s] = refs;
    }
    for (const auto& [s, at] : last) {
      if (at != n || keep.count(s) != 0) continue;
      if (recomputed_buffer_[s] == kNoBuffer) continue;
      free_buffer(recomputed_buffer_[s], n);
      recomputed_buffer_[s] = kNoBuffer;
    }
  }
}

void Lowerer::route_gradient(ValueId value, BufferId buffer, bool same_tensor, NodeId node,
                             Dims strides, bool view) {
  const int p = param_index_[value];
  BufferId& slot = grad_slot_[value];
  if (slot == kNoBuffer) {
    slot = buffer;
    grad_strides_[value] = std::move(strides);
    grad_is_view_[value] = view;
  } else {
    // Gradients for one value meet in the autograd engine's InputBuffer (device_rules.h Note
    // [Summing gradients]; the op cases show 1.13's aten.add).
    same_tensor = false;
    if (adds_gradient_in_place(g_.target, grad_refs_[slot] == 1 && !grad_is_view_[value])) {
      unref_grad(buffer, node);
    } else {
      const BufferId sum = alloc_new(value_bytes(g_.value(value)),
                                     p >= 0 ? Category::kGradient : Category::kTemporary, node);
      grad_refs_[sum] = 1;
      unref_grad(slot, node);
      unref_grad(buffer, node);
      slot = sum;
      grad_is_view_[value] = false;
      // old + new: laid out as both where they agree (TensorIterator), else contiguous.
      if (strides != grad_strides_[value]) {
        grad_strides_[value] = contiguous_strides(g_.value(value).shape);
      }
    }
  }
  if (p < 0) return;
  // A parameter's AccumulateGrad runs once every gradient for it has arrived. The first becomes
  // .grad without a copy, a view included (it then keeps its base alive), unless other holders
  // share that very tensor (accumulate_grad.h); a later micro-batch's is added in place.
  if (++received_grads_[p] < expected_grads_[p]) return;
  if (fsdp() && unit_of_param_[p] >= 0) {
    // The parameter is a view into its unit's FlatParameter: autograd's split backward
    // flattens the unit's gradients once all have arrived.
    FsdpUnit& unit = units_[static_cast<size_t>(unit_of_param_[p])];
    unit.grads.push_back(slot);
    slot = kNoBuffer;
    if (--unit.waiting == 0) fsdp_post_backward(static_cast<size_t>(unit_of_param_[p]), node);
    return;
  }
  BufferId& grad = param_grad_[p];
  if (grad != kNoBuffer) {
    unref_grad(slot, node);
  } else if (same_tensor && grad_refs_[slot] > 1) {
    grad = alloc_new(value_bytes(g_.value(value)), Category::kGradient, node);
    grad_refs_[grad] = 1;
    unref_grad(slot, node);
  } else {
    grad = slot;
  }
  slot = kNoBuffer;
  if (ddp() && ddp_index_[p] >= 0) {
    if (iteration_ == 0 && micro_step_ == 0) node_ready_.push_back(p);
    if (config_.distributed.ddp.gradient_as_bucket_view) to_bucket_.push_back(p);
  }
}

void Lowerer::backward() {
  phase_ = Phase::kBackward;
  std::fill(recomputed_.begin(), recomputed_.end(), false);
  saver_refs_ = forward_savers_;
  // loss.backward() seeds with ones_like(loss); torch.autograd.backward holds that tensor in a
  // Python list until the engine returns.
  const BufferId seed = alloc_new(value_bytes(g_.value(g_.loss)), Category::kTemporary, kNone);
  grad_refs_[seed] = 2;
  grad_slot_[g_.loss] = seed;
  grad_strides_[g_.loss] = contiguous_strides(g_.value(g_.loss).shape);
  std::fill(received_grads_.begin(), received_grads_.end(), 0);
  for (FsdpUnit& unit : units_) {
    unit.waiting = unit.trainable;
    unit.in_backward = false;
  }
  for (size_t i = g_.nodes.size(); i-- > 0;) {
    const Node& node = g_.nodes[i];
    const auto n = static_cast<NodeId>(i);
    if (!node.recorded || !g_.on_loss_path[i]) continue;
    // FSDP's pre-backward hook, on the unit's outputs: gather its parameters again. 2.x
    // prefetches by default (backward_prefetch=BACKWARD_PRE): the unit whose backward comes
    // next, the one before it in forward, is gathered too.
    if (fsdp() && !units_[static_cast<size_t>(unit_of_node_[i])].in_backward) {
      const auto unit = static_cast<size_t>(unit_of_node_[i]);
      units_[unit].in_backward = true;
      const BufferId hook = record_function_enter(n);
      fsdp_gather(unit, n);
      if (g_.target.torch == TorchVersion::k2 && unit > 0) {
        size_t next = 0;
        for (size_t u = 1; u < units_.size(); ++u) {
          if (units_[u].end <= units_[unit].first && !units_[u].params.empty() &&
              (next == 0 || units_[u].first > units_[next].first)) {
            next = u;
          }
        }
        if (next > 0) fsdp_gather(next, n);
      }
      free_buffer(hook, n);
    }
    // A gradient this node needs dense (Note [Gradient layouts]): a view's backward before it
    // copies it, or its kernel does.
    const ValueId out0 = node.outputs.empty() ? kNone : node.outputs.front();
    GradCopy copy = out0 == kNone || grad_slot_[out0] == kNoBuffer
                        ? GradCopy::kNoCopy
                        : grad_copy(g_, node, grad_strides_[out0]);
    if (copy != GradCopy::kBeforeNode && !options_.op_workspaces) copy = GradCopy::kNoCopy;
    if (copy == GradCopy::kBeforeNode) {
      const BufferId dense = alloc_new(value_bytes(g_.value(out0)), Category::kTemporary, n);
      grad_refs_[dense] = 1;
      unref_grad(grad_slot_[out0], n);
      grad_slot_[out0] = dense;
      grad_strides_[out0] = contiguous_strides(g_.value(out0).shape);
    }
    const int seg = segment_of_[i];
    if (seg >= 0 && !recomputed_[seg] &&
        (segments_[static_cast<size_t>(seg)].reentrant || !node.saved.empty())) {
      recompute(static_cast<size_t>(seg));
    }
    const BackwardSpec& spec = backward_specs_[i];
    // The backward function's own tensors (bitsandbytes' dequantized weight): the last stays
    // while the gradients are made.
    BufferId scratch = kNoBuffer;
    for (const int64_t bytes : spec.scratch) {
      const BufferId next = alloc_new(bytes, Category::kTemporary, n);
      free_buffer(scratch, n);
      scratch = next;
    }
    const BufferId grad_copy_first =
        copy == GradCopy::kKernelFirst
            ? alloc_new(value_bytes(g_.value(out0)), Category::kWorkspace, n)
            : kNoBuffer;
    const BufferId input_copy = options_.op_workspaces && spec.input_copy_bytes > 0
                                    ? alloc_new(spec.input_copy_bytes, Category::kWorkspace, n)
                                    : kNoBuffer;
    struct Produced {
      ValueId value;
      BufferId buffer;
      bool same_tensor;
      Dims strides;
      bool view;
    };
    std::vector<Produced> produced;
    // A parameter's only gradient this step, with no .grad yet, becomes its .grad.
    auto new_grad = [&](ValueId v) {
      const int p = param_index_[v];
      const bool becomes_grad =
          p >= 0 && !fsdp() && expected_grads_[p] == 1 && param_grad_[p] == kNoBuffer;
      const BufferId b = alloc_new(value_bytes(g_.value(v)),
                                   becomes_grad ? Category::kGradient : Category::kTemporary, n);
      grad_refs_[b] = 1;
      return b;
    };
    // Broadcast inputs' gradients, summed to their shapes after the formulas (GradRule::summed).
    struct Summed {
      int input;
      ValueId value;
      BufferId formula;
    };
    std::vector<Summed> summed;
    for (const GradRule& rule : spec.grads) {
      if (rule.from_saved) continue;  // made below, once the saved tensors are released
      const ValueId v = node.inputs[static_cast<size_t>(rule.input)];
      if (rule.summed && rule.alias_output < 0) {
        summed.push_back({rule.input, v,
                          rule.formula_bytes > 0
                              ? alloc_new(rule.formula_bytes, Category::kTemporary, n)
                              : kNoBuffer});
        continue;
      }
      BufferId b = kNoBuffer;
      std::optional<Dims> strides;
      if (rule.alias_output >= 0) {
        const ValueId o = node.outputs[static_cast<size_t>(rule.alias_output)];
        b = grad_slot_[o];
        if (b == kNoBuffer) continue;
        strides = view_grad_strides(g_, node, rule.input, grad_strides_[o]);
      }
      if (strides) {
        ++grad_refs_[b];
      } else if (rule.alias_output >= 0) {
        // A reshape of a gradient its strides do not allow: the view's backward copies it.
        b = new_grad(v);
      } else {
        // cuDNN's backward-data makes grad_input, then a dense copy of the gradient;
        // backward-filter copies it first, then makes grad_weight. The bias's sum reads the
        // gradient as it is, which a reduction over strided inputs stages.
        const bool per_kernel = copy == GradCopy::kPerKernel && rule.input < 2;
        BufferId dense = per_kernel && rule.input == 1 ? alloc_dense_copy(out0, n) : kNoBuffer;
        b = new_grad(v);
        if (per_kernel && rule.input == 0) dense = alloc_dense_copy(out0, n);
        // The kernel that fills it: the handle's workspace at its first use, then its scratch.
        library_workspaces(node, /*autograd_thread=*/true);
        if (copy == GradCopy::kPerKernel && rule.input == 2) {
          const ReduceScratch staged = strided_bias_sum(g_.value(out0));
          if (staged.buffer > 0) {
            const BufferId buffer = alloc_new(staged.buffer, Category::kWorkspace, n);
            free_buffer(alloc_new(staged.semaphores, Category::kWorkspace, n), n);
            free_buffer(buffer, n);
          }
        } else if (options_.op_workspaces && config_.switches.cudnn_benchmark && rule.plan_search) {
          search_plans(*rule.plan_search, n);
          if (rule.plan_search->chosen_bytes > 0) {
            free_buffer(alloc_new(rule.plan_search->chosen_bytes, Category::kWorkspace, n), n);
          }
        } else if (options_.op_workspaces) {
          std::vector<BufferId> scratch_of_kernel;
          const WorkspaceFigure figure{rule.workspace_source, rule.workspace_bound_bytes};
          if (rule.workspace.empty() && figure.source != FigureSource::kDerived) {
            alloc_workspace(0, figure, n);  // counted: a kernel that asks none
          }
          for (const int64_t bytes : rule.workspace) {
            scratch_of_kernel.push_back(alloc_workspace(bytes, figure, n));
          }
          for (auto s = scratch_of_kernel.rbegin(); s != scratch_of_kernel.rend(); ++s) {
            free_buffer(*s, n);
          }
        }
        free_buffer(dense, n);
      }
      const bool view =
          strides ? !rule.same_tensor && node.op->grad_is_view : rule.alias_output < 0 && rule.view;
      const bool same_tensor = strides && rule.same_tensor;
      if (!strides) {
        strides = rule.strides.empty() ? contiguous_strides(g_.value(v).shape) : rule.strides;
      }
      produced.push_back({v, b, same_tensor, *std::move(strides), view});
    }
    library_workspaces(node, /*autograd_thread=*/true);
    if (copy == GradCopy::kKernelLast) {
      free_buffer(alloc_new(value_bytes(g_.value(out0)), Category::kWorkspace, n), n);
    }
    if (options_.op_workspaces && spec.workspace_bytes > 0) {
      free_buffer(alloc_new(spec.workspace_bytes, Category::kWorkspace, n), n);
    }
    if (options_.op_workspaces) {
      for (const BufferId b : run_steps(spec.kernel_steps, Category::kWorkspace, n)) {
        free_buffer(b, n);
      }
    }
    free_buffer(input_copy, n);
    free_buffer(grad_copy_first, n);
    free_buffer(scratch, n);
    std::stable_sort(summed.begin(), summed.end(),
                     [](const Summed& a, const Summed& b) { return a.input < b.input; });
    for (const Summed& s : summed) {
      produced.push_back(
          {s.value, new_grad(s.value), false, contiguous_strides(g_.value(s.value).shape), false});
      free_buffer(s.formula, n);
    }
    for (ValueId o : node.outputs) {
      BufferId& slot = grad_slot_[o];
      unref_grad(slot, n);
      slot = kNoBuffer;
    }
    // release_variables(): the saved tensors go, once no other backward node keeps them.
    std::vector<StorageId> seen;
    for (ValueId v : node.saved) {
      const StorageId s = g_.value(v).storage;
      if (std::find(seen.begin(), seen.end(), s) != seen.end()) continue;
      seen.push_back(s);
      if (seg >= 0) {
        if (g_.storages[s].kind != StorageKind::kActivation ||
            g_.storages[s].producer < segments_[static_cast<size_t>(seg)].first) {
          continue;
        }
        if (--recomputed_refs_[s] == 0) {
          free_buffer(recomputed_buffer_[s], n);
          recomputed_buffer_[s] = kNoBuffer;
        }
        continue;
      }
      if (!released_by_autograd(s)) continue;
      if (--saver_refs_[s] == 0 && !held_to_end_[s]) {
        free_buffer(storage_buffer_[s], n);
        storage_buffer_[s] = kNoBuffer;
      }
    }
    if (seg >= 0 && segments_[static_cast<size_t>(seg)].last_to_run == n) {
      const Segment& done = segments_[static_cast<size_t>(seg)];
      for (StorageId s : done.held_inputs) {
        if (--saver_refs_[s] == 0 && !held_to_end_[s]) {
          free_buffer(storage_buffer_[s], n);
          storage_buffer_[s] = kNoBuffer;
        }
      }
      for (StorageId s : done.outputs) {
        if (recomputed_buffer_[s] != kNoBuffer && --recomputed_refs_[s] == 0) {
          free_buffer(recomputed_buffer_[s], n);
          recomputed_buffer_[s] = kNoBuffer;
        }
      }
      for (BufferId grad : held_grads_[static_cast<size_t>(seg)]) unref_grad(grad, n);
      held_grads_[static_cast<size_t>(seg)].clear();
    }
    // Gradients the forward made and saved: the bytes just released, handed on (the free and
    // the allocation of the same size keep every figure; the category becomes the gradient's).
    for (const GradRule& rule : spec.grads) {
      if (!rule.from_saved) continue;
      const ValueId v = node.inputs[static_cast<size_t>(rule.input)];
      produced.push_back({v, new_grad(v), false, contiguous_strides(g_.value(v).shape), false});
    }
    for (Produced& pr : produced) {
      route_gradient(pr.value, pr.buffer, pr.same_tensor, n, std::move(pr.strides), pr.view);
    }
    grads_to_buckets(n);
  }
  // Gradients that reached a value nothing consumes (inputs that need a gradient). A leaf the
  // loop holds keeps its .grad as long (enable_input_require_grads' embeddings).
  for (size_t v = 0; v < grad_slot_.size(); ++v) {
    BufferId& slot = grad_slot_[static_cast<ValueId>(v)];
    if (slot != kNoBuffer && held_to_end_[g_.value(static_cast<ValueId>(v)).storage]) {
      leaf_grads_.push_back(slot);
    } else {
      unref_grad(slot, kNone);
    }
    slot = kNoBuffer;
  }
  // FSDP's final callback reshards what no post-backward hook did.
  for (size_t u = 0; u < units_.size(); ++u) fsdp_reshard(u, kNone);
  unref_grad(seed, kNone);
}

// ---- optimizer -----------------------------------------------------------------------------

// torch.amp.GradScaler with fp16 autocast (grad_scaler.py): scale(loss) creates _scale and
// _growth_tracker on first use and a scaled loss that backward runs on. All are one-element
// tensors; step()'s unscaling is part of the optimizer step.
bool Lowerer::uses_grad_scaler() const {
  return trainfit::uses_grad_scaler(g_.target, g_.precision);
}

void Lowerer::scale_loss() {
  if (!scaler_created_) {
    alloc_new(4, Category::kOptimizerState, kNone);  // _scale
    alloc_new(4, Category::kOptimizerState, kNone);  // _growth_tracker
    scaler_created_ = true;
  }
  scaled_loss_ = alloc_new(value_bytes(g_.value(g_.loss)), Category::kTemporary, kNone);
}

BufferId Lowerer::alloc(int64_t bytes, Category category, bool host, int32_t param) {
  const BufferId b = new_buffer(bytes, category, kNone, host);
  if (param >= 0) {
    out_.buffers[b].param = param;
    out_.buffers[b].module = g_.params[param].module;
  }
  emit(b, true, kNone);
  return b;
}

BufferId Lowerer::alloc_paged(int64_t bytes, int32_t param) {
  const BufferId b = alloc(bytes, Category::kOptimizerState, /*host=*/true, param);
  out_.buffers[b].paged = true;
  return b;
}

void Lowerer::release(BufferId buffer) {
  free_buffer(buffer, kNone);
}

void Lowerer::optimizer_step(bool first_step, bool skipped) {
  phase_ = Phase::kOptimizer;
  OptimizerStep step;
  step.optimizer = config_.optimizer;
  step.target = g_.target;
  step.first_step = first_step;
  step.grad_scaler = uses_grad_scaler();
  step.skipped = skipped;
  auto add = [&](size_t p) {
    if (param_grad_[p] == kNoBuffer) return;
    const Value& v = g_.value(g_.params[p].value);
    step.params.push_back({static_cast<int32_t>(p), value_bytes(v), g_.params[p].group,
                           checked_numel(v.shape).value_or(0)});
  };
  if (fsdp()) {
    // One parameter per unit, its shard: the root's FlatParameter first (named_parameters()).
    for (const FsdpUnit& unit : units_) {
      if (unit.grad == kNoBuffer) continue;
      const DType dtype = g_.value(g_.params[unit.params.front()].value).dtype;
      const int64_t elements = unit.shard_bytes / (fsdp_mixed() ? 4 : dtype_bytes(dtype));
      step.params.push_back({unit.params.front(), unit.shard_bytes, 0, elements});
    }
  } else if (zero_redundancy()) {
    // Rank 0's local optimizer steps its shard only; _sync_params then broadcasts every
    // shard into the parameters in place.
    step.nested_steps = 2;
    for (int32_t p : zero_order_) add(static_cast<size_t>(p));
  } else {
    for (size_t p = 0; p < g_.params.size(); ++p) add(p);
  }
  lower_optimizer_step(step, *this);
}

void Lowerer::zero_grad() {
  // set_to_none=False zeroes the gradients in place: they stay, and the next backward adds
  // into them as a later micro-batch does (one GPU only: the request refuses the rest).
  if (!config_.switches.zero_grad_set_to_none) return;
  // With gradient_as_bucket_view, zero_grad(set_to_none=True) drops views: the buckets stay.
  for (BufferId& grad : param_grad_) {
    unref_grad(grad, kNone);
    grad = kNoBuffer;
  }
  for (FsdpUnit& unit : units_) {
    free_buffer(unit.grad, kNone);
    unit.grad = kNoBuffer;
  }
}

void Lowerer::end_micro_step() {
  for (size_t s = 0; s < g_.storages.size(); ++s) {
    if (held_to_end_[s] && storage_buffer_[s] != kNoBuffer) {
      free_buffer(storage_buffer_[s], kNone);
      storage_buffer_[s] = kNoBuffer;
    }
  }
  for (BufferId b : iteration_buffers_) free_buffer(b, kNone);
  iteration_buffers_.clear();
  for (BufferId b : leaf_grads_) unref_grad(b, kNone);
  leaf_grads_.clear();
  for (ValueId in : g_.inputs) {
    const StorageId s = g_.value(in).storage;
    // A cast nothing released; a scoped loop's batch autograd kept to the end.
    if (cast_input(s) || scoped_loop()) free_buffer(storage_buffer_[s], kNone);
    storage_buffer_[s] = kNoBuffer;
  }
}

// ---- FullyShardedDataParallel --------------------------------------------------------------
//
// What FSDP does on one rank (torch 1.13's fully_sharded_data_parallel.py and flat_param.py,
// checked on CPU with gloo by validation/check_fsdp.py): each unit (a wrapped module, and the
// root with the parameters left over) flattens its parameters into one FlatParameter, padded
// to a multiple of the world size, and keeps this rank's shard. Before a unit runs, the full
// parameters are gathered into one buffer; FULL_SHARD frees it after the unit's forward (not
// the root's) and gathers it again when backward reaches the unit. The unit's gradients come
// back flattened (autograd's backward of the split that made the parameters views), after
// which its post-backward hook frees the full parameters, copies the gradient padded (1.13's
// F.pad copies even when there is nothing to pad), reduce-scatters it into a new shard and
// frees both. The optimizer steps one parameter per unit, its shard.

Status Lowerer::fsdp_units() {
  const FsdpConfig& cfg = config_.distributed.fsdp;
  if (fsdp_mixed() && std::ranges::any_of(g_.modules, is_batch_norm)) {
    return unsupported(
        fmt::format("--fsdp-mixed-precision: FSDP wraps each BatchNorm of {} as its own "
                    "full-precision unit under MixedPrecision, which is not modelled",
                    g_.model),
        "estimate it without --fsdp-mixed-precision, or a model with LayerNorm or GroupNorm");
  }
  units_.assign(1, FsdpUnit{});
  units_[0].end = static_cast<NodeId>(g_.nodes.size());
  unit_of_node_.assign(g_.nodes.size(), 0);
  IdVector<int> unit_of_module(g_.modules.size(), -1);
  for (const std::string& pattern : cfg.wrap) {
    bool any = false;
    for (size_t m = 0; m < g_.modules.size(); ++m) {
      const Module& mod = g_.modules[m];
      if (!module_matches(mod.path, pattern)) continue;
      any = true;
      if (unit_of_module[m] >= 0) continue;  // matched by an earlier pattern
      for (size_t u = 1; u < units_.size(); ++u) {
        const ModuleId other = units_[u].module;
        const auto contains = [&](ModuleId outer, ModuleId inner) {
          for (ModuleId a = g_.modules[inner].parent; a != kNone; a = g_.modules[a].parent) {
            if (a == outer) return true;
          }
          return false;
        };
        if (contains(static_cast<ModuleId>(m), other) ||
            contains(other, static_cast<ModuleId>(m))) {
          return unsupported(fmt::format("--fsdp-wrap: units {} and {} nest; nested units are "
                                         "not modelled",
                                         g_.modules[other].path, mod.path),
                             "wrap either the outer modules or the inner ones");
        }
      }
      unit_of_module[m] = static_cast<int>(units_.size());
      FsdpUnit unit;
      unit.module = static_cast<ModuleId>(m);
      unit.first = mod.first_node;
      unit.end = mod.end_node;
      units_.push_back(unit);
    }
    if (!any) {
      return not_found(fmt::format("--fsdp-wrap '{}' matches no module of {}", pattern, g_.model),
                       "patterns are module paths such as 'layer2' or 'encoder.layers.*'; "
                       "trainfit summary lists the modules");
    }
  }
  for (size_t u = 1; u < units_.size(); ++u) {
    for (NodeId n = units_[u].first; n < units_[u].end; ++n) unit_of_node_[n] = static_cast<int>(u);
  }
  unit_of_param_.assign(g_.params.size(), -1);
  const int64_t world = config_.distributed.world_size;
  for (size_t p = 0; p < g_.params.size(); ++p) {
    const Param& param = g_.params[p];
    if (param.buffer) continue;
    int u = 0;
    for (ModuleId m = param.module; m != kNone && u == 0; m = g_.modules[m].parent) {
      u = std::max(u, unit_of_module[m]);
    }
    unit_of_param_[p] = u;
    units_[static_cast<size_t>(u)].params.push_back(static_cast<int32_t>(p));
  }
  for (FsdpUnit& unit : units_) {
    if (unit.params.empty()) continue;
    const DType dtype = g_.value(g_.params[unit.params.front()].value).dtype;
    int64_t elements = 0;
    int trainable = 0;
    for (int32_t p : unit.params) {
      const Value& v = g_.value(g_.params[p].value);
      if (v.dtype != dtype) {
        return unsupported(fmt::format("FSDP flattens each unit into one tensor, and {} mixes "
                                       "dtypes",
                                       g_.model),
                           "wrap the modules so that each unit holds one dtype (--fsdp-wrap)");
      }
      elements += checked_numel(v.shape).value_or(0);
      trainable += g_.params[p].trainable ? 1 : 0;
    }
    if (trainable != 0 && trainable != static_cast<int>(unit.params.size())) {
      return unsupported(
          "FSDP (torch 1.13) flattens each unit into one tensor, which cannot "
          "mix frozen and trained parameters",
          "wrap the frozen modules as their own units (--fsdp-wrap)");
    }
    const int64_t shard = ceil_div(elements, world);
    unit.flat_bytes = elements * dtype_bytes(dtype);
    unit.padded_bytes = shard * world * dtype_bytes(dtype);
    unit.flat_full_bytes = full_precision_bytes(unit.flat_bytes, dtype);
    unit.shard_bytes = full_precision_bytes(shard * dtype_bytes(dtype), dtype);
    unit.low_shard_bytes = fsdp_mixed() ? shard * dtype_bytes(dtype) : 0;
    // Every trained parameter's gradient, one per parameter that gets one this backward.
    for (int32_t p : unit.params) unit.trainable += expected_grads_[p] > 0 ? 1 : 0;
    out_.fsdp.push_back({unit.module, unit.module == kNone ? "" : g_.modules[unit.module].path,
                         unit.flat_bytes, unit.padded_bytes, unit.shard_bytes});
  }
  return {};
}

// The constructor flattens unit by unit, wrapped modules first and the root last: the flat
// tensor (torch.cat), this rank's shard cloned from it, then the flat tensor and the original
// parameters go.
void Lowerer::fsdp_construct() {
  for (size_t k = 0; k < units_.size(); ++k) {
    FsdpUnit& unit = units_[(k + 1) % units_.size()];
    if (unit.params.empty()) continue;
    const BufferId flat = alloc_new(unit.flat_full_bytes, Category::kTemporary, kNone);
    const BufferId shard = alloc_new(unit.shard_bytes, Category::kParameter, kNone);
    out_.buffers[shard].module = unit.module;
    free_buffer(flat, kNone);
    for (int32_t p : unit.params) {
      const StorageId s = g_.value(g_.params[p].value).storage;
      free_buffer(storage_buffer_[s], kNone);
      storage_buffer_[s] = kNoBuffer;
    }
  }
}

void Lowerer::fsdp_gather(size_t index, NodeId node) {
  FsdpUnit& unit = units_[index];
  if (unit.params.empty() || unit.full != kNoBuffer) return;
  // MixedPrecision gathers the shard cast to bf16, freed once gathered.
  const BufferId low =
      fsdp_mixed() ? alloc_new(unit.low_shard_bytes, Category::kParameter, node) : kNoBuffer;
  unit.full = alloc_new(unit.padded_bytes, Category::kParameter, node);
  out_.buffers[unit.full].module = unit.module;
  free_buffer(low, node);
}

BufferId Lowerer::record_function_enter(NodeId node) {
  if (g_.target.torch != TorchVersion::k1_13) return kNoBuffer;
  const BufferId placeholder = alloc_new(4, Category::kTemporary, node, /*host=*/true);
  const BufferId handle =
      alloc_new(kRecordFunctionHandleBytes, Category::kTemporary, node, /*host=*/true);
  free_buffer(placeholder, node);
  return handle;
}

// MixedPrecision's buffer_dtype: each floating buffer replaced by its bf16 copy.
void Lowerer::fsdp_cast_buffers() {
  for (const Param& p : g_.params) {
    const Value& v = g_.value(p.value);
    if (!p.buffer || !is_floating(v.dtype)) continue;
    const BufferId cast = alloc_new(g_.storages[v.storage].bytes, Category::kParameter, kNone);
    out_.buffers[cast].module = p.module;
    free_buffer(storage_buffer_[v.storage], kNone);
    storage_buffer_[v.storage] = cast;
  }
}

// The root's pre-forward casts the floating inputs to bf16; the copies are the graph's inputs.
void Lowerer::fsdp_cast_inputs() {
  for (ValueId in : g_.inputs) {
    const StorageId s = g_.value(in).storage;
    if (!cast_input(s)) continue;
    const Category c = forward_savers_[s] > 0 ? Category::kActivation : Category::kTemporary;
    storage_buffer_[s] = alloc_new(g_.storages[s].bytes, c, kNone);
  }
}

void Lowerer::fsdp_reshard(size_t index, NodeId node) {
  FsdpUnit& unit = units_[index];
  free_buffer(unit.full, node);
  unit.full = kNoBuffer;
}

void Lowerer::fsdp_post_backward(size_t index, NodeId node) {
  FsdpUnit& unit = units_[index];
  const BufferId flat = alloc_new(unit.flat_bytes, Category::kGradient, node);
  for (BufferId g : unit.grads) unref_grad(g, node);
  unit.grads.clear();
  const BufferId hook = record_function_enter(node);
  fsdp_reshard(index, node);
  // 2.x pads only what does not divide (_get_reduce_scatter_tensors).
  const bool pad = g_.target.torch != TorchVersion::k2 || unit.padded_bytes != unit.flat_bytes;
  const BufferId padded =
      pad ? alloc_new(unit.padded_bytes, Category::kCommunication, node) : kNoBuffer;
  BufferId shard =
      alloc_new(fsdp_mixed() ? unit.low_shard_bytes : unit.shard_bytes, Category::kGradient, node);
  if (fsdp_mixed()) {
    // _cast_grad_to_param_dtype: the reduced bf16 shard becomes fp32 for the optimizer.
    const BufferId full = alloc_new(unit.shard_bytes, Category::kGradient, node);
    free_buffer(shard, node);
    shard = full;
  }
  if (unit.grad == kNoBuffer) {
    unit.grad = shard;
  } else {
    free_buffer(shard, node);  // added into the gradient kept from the last micro-batch
  }
  free_buffer(hook, node);
  free_buffer(flat, node);
  free_buffer(padded, node);
}

// ---- DistributedDataParallel ---------------------------------------------------------------
//
// What DDP adds on one rank (torch/nn/parallel/distributed.py, c10d reducer.cpp and comm.cpp,
// checked against 1.13 on CPU with gloo): the constructor broadcasts parameters and buffers as
// flat copies, then allocates the gradient buckets, which stay; each forward broadcasts the
// buffers the same way; the second forward rebuilds the buckets in the order the first
// backward made gradients ready. Backward copies each gradient into its bucket without
// allocating; with gradient_as_bucket_view the .grad then becomes a view into the bucket and
// the gradient autograd made is freed. None of it depends on the world size.

// _broadcast_coalesced: the tensors grouped into flat buffers of up to 250 MiB per dtype
// (a group of one is sent as a view), at most two in flight.
void Lowerer::broadcast_coalesced(const std::vector<BucketTensor>& tensors) {
  const std::vector<GradientBucket> groups =
      assign_buckets(tensors, std::span(&kDdpBroadcastBucketBytes, 1), BucketOrder::kByFirstIndex);
  std::vector<BufferId> in_flight;
  for (const GradientBucket& group : groups) {
    if (group.tensors.size() < 2) continue;
    if (in_flight.size() >= 2) {
      free_buffer(in_flight.front(), kNone);
      in_flight.erase(in_flight.begin());
    }
    in_flight.push_back(alloc_new(group.bytes, Category::kCommunication, kNone));
  }
  for (BufferId b : in_flight) free_buffer(b, kNone);
}

void Lowerer::allocate_buckets(const std::vector<GradientBucket>& buckets) {
  // With gradient_as_bucket_view the buckets are the gradients; otherwise a second copy.
  const Category c = config_.distributed.ddp.gradient_as_bucket_view ? Category::kGradient
                                                                     : Category::kCommunication;
  buckets_.clear();
  for (const GradientBucket& b : buckets) buckets_.push_back(alloc_new(b.bytes, c, kNone));
}

void Lowerer::ddp_construct() {
  const DdpConfig& cfg = config_.distributed.ddp;
  // _sync_module_states: every parameter, then every buffer.
  std::vector<BucketTensor> states;
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t p = 0; p < g_.params.size(); ++p) {
      if (g_.params[p].buffer != (pass == 1)) continue;
      const Value& v = g_.value(g_.params[p].value);
      states.push_back({static_cast<int32_t>(states.size()), value_bytes(v), v.dtype});
    }
  }
  broadcast_coalesced(states);
  // The reducer's parameters: those that train, in parameters() order.
  ddp_index_.assign(g_.params.size(), -1);
  for (size_t p = 0; p < g_.params.size(); ++p) {
    if (g_.params[p].buffer || !g_.params[p].trainable) continue;
    const Value& v = g_.value(g_.params[p].value);
    ddp_index_[p] = static_cast<int32_t>(ddp_params_.size());
    ddp_params_.push_back({ddp_index_[p], value_bytes(v), v.dtype});
  }
  if (ddp_params_.empty()) return;
  // Iteration 1 has one bucket per dtype unless unused parameters are looked for; the buckets
  // go to the reducer last first.
  const int64_t cap = cfg.bucket_cap_bytes.value_or(kDdpBucketCapBytes);
  const std::vector<int64_t> limits = cfg.find_unused_parameters
                                          ? std::vector<int64_t>{kDdpFirstBucketBytes, cap}
                                          : std::vector<int64_t>{kNoBucketLimit};
  std::vector<GradientBucket> buckets =
      assign_buckets(ddp_params_, limits, BucketOrder::kByFirstIndex);
  std::reverse(buckets.begin(), buckets.end());
  allocate_buckets(buckets);
  out_.ddp = DdpLayout{.buckets = std::move(buckets), .rebuilt = {}};
  if (cfg.find_unused_parameters) {
    // local_used_map_: an int32 per parameter, and its copy for the allreduce (pinned host
    // memory and a device tensor on CUDA; both on the CPU there).
    const int64_t bytes = static_cast<int64_t>(ddp_params_.size()) * 4;
    alloc_new(bytes, Category::kCommunication, kNone, g_.target.device == Device::kCuda);
    alloc_new(bytes, Category::kCommunication, kNone);
  }
}

void Lowerer::ddp_pre_forward() {
  const DdpConfig& cfg = config_.distributed.ddp;
  if (++forwards_ == 2 && !cfg.find_unused_parameters && !ready_order_.empty()) {
    // _rebuild_buckets: the old buckets go first (buckets_.clear()) unless .grad views still
    // hold them (gradients accumulating over micro-batches), then the new ones in ready order.
    // PyTorch 2.x also takes an explicit bucket_cap_mb as the first bucket's size.
    const int64_t cap = cfg.bucket_cap_bytes.value_or(kDdpBucketCapBytes);
    const int64_t first =
        cfg.bucket_cap_bytes && g_.target.torch == TorchVersion::k2 ? cap : kDdpFirstBucketBytes;
    std::vector<BucketTensor> ready;
    for (int32_t i : ready_order_) ready.push_back(ddp_params_[static_cast<size_t>(i)]);
    const std::array<int64_t, 2> limits{first, cap};
    out_.ddp->rebuilt = assign_buckets(ready, limits, BucketOrder::kAsClosed);
    const bool held = std::any_of(param_grad_.begin(), param_grad_.end(),
                                  [](BufferId b) { return b == kBucketView; });
    for (BufferId b : buckets_) {
      if (held) {
        stale_buckets_.push_back(b);
      } else {
        free_buffer(b, kNone);
      }
    }
    allocate_buckets(out_.ddp->rebuilt);
  }
  if (cfg.broadcast_buffers) {
    std::vector<BucketTensor> buffers;
    for (const Param& p : g_.params) {
      if (!p.buffer) continue;
      const Value& v = g_.value(p.value);
      buffers.push_back({static_cast<int32_t>(buffers.size()), value_bytes(v), v.dtype});
    }
    broadcast_coalesced(buffers);
  }
}

// ZeroRedundancyOptimizer(model.parameters() that train, optimizer_class): rank 0's shard.
// Creating it allocates nothing; its local optimizer keeps state for the shard only.
void Lowerer::zero_partition() {
  std::vector<ShardParam> params;
  for (size_t p = 0; p < g_.params.size(); ++p) {
    if (g_.params[p].buffer || !g_.params[p].trainable) continue;
    params.push_back({static_cast<int32_t>(p),
                      checked_numel(g_.value(g_.params[p].value).shape).value_or(0),
                      g_.params[p].group});
  }
  const std::vector<std::vector<int32_t>> ranks =
      zero_redundancy_partition(params, config_.distributed.world_size);
  zero_order_ = ranks.front();
  if (!out_.ddp) out_.ddp = DdpLayout{};  // no trainable parameters: no buckets either
  for (const std::vector<int32_t>& rank : ranks) {
    int64_t elements = 0;
    for (int32_t p : rank) {
      elements +=
          checked_numel(g_.value(g_.params[static_cast<size_t>(p)].value).shape).value_or(0);
    }
    out_.ddp->shard_elements.push_back(elements);
  }
}

// gradient_as_bucket_view: the reducer's hook, right after AccumulateGrad, copies the new .grad
// into its bucket and makes .grad the bucket's view; the gradient autograd made goes.
void Lowerer::grads_to_buckets(NodeId node) {
  const int first = g_.nodes[node].op->first_ready_input;
  if (first >= 0 && static_cast<size_t>(first) < g_.nodes[node].inputs.size()) {
    const int p = param_index_[g_.nodes[node].inputs[static_cast<size_t>(first)]];
    std::stable_partition(node_ready_.begin(), node_ready_.end(),
                          [p](int32_t q) { return q == p; });
  }
  for (int32_t p : node_ready_) ready_order_.push_back(ddp_index_[p]);
  node_ready_.clear();
  for (int32_t p : to_bucket_) {
    BufferId& grad = param_grad_[static_cast<size_t>(p)];
    unref_grad(grad, node);
    grad = kBucketView;
  }
  to_bucket_.clear();
}

// Without find_unused_parameters, a parameter that gets no gradient stops DDP at the next
// iteration ("Expected to have finished reduction in the prior iteration").
Status Lowerer::check_ddp_grads() const {
  for (size_t p = 0; p < g_.params.size(); ++p) {
    if (ddp_index_[p] < 0 || param_grad_[p] != kNoBuffer) continue;
    return invalid_argument(
        fmt::format("parameter {} gets no gradient, and DDP stops on it in the second iteration",
                    g_.params[p].name),
        "add --find-unused-parameters, or --freeze it");
  }
  return {};
}

Result<EventList> Lowerer::run() {
  if (g_.loss == kNone) return invalid_argument("the model has no loss to train on");
  if (config_.grad_accum < 1) return invalid_argument("--grad-accum must be at least 1");
  const auto ops = static_cast<int64_t>(g_.nodes.size());
  if (ops * config_.grad_accum > kMaxLoweredOps) {
    return out_of_range(
        fmt::format("--grad-accum {} over the model's {} ops is more than the {} ops a step is "
                    "replayed over",
                    config_.grad_accum, ops, kMaxLoweredOps),
        fmt::format("use --grad-accum {} or fewer", std::max<int64_t>(1, kMaxLoweredOps / ops)));
  }
  if (config_.iterations < 1) return invalid_argument("iterations must be at least 1");
  TF_RETURN_IF_ERROR(find_segments());
  analyze();
  storage_buffer_.assign(g_.storages.size(), kNoBuffer);
  recomputed_buffer_.assign(g_.storages.size(), kNoBuffer);
  recomputed_refs_.assign(g_.storages.size(), 0);
  recomputed_.assign(segments_.size(), false);
  grad_slot_.assign(g_.values.size(), kNoBuffer);
  grad_strides_.assign(g_.values.size(), Dims{});
  grad_is_view_.assign(g_.values.size(), false);
  param_grad_.assign(g_.params.size(), kNoBuffer);
  received_grads_.assign(g_.params.size(), 0);
  out_.events.reserve(g_.nodes.size() * 6 * static_cast<size_t>(config_.iterations));
  phase_ = Phase::kSetup;
  if (fsdp()) TF_RETURN_IF_ERROR(fsdp_units());
  allocate_parameters();
  if (fsdp()) fsdp_construct();
  if (ddp()) ddp_construct();
  if (zero_redundancy()) zero_partition();
  for (int it = 0; it < config_.iterations; ++it) {
    iteration_ = static_cast<uint8_t>(std::min(it, 255));
    for (micro_step_ = 0; micro_step_ < config_.grad_accum; ++micro_step_) {
      const bool last = micro_step_ + 1 == config_.grad_accum;
      forward();
      if (uses_grad_scaler()) scale_loss();
      backward();
      for (BufferId b : stale_buckets_) free_buffer(b, kNone);
      stale_buckets_.clear();
      if (ddp() && it == 0 && micro_step_ == 0 && !config_.distributed.ddp.find_unused_parameters) {
        TF_RETURN_IF_ERROR(check_ddp_grads());
      }
      free_buffer(scaled_loss_, kNone);
      scaled_loss_ = kNoBuffer;
      if (!last) end_micro_step();
    }
    const bool skipped = uses_grad_scaler() && it < config_.grad_scaler_skips;
    optimizer_step(/*first_step=*/!skipped && !stepped_, skipped);
    stepped_ = stepped_ || !skipped;
    zero_grad();
    end_micro_step();
  }
  return std::move(out_);
}

}  // namespace

Result<std::vector<CheckpointSegment>> checkpoint_segments(const Graph& g,
                                                           const std::vector<std::string>& patterns,
                                                           bool reentrant) {
  std::vector<CheckpointSegment> segments;
  std::vector<std::string> paths;
  IdVector<int> segment_of(g.nodes.size(), -1);
  for (const std::string& pattern : patterns) {
    bool any = false;
    for (const Module& m : g.modules) {
      if (!module_matches(m.path, pattern) || m.first_node == m.end_node) continue;
      any = true;
      if (segment_of[m.first_node] >= 0) continue;  // inside another
      const auto id = static_cast<int>(segments.size());
      Segment s;
      s.first = m.first_node;
      s.end = m.end_node;
      s.reentrant = reentrant;
      for (NodeId n = m.first_node; n < m.end_node; ++n) segment_of[n] = id;
      segments.push_back(s);
      paths.push_back(m.path);
    }
    if (!any) {
      return not_found(fmt::format("--checkpoint '{}' matches no module of {}", pattern, g.model),
                       "patterns are module paths such as 'layer2' or 'encoder.layers.*'; "
                       "trainfit summary lists the modules");
    }
  }
  // What the loop holds is an output of the segment that produces it.
  const std::vector<StorageId> held = loop_held_storages(g);
  auto add_once = [](std::vector<StorageId>& list, StorageId s) {
    if (std::find(list.begin(), list.end(), s) == list.end()) list.push_back(s);
  };
  const bool stops_early = recompute_stops_early(g.target) && !reentrant;
  for (size_t id = 0; id < segments.size(); ++id) {
    Segment& s = segments[id];
    for (NodeId n = s.first; n < s.end; ++n) {
      const Node& node = g.nodes[n];
      if (!node.recorded || !g.on_loss_path[n]) continue;
      if (s.last_to_run == kNone) s.last_to_run = n;
      if (!node.saved.empty()) s.recompute_stop = n;
    }
    if (!stops_early) s.recompute_stop = s.end - 1;
    // Inputs produced before the segment and used in it stay alive through its backward.
    bool input_requires_grad = false;
    for (NodeId n = s.first; n < s.end; ++n) {
      for (ValueId in : g.nodes[n].inputs) {
        const Value& v = g.value(in);
        const Storage& st = g.storages[v.storage];
        const bool activation = st.kind == StorageKind::kActivation;
        if ((!activation && st.kind != StorageKind::kInput) || st.producer >= s.first) {
          continue;
        }
        input_requires_grad = input_requires_grad || v.requires_grad;
        if (activation) add_once(s.held_inputs, v.storage);
      }
    }
    if (reentrant && s.last_to_run != kNone && !input_requires_grad) {
      return invalid_argument(
          fmt::format("--checkpoint-reentrant: no input of '{}' requires grad, so "
                      "torch.utils.checkpoint(use_reentrant=True) gives the parameters inside it "
                      "no gradients",
                      paths[id]),
          "drop --checkpoint-reentrant (non-reentrant checkpointing has no such limit), or make "
          "its input require grad (the Llama-layout decoders, --hf-config's: --set "
          "input_require_grads=true, as transformers' enable_input_require_grads does)");
    }
    if (!reentrant) continue;
    for (NodeId n = s.end; n < static_cast<NodeId>(g.nodes.size()); ++n) {
      for (ValueId in : g.nodes[n].inputs) {
        const StorageId st = g.value(in).storage;
        const NodeId producer = g.storages[st].producer;
        if (producer != kNone && producer >= s.first && producer < s.end) add_once(s.outputs, st);
      }
    }
    for (StorageId st : held) {
      const NodeId producer = g.storages[st].producer;
      if (producer != kNone && producer >= s.first && producer < s.end) add_once(s.outputs, st);
    }
  }
  return segments;
}

Result<EventList> lower_training_step(const Graph& graph, const TrainingConfig& config,
                                      const LoweringOptions& options) {
  Lowerer lowerer(graph, config, options);
  return lowerer.run();
}

}  // namespace trainfit
