#include "lower/cost.h"

#include <algorithm>
#include <array>
#include <bit>

#include "base/size_math.h"
#include "graph/device_rules.h"
#include "lower/flops.h"
#include "lower/lowering.h"
#include "lower/optimizer_step.h"

namespace trainfit {
namespace {

// multi_tensor_apply's limits (MultiTensorApply.cuh, the 4 KB kernel-argument path).
constexpr int64_t kChunkElements = 65536;
constexpr int64_t kMaxChunksPerLaunch = 320;
constexpr std::array<int64_t, 5> kMaxTensorsPerLaunch = {110, 64, 48, 36, 30};

// The arithmetic of a product whose operands arrive as `dtype`.
MathPath math_of(DType dtype, bool tf32) {
  switch (dtype) {
    case DType::kFloat16:
      return MathPath::kFp16;
    case DType::kBFloat16:
      return MathPath::kBf16;
    default:
      return tf32 ? MathPath::kTf32 : MathPath::kFp32;
  }
}

// The bytes a kernel moves for a value: its elements, or its storage if that is smaller (an
// expanded view reads each stored element once).
double moved_bytes(const Graph& g, ValueId v) {
  const Value& value = g.value(v);
  const int64_t elements = value_bytes(value);
  if (value.storage == kNone) return static_cast<double>(elements);
  return static_cast<double>(std::min(elements, g.storages[value.storage].bytes));
}

// The input whose dtype a product computes in: its first operand.
size_t first_operand(const GemmShape& g) {
  return static_cast<size_t>(std::countr_zero(g.operands));
}

// The M x K operand a product reads element by element, as its op says (Note [cuDNN's im2col
// gather]): bytes of each product.
double gathered_bytes(const OpSchema& op, const OpCall& call, const GemmShape& gemm,
                      MathPath math) {
  const int64_t elem = math_element_bytes(math);
  if (!op.gathers_im2col || !op.gathers_im2col(call, elem)) return 0;
  return static_cast<double>(gemm.batch) * static_cast<double>(gemm.m) *
         static_cast<double>(gemm.k) * static_cast<double>(elem);
}

bool is_parameter(const Graph& g, ValueId v) {
  const Value& value = g.value(v);
  if (value.storage == kNone) return false;
  const StorageKind kind = g.storages[value.storage].kind;
  return kind == StorageKind::kParameter || kind == StorageKind::kBuffer;
}

// Whether input `i` of the node is the first time that value appears among its inputs (x * x
// reads x once).
bool first_use(const Node& node, size_t i) {
  const auto begin = node.inputs.begin();
  const auto end = begin + static_cast<ptrdiff_t>(i);
  return std::find(begin, end, node.inputs[i]) == end;
}

// A value the node wrote into memory it allocated itself (not a view of an input).
bool is_fresh(const Graph& g, NodeId n, ValueId v) {
  const Value& value = g.value(v);
  return value.storage != kNone && g.storages[value.storage].producer == n;
}

class CostBuilder {
 public:
  CostBuilder(const Graph& g, const TrainingConfig& t, const CostOptions& o)
      : g_(g), training_(t), options_(o), modules_entered_(g.nodes.size(), 0) {
    // A module is called where its first op runs (the model itself is not: the step calls it
    // once, as the script's own Python).
    for (const Module& m : g.modules) {
      if (m.parent != kNone && m.first_node < m.end_node) ++modules_entered_[m.first_node];
    }
  }

  Result<StepCost> run();

 private:
  // The node's forward kernels (none for a view), counted under `part`.
  void forward(NodeId n, StepPart part);
  void backward(NodeId n);
  void optimizer();
  void optimizer_kernels(const std::vector<int64_t>& numels, int itemsize);
  void add_optimizer_op(const std::vector<int64_t>& numels, int itemsize, int depth, int accesses,
                        bool per_tensor);
  // `count` device-to-host reads of a scalar (.item()), each waited for.
  void add_item_reads(double count);
  // Host work issued before the next kernel (or, at the end of a part, on its own).
  CpuWork& host() { return pending_; }
  // Ops called from Python: through the default device's mode, if one is in force.
  void python_call(double count = 1) {
    pending_.dispatches += count;
    if (training_.optimizer.default_device_mode) pending_.mode_calls += count;
  }
  void add(KernelCost k) {
    k.repeat = k.part == StepPart::kOptimizer ? 1 : training_.grad_accum;
    k.host += pending_;
    k.host.launches += static_cast<double>(k.launches);
    pending_ = {};
    out_.kernels.push_back(k);
  }
  // The part's host work that no kernel follows.
  void flush(StepPart part) {
    if (pending_.empty()) return;
    KernelCost k;
    k.part = part;
    k.launches = 0;
    add(k);
  }
  OpCall call_of(const Node& node, std::vector<const Value*>& inputs) const;
  // A convolution on NCHW tensors: cuDNN's tensor-core kernels transpose to NHWC and back.
  bool channels_first_conv(const Node& node) const {
    return node.op->uses_cudnn && options_.memory_format == MemoryFormat::kChannelsFirst;
  }
  void add_transpose(StepPart part, double bytes, MathPath math, int64_t launches);
  // The math a node's product runs in: its first operand's dtype, and TF32 for fp32 as the
  // library's setting says (cuBLAS matmuls, cuDNN convolutions; neither for attention).
  MathPath gemm_math(const Node& node, const GemmShape& gemm) const {
    const OpSchema& op = *node.op;
    const bool tf32 = op.uses_cublas ? options_.tf32_matmul : options_.tf32_conv && op.uses_cudnn;
    return math_of(g_.value(node.inputs[first_operand(gemm)]).dtype, tf32);
  }

  const Graph& g_;
  const TrainingConfig& training_;
  const CostOptions& options_;
  StepCost out_;
  std::vector<bool> param_has_grad_;
  std::vector<int> param_of_value_;   // per value: the trainable parameter it is, or -1
  std::vector<int> modules_entered_;  // per node: the modules whose first op it is
  CpuWork pending_;
};

OpCall CostBuilder::call_of(const Node& node, std::vector<const Value*>& inputs) const {
  inputs.clear();
  for (ValueId v : node.inputs) inputs.push_back(&g_.value(v));
  return OpCall{node.attrs, inputs, g_.target, g_.precision, g_.memory_format};
}

void CostBuilder::add_transpose(StepPart part, double bytes, MathPath math, int64_t launches) {
  KernelCost t;
  t.part = part;
  t.node = out_.kernels.back().node;  // the convolution's
  t.bytes = bytes;
  t.math = math;
  t.launches = launches;
  t.tensor_core_layout = true;
  add(t);
}

void CostBuilder::forward(NodeId n, StepPart part) {
  const Node& node = g_.nodes[n];
  const OpSchema& op = *node.op;
  host().module_calls += modules_entered_[n];
  python_call();
  // list(x) and split: each piece a view C++ makes.
  if (op.data_movement && node.outputs.size() > 1)
    host().views += static_cast<double>(node.outputs.size());
  double written = 0;
  bool any_fresh = false;
  for (ValueId v : node.outputs) {
    const bool fresh = is_fresh(g_, n, v);
    any_fresh = any_fresh || fresh;
    if (fresh || !op.data_movement) written += static_cast<double>(value_bytes(g_.value(v)));
  }
  if (op.data_movement && !any_fresh) return;  // a view: no kernel
  std::vector<const Value*> inputs;
  const OpCall call = call_of(node, inputs);
  double read = 0;
  if (op.read_bytes && !node.outputs.empty()) {
    read = static_cast<double>(op.read_bytes(call, g_.value(node.outputs[0]).shape));
  } else {
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      if (first_use(node, i)) read += moved_bytes(g_, node.inputs[i]);
    }
  }
  KernelCost k;
  k.part = part;
  k.node = n;
  k.flops = node_flops(g_, node);
  k.bytes = read + written;
  if (op.gemm && !node.outputs.empty()) {
    k.is_gemm = true;
    k.gemm = op.gemm(call, g_.value(node.outputs[0]).shape);
    k.math = gemm_math(node, k.gemm);
    k.gathered_bytes = gathered_bytes(op, call, k.gemm, k.math);
    if (op.uses_cudnn) host().cudnn_calls += 1;
  }
  add(k);
  if (k.is_gemm && channels_first_conv(node)) {
    // NCHW -> NHWC of the input and the weight, NHWC -> NCHW of the output: each read once and
    // written once.
    const double operands = moved_bytes(g_, node.inputs[0]) + moved_bytes(g_, node.inputs[1]);
    add_transpose(part, 2 * (operands + written), k.math, 3);
  }
}

void CostBuilder::backward(NodeId n) {
  const Node& node = g_.nodes[n];
  const OpSchema& op = *node.op;
  std::vector<const Value*> inputs;
  const OpCall call = call_of(node, inputs);
  const BackwardSpec spec = backward_of(op, call);
  // The engine runs the node, and hands each gradient it makes on to the next node; a gradient
  // cut from the incoming one (stack's and cat's) is a view C++ makes.
  host().dispatches += 1;
  host().edges += static_cast<double>(std::max<size_t>(spec.grads.size(), 1) - 1);
  for (const GradRule& rule : spec.grads) {
    if (rule.alias_output >= 0 && !rule.same_tensor) host().views += 1;
  }
  double incoming = 0;
  for (ValueId v : node.outputs) {
    if (g_.value(v).requires_grad) incoming += static_cast<double>(value_bytes(g_.value(v)));
  }
  double saved = 0;
  for (ValueId v : node.saved) saved += moved_bytes(g_, v);
  const bool has_gemm = op.gemm && !node.outputs.empty();
  const GemmShape forward_gemm =
      has_gemm ? op.gemm(call, g_.value(node.outputs[0]).shape) : GemmShape{};
  KernelCost params;  // the parameter gradients of an op that are not products: one pass
  params.part = StepPart::kBackward;
  params.node = n;
  params.bytes = incoming + saved;
  bool any_param = false;
  const size_t first_kernel = out_.kernels.size();
  for (const GradRule& rule : spec.grads) {
    if (rule.alias_output >= 0) continue;  // a view of (or the very) incoming gradient
    if (rule.from_saved) continue;         // made in the forward
    const ValueId input = node.inputs[static_cast<size_t>(rule.input)];
    const double grad = static_cast<double>(value_bytes(g_.value(input)));
    if (has_gemm && forward_gemm.operand(static_cast<size_t>(rule.input))) {
      KernelCost k;
      k.part = StepPart::kBackward;
      k.node = n;
      k.is_gemm = true;
      k.gemm = forward_gemm;
      // dA = dY B^T is M x K over N; dB = A^T dY is K x N over M.
      const bool first = (forward_gemm.operands & ((1U << rule.input) - 1)) == 0;
      k.gemm.n = first ? forward_gemm.k : forward_gemm.n;
      k.gemm.m = first ? forward_gemm.m : forward_gemm.k;
      k.gemm.k = first ? forward_gemm.n : forward_gemm.m;
      k.flops = k.gemm.flops();
      k.bytes = incoming + saved + grad;
      k.math = gemm_math(node, forward_gemm);
      // The weight gradient reads the im2col as forward does; the input gradient does not.
      if (!first) k.gathered_bytes = gathered_bytes(op, call, forward_gemm, k.math);
      if (op.uses_cudnn) host().cudnn_calls += 1;
      add(k);
      if (channels_first_conv(node)) {
        // The incoming gradient and the other operand in, the gradient out (backward-data
        // takes the weight, backward-filter the input).
        const ValueId other = node.inputs[first ? 1 : 0];
        add_transpose(StepPart::kBackward, 2 * (incoming + moved_bytes(g_, other) + grad), k.math,
                      3);
      }
      continue;
    }
    if (is_parameter(g_, input)) {
      any_param = true;
      params.bytes += grad;
      params.flops += static_cast<double>(checked_numel(g_.value(input).shape).value_or(0));
      continue;
    }
    KernelCost k;
    k.part = StepPart::kBackward;
    k.node = n;
    k.flops = static_cast<double>(checked_numel(g_.value(input).shape).value_or(0));
    if (rule.product_first_bytes > 0) {
      // The product the kernel reads in place of the incoming gradient: a pass of its own.
      k.bytes = incoming + saved + static_cast<double>(rule.product_first_bytes);
      add(k);
    }
    if (rule.summed && rule.formula_bytes > 0) {
      // The formula writes the gradient at the output's shape, and the engine sums it down to
      // the input's (validate_outputs): two kernels, the full-size tensor written and read.
      const auto formula = static_cast<double>(rule.formula_bytes);
      k.bytes = incoming + saved + formula;
      add(k);
      k.bytes = formula + grad;
      add(k);
      continue;
    }
    k.bytes = incoming + saved + grad;
    add(k);
  }
  if (any_param) add(params);
  if (op.backward_grid && out_.kernels.size() > first_kernel) {
    out_.kernels[first_kernel].grid = op.backward_grid(call);
  }
  for (const GradRule& rule : spec.grads) {
    const int p =
        param_of_value_[static_cast<size_t>(node.inputs[static_cast<size_t>(rule.input)])];
    if (p >= 0) out_.grad_ready.push_back({out_.kernels.size(), p});
  }
}

int64_t chunks_of(int64_t numel) {
  return std::max<int64_t>(1, ceil_div(numel, kChunkElements));
}

void CostBuilder::add_optimizer_op(const std::vector<int64_t>& numels, int itemsize, int depth,
                                   int accesses, bool per_tensor) {
  KernelCost k;
  k.part = StepPart::kOptimizer;
  double elements = 0;
  for (int64_t n : numels) elements += static_cast<double>(n);
  k.bytes = elements * itemsize * accesses;
  k.flops = elements;
  k.launches =
      per_tensor ? static_cast<int64_t>(numels.size()) : multi_tensor_launches(numels, depth);
  python_call(per_tensor ? static_cast<double>(numels.size()) : 1);
  add(k);
}

void CostBuilder::add_item_reads(double count) {
  KernelCost k;
  k.part = StepPart::kOptimizer;
  k.bytes = 4 * count;  // a 4-byte scalar each, to pinned host memory
  k.launches = static_cast<int64_t>(count);
  host().syncs += count;
  if (training_.optimizer.default_device_mode) host().mode_calls += count;
  add(k);
}

// torch/optim: _single_tensor_* (for-loop), _multi_tensor_* (foreach), _fused_*; bitsandbytes'
// 8-bit optimizers update each parameter in one kernel. Every implementation runs step()'s
// Python loop over the parameters (_init_group), and zero_grad's after it.
void CostBuilder::optimizer() {
  std::vector<int64_t> numels;
  int itemsize = 4;
  for (size_t p = 0; p < g_.params.size(); ++p) {
    if (!param_has_grad_[p]) continue;
    const Value& v = g_.value(g_.params[p].value);
    numels.push_back(checked_numel(v.shape).value_or(0));
    itemsize = static_cast<int>(dtype_bytes(v.dtype));
  }
  if (numels.empty()) return;
  const auto n = static_cast<double>(numels.size());
  const OptimizerConfig& opt = training_.optimizer;
  if (uses_grad_scaler(g_.target, g_.precision)) {
    // GradScaler.unscale_: _amp_foreach_non_finite_check_and_unscale_ over the gradients, then
    // step() reads found_inf back with .item() before it lets the optimizer run.
    add_optimizer_op(numels, itemsize, 1, 2, false);
    add_item_reads(1);
  }
  host().params += n;  // _init_group
  if (is_bitsandbytes(opt.kind)) {
    // One kernel per parameter: parameter and gradient, two states read and written (8-bit or
    // fp32). Paged state moved over PCIe when the GPU is full is not counted.
    KernelCost k;
    k.part = StepPart::kOptimizer;
    const double state = is_8bit(opt.kind) ? 4.0 : 16.0;
    for (int64_t e : numels) k.bytes += static_cast<double>(e) * (3.0 * itemsize + state);
    k.launches = static_cast<int64_t>(numels.size());
    python_call(3.0 * n);
    add(k);
  } else {
    optimizer_kernels(numels, itemsize);
  }
  host().params += n;  // zero_grad's loop over the parameters
  if (!training_.switches.zero_grad_set_to_none) {
    // zero_grad(set_to_none=False) writes zeros over every gradient: one foreach kernel where the
    // optimizer was made with foreach=True or fused=True, else a zero_() per gradient (foreach
    // left at None counts as False there).
    const bool foreach = !is_bitsandbytes(opt.kind) &&
                         (opt.impl == OptimizerImpl::kForeach || opt.impl == OptimizerImpl::kFused);
    add_optimizer_op(numels, itemsize, 1, 1, !foreach);
  }
  flush(StepPart::kOptimizer);
}

void CostBuilder::optimizer_kernels(const std::vector<int64_t>& numels, int itemsize) {
  const auto n = static_cast<double>(numels.size());
  const OptimizerConfig& opt = training_.optimizer;
  const OptimizerImpl impl = resolve_optimizer_impl(opt.impl, g_.target);
  const bool adam = opt.kind == OptimizerKind::kAdam || opt.kind == OptimizerKind::kAdamW;
  const bool momentum = opt.kind == OptimizerKind::kMomentum;
  const double wd = opt.effective_weight_decay();
  if (impl == OptimizerImpl::kFused) {
    // One pass: reads parameter, gradient and state, writes parameter and state.
    const int state = adam ? 2 : (momentum ? 1 : 0);
    add_optimizer_op(numels, itemsize, 2 + state, 3 + 2 * state, false);
    return;
  }
  const bool loop = impl == OptimizerImpl::kLoop;
  // Adam's step counters: += 1 on each (a foreach kernel over GPU scalars, one host op each on
  // host scalars), then the bias corrections read each with .item(), twice in the foreach step
  // (bias_correction1 and 2 as lists), once per parameter in the loop.
  const bool device_steps = adam && opt.step_on_device;
  if (adam) {
    if (device_steps) {
      add_optimizer_op(std::vector<int64_t>(numels.size(), 1), 4, 1, 2, loop);
    } else {
      host().views += n;
    }
  }
  // Each entry: tensor lists (depth) and element accesses (reads + writes) of one op.
  struct Op {
    int depth;
    int accesses;
  };
  std::vector<Op> ops;
  if (wd != 0 && opt.kind == OptimizerKind::kAdamW) ops.push_back({1, 2});  // param.mul_
  if (wd != 0 && opt.kind != OptimizerKind::kAdamW) ops.push_back({3, 3});  // grad + wd * param
  if (adam) {
    ops.push_back({2, 3});  // exp_avg.lerp_(grad)
    ops.push_back({1, 2});  // exp_avg_sq.mul_(beta2)
    ops.push_back({3, 3});  // exp_avg_sq.addcmul_(grad, grad)
  } else if (momentum) {
    ops.push_back({1, 2});  // buf.mul_(momentum)
    ops.push_back({2, 3});  // buf.add_(grad)
    ops.push_back({2, 3});  // param.add_(buf, alpha=-lr)
  } else {
    ops.push_back({2, 3});  // param.add_(grad, alpha=-lr)
  }
  for (const Op& op : ops) add_optimizer_op(numels, itemsize, op.depth, op.accesses, loop);
  if (!adam) return;
  const double reads = loop ? n : 2 * n;
  if (device_steps) {
    add_item_reads(reads);
  } else {
    host().views += reads;
  }
  add_optimizer_op(numels, itemsize, 2, 2, loop);  // exp_avg_sq.sqrt()
  add_optimizer_op(numels, itemsize, 1, 2, loop);  // .div_(bias_correction2_sqrt)
  add_optimizer_op(numels, itemsize, 1, 2, loop);  // .add_(eps)
  add_optimizer_op(numels, itemsize, 3, 4, loop);  // param.addcdiv_(exp_avg, denom)
}

Result<StepCost> CostBuilder::run() {
  const int grad_accum = std::max(1, training_.grad_accum);
  out_.samples = g_.batch_size() * grad_accum;
  out_.micro_batches = grad_accum;
  param_has_grad_.assign(g_.params.size(), false);
  param_of_value_.assign(g_.values.size(), -1);
  for (size_t p = 0; p < g_.params.size(); ++p) {
    const Param& param = g_.params[p];
    if (!param.buffer && param.trainable)
      param_of_value_[static_cast<size_t>(param.value)] = static_cast<int>(p);
  }
  for (size_t n = 0; n < g_.nodes.size(); ++n) {
    forward(static_cast<NodeId>(n), StepPart::kForward);
    const Node& node = g_.nodes[n];
    if (!node.recorded || !g_.on_loss_path[n]) continue;
    for (ValueId v : node.inputs) {
      const int p = param_of_value_[static_cast<size_t>(v)];
      if (p >= 0 && g_.value(v).requires_grad) param_has_grad_[static_cast<size_t>(p)] = true;
    }
  }
  flush(StepPart::kForward);
  TF_ASSIGN_OR_RETURN(
      std::vector<CheckpointSegment> segments,
      checkpoint_segments(g_, training_.checkpoint, training_.checkpoint_reentrant));
  for (const CheckpointSegment& s : segments) {
    if (s.recompute_stop == kNone) continue;
    for (NodeId n = s.first; n <= s.recompute_stop; ++n) forward(n, StepPart::kRecompute);
  }
  flush(StepPart::kRecompute);
  std::vector<int> consumers(g_.values.size(), 0);  // backward nodes a gradient comes from
  for (size_t n = g_.nodes.size(); n-- > 0;) {
    const Node& node = g_.nodes[n];
    if (!node.recorded || !g_.on_loss_path[n]) continue;
    backward(static_cast<NodeId>(n));
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const ValueId v = node.inputs[i];
      if (g_.value(v).requires_grad && first_use(node, i)) ++consumers[static_cast<size_t>(v)];
    }
  }
  flush(StepPart::kBackward);
  out_.backward_end = out_.kernels.size();
  // A tensor used by several ops gets its gradient summed by the autograd engine: one add per
  // extra use (reads two, writes one).
  for (size_t v = 0; v < consumers.size(); ++v) {
    if (consumers[v] < 2) continue;
    KernelCost k;
    k.part = StepPart::kBackward;
    k.launches = consumers[v] - 1;
    const Value& value = g_.values[static_cast<ValueId>(v)];
    const double elements =
        static_cast<double>(checked_numel(value.shape).value_or(0) * k.launches);
    k.bytes = 3.0 * elements * static_cast<double>(dtype_bytes(value.dtype));
    k.flops = elements;
    add(k);
  }
  if (grad_accum > 1) {
    // Each later micro-batch's gradient is added into .grad: read both, write one.
    KernelCost k;
    k.part = StepPart::kBackward;
    for (size_t p = 0; p < g_.params.size(); ++p) {
      if (!param_has_grad_[p]) continue;
      k.bytes += 3.0 * static_cast<double>(value_bytes(g_.value(g_.params[p].value)));
      ++k.launches;
    }
    if (k.launches > 0) {
      k.host.launches = static_cast<double>(k.launches);
      out_.kernels.push_back(k);
      out_.kernels.back().repeat = grad_accum - 1;
    }
  }
  optimizer();
  for (const KernelCost& k : out_.kernels) {
    CpuWork& sum = out_.cpu[static_cast<size_t>(k.part)];
    for (int64_t r = 0; r < k.repeat; ++r) sum += k.host;
  }
  return std::move(out_);
}

}  // namespace

int64_t math_element_bytes(MathPath math) {
  return math == MathPath::kFp16 || math == MathPath::kBf16 ? 2 : 4;
}

int64_t multi_tensor_launches(const std::vector<int64_t>& numels, int depth) {
  const int64_t max_tensors =
      kMaxTensorsPerLaunch[static_cast<size_t>(std::clamp(depth, 1, 5) - 1)];
  int64_t launches = 0;
  int64_t tensors = 0;
  int64_t chunks = 0;
  for (size_t t = 0; t < numels.size(); ++t) {
    ++tensors;
    int64_t left = chunks_of(numels[t]);
    while (left > 0) {
      const int64_t take = std::min(left, kMaxChunksPerLaunch - chunks);
      chunks += take;
      left -= take;
      const bool last = t + 1 == numels.size() && left == 0;
      if (chunks == kMaxChunksPerLaunch || (tensors == max_tensors && left == 0) || last) {
        ++launches;
        chunks = 0;
        tensors = left > 0 ? 1 : 0;  // a tensor cut at the chunk limit carries on
      }
    }
  }
  return launches;
}

Result<StepCost> step_cost(const Graph& graph, const TrainingConfig& training,
                           const CostOptions& options) {
  return CostBuilder(graph, training, options).run();
}

}  // namespace trainfit
