// Losses: cross_entropy (log_softmax + nll_loss), nll_loss, mse_loss, l1_loss, and Liger's
// fused_linear_cross_entropy.
//
// autograd: nll_loss keeps its input (the log-probabilities, which log_softmax keeps too),
// the target and a 0-dim total_weight; mse_loss keeps input and target; l1_loss is
// (input - target).abs() reduced, and abs keeps the difference.
//
// fused_linear_cross_entropy is Liger-Kernel 0.5.5's LigerFusedLinearCrossEntropyFunction
// (ops/fused_linear_cross_entropy.py), the language-model head and its loss in one autograd
// node. Its forward makes the gradients: zeros for the weight's (when it trains) and the
// input's, an fp32 loss per token and the mask of counted tokens; then for each chunk of tokens
// the chunk's logits (tokens x vocabulary, in the input's dtype), which a Triton kernel turns
// into their gradient in place, whose products with the weight it adds into the input's
// gradient (through a chunk x hidden result) and, with addmm(out=), into the weight's. A chunk
// holds ceil(BT / ceil(V / H)) tokens rounded up to a power of two, so its logits are about the
// size of the input. Python rebinds `logits_chunk` before `grad_logits_chunk`: from the second
// chunk on, two chunks are alive while the kernel runs. The gradients are saved, and the
// backward returns them (scaled in place unless the loss's gradient is 1): the whole logits
// never exist, and nothing else is kept.
#include <fmt/format.h>

#include <bit>

#include "base/size_math.h"
#include "graph/builder.h"
#include "graph/op_registry.h"

namespace trainfit {
namespace {

const AttrSpec kReduction{"reduction", AttrKind::kString, AttrValue{std::string("mean")},
                          "'mean', 'sum' or 'none'"};

Result<Dims> reduced_shape(const OpCall& call, const Dims& elementwise) {
  const std::string& r = call.attrs.get_string("reduction");
  if (r == "mean" || r == "sum") return Dims{};
  if (r == "none") return elementwise;
  return invalid_argument(fmt::format("reduction must be 'mean', 'sum' or 'none', got '{}'", r));
}

Status nll_infer(const OpCall& call, std::vector<OutputSpec>& out) {
  TF_RETURN_IF_ERROR(expect_floating(call, 0));
  const Value& x = call.in(0);
  const Value& target = call.in(1);
  if (x.shape.size() != 2) {
    return unsupported(fmt::format("nll_loss takes (N, C) scores, got {}", shape_string(x.shape)),
                       "flatten the other dims into N first");
  }
  if (target.shape != Dims{x.shape[0]} || is_floating(target.dtype)) {
    return invalid_argument(fmt::format("target must be N={} class indices, got {} {}", x.shape[0],
                                        dtype_name(target.dtype), shape_string(target.shape)));
  }
  TF_ASSIGN_OR_RETURN(Dims shape, reduced_shape(call, {x.shape[0]}));
  out.push_back(OutputSpec::fresh(std::move(shape), x.dtype));
  out.push_back(OutputSpec::aux({}, x.dtype));  // total_weight
  return {};
}

Status pair_loss_infer(const OpCall& call, std::vector<OutputSpec>& out) {
  TF_RETURN_IF_ERROR(expect_floating(call, 0));
  if (call.in(0).shape != call.in(1).shape) {
    return invalid_argument(fmt::format("input {} and target {} differ in shape",
                                        shape_string(call.in(0).shape),
                                        shape_string(call.in(1).shape)));
  }
  TF_ASSIGN_OR_RETURN(Dims shape, reduced_shape(call, call.in(0).shape));
  out.push_back(OutputSpec::fresh(std::move(shape), call.in(0).dtype));
  return {};
}

std::vector<ValueId> reduce(GraphBuilder& b, ValueId x, const std::string& reduction) {
  if (reduction == "none") return {x};
  return {b.call1(reduction, {x})};
}

// ---- fused_linear_cross_entropy ----------------------------------------------------------

// Inputs: 0 the hidden states (BT, H), 1 the targets (BT), 2 the head's weight (V, H).
struct FusedChunks {
  int64_t tokens = 0;  // BT
  int64_t hidden = 0;  // H
  int64_t vocab = 0;   // V
  int64_t chunk = 0;   // tokens per chunk
  int64_t count = 0;   // chunks
};

FusedChunks fused_chunks(const OpCall& call) {
  FusedChunks c;
  c.tokens = call.in(0).shape[0];
  c.hidden = call.in(0).shape[1];
  c.vocab = call.in(2).shape[0];
  const int64_t growth = ceil_div(c.vocab, c.hidden);  // inc_factor
  c.chunk = static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(ceil_div(c.tokens, growth))));
  c.count = ceil_div(c.tokens, c.chunk);
  return c;
}

Result<std::vector<ParamSpec>> fused_ce_params(const OpCall& call) {
  TF_RETURN_IF_ERROR(expect_rank(call, 0, 2, 2, "input"));
  const int64_t vocab = call.attrs.get_int("vocab_size");
  if (vocab < 1) return invalid_argument("vocab_size must be at least 1");
  return std::vector<ParamSpec>{{"weight", {vocab, call.in(0).shape[1]}}};
}

Status fused_ce_infer(const OpCall& call, std::vector<OutputSpec>& out) {
  TF_RETURN_IF_ERROR(expect_floating(call, 0));
  if (call.precision == Precision::kAmpFp16 || call.precision == Precision::kAmpBf16) {
    return unsupported("Liger's fused linear cross-entropy is modelled without autocast",
                       "use --precision bf16 or fp32");
  }
  const Value& x = call.in(0);
  const Value& target = call.in(1);
  const Value& weight = call.in(2);
  if (x.shape.size() != 2 || x.shape[0] < 1) {
    return invalid_argument(
        fmt::format("input must be (tokens, hidden), got {}", shape_string(x.shape)));
  }
  if (target.shape != Dims{x.shape[0]} || is_floating(target.dtype)) {
    return invalid_argument(fmt::format("target must be {} token indices, got {} {}", x.shape[0],
                                        dtype_name(target.dtype), shape_string(target.shape)));
  }
  if (weight.shape.size() != 2 || weight.shape[1] != x.shape[1] || weight.dtype != x.dtype) {
    return invalid_argument(fmt::format("weight {} {} does not match input {} {}",
                                        dtype_name(weight.dtype), shape_string(weight.shape),
                                        dtype_name(x.dtype), shape_string(x.shape)));
  }
  const FusedChunks c = fused_chunks(call);
  if (!checked_mul(c.chunk, c.vocab) || !checked_mul(c.chunk * c.vocab, dtype_bytes(x.dtype))) {
    return out_of_range("a chunk of logits overflows int64 bytes", "use a smaller batch");
  }
  out.push_back(OutputSpec::fresh({}, DType::kFloat32));  // the loss
  out.push_back(OutputSpec::aux(x.shape, x.dtype));       // grad_input
  if (call.requires_grad(2)) out.push_back(OutputSpec::aux(weight.shape, weight.dtype));
  return {};
}

std::vector<MemoryStep> fused_ce_steps(const OpCall& call) {
  using Kind = MemoryStep::Kind;
  const FusedChunks c = fused_chunks(call);
  const int64_t item = dtype_bytes(call.in(0).dtype);
  std::vector<MemoryStep> steps;
  int64_t made = 0;  // kAlloc steps so far
  auto alloc = [&](int64_t bytes) {
    steps.push_back({Kind::kAlloc, bytes});
    return made++;
  };
  auto release = [&](int64_t index) { steps.push_back({Kind::kFree, index}); };
  if (call.requires_grad(2)) steps.push_back({Kind::kOutput, 2});  // grad_weight
  steps.push_back({Kind::kOutput, 1});                             // grad_input
  alloc(c.tokens * 4);                                             // loss_1d (fp32)
  alloc(c.tokens);                                                 // target != ignore_index
  release(alloc(8));                                               // its .sum(), then .item()
  int64_t previous = -1;
  for (int64_t i = 0; i < c.count; ++i) {
    const int64_t rows = std::min(c.chunk, c.tokens - i * c.chunk);
    const int64_t logits = alloc(rows * c.vocab * item);
    if (previous >= 0) release(previous);    // grad_logits_chunk rebinds after the kernel
    release(alloc(rows * c.hidden * item));  // grad_logits_chunk @ weight, copied into place
    previous = logits;
  }
  steps.push_back({Kind::kOutput, 0});  // torch.sum(loss_1d); the locals go on return
  return steps;
}

// The bytes the chunks move: each chunk's logits are written by the product, read and written
// by the kernel, read by each gradient product; the weight is read by each product.
int64_t fused_ce_read_bytes(const OpCall& call, const Dims&) {
  const FusedChunks c = fused_chunks(call);
  const int64_t item = dtype_bytes(call.in(0).dtype);
  const int64_t products = call.requires_grad(2) ? 3 : 2;
  const int64_t logits = c.tokens * c.vocab * item;
  const int64_t weight = c.vocab * c.hidden * item;
  const int64_t input = c.tokens * c.hidden * item;
  return (3 + products - 1) * logits + c.count * products * weight + 3 * input;
}

}  // namespace

void add_loss_ops(std::vector<OpSchema>& ops) {
  OpSchema nll;
  nll.name = "nll_loss";
  nll.family = "loss";
  nll.doc = "negative log likelihood of class indices; keeps input, target, total_weight";
  nll.min_inputs = 2;
  nll.max_inputs = 2;
  nll.attrs = {kReduction,
               {"ignore_index", AttrKind::kInt, AttrValue{int64_t{-100}}, "ignored class"}};
  nll.autocast = Autocast::kFp32;
  nll.infer = nll_infer;
  nll.saved = [](const OpCall&) {
    return SavedList{saved_input(0), saved_input(1), saved_output(1)};
  };
  nll.workspace = no_workspace;
  ops.push_back(std::move(nll));

  OpSchema ce;
  ce.name = "cross_entropy";
  ce.family = "loss";
  ce.doc = "log_softmax over classes then nll_loss (nn.CrossEntropyLoss); keeps the log-probs";
  ce.min_inputs = 2;
  ce.max_inputs = 2;
  // The CPU's fp32 list has cross_entropy_loss: its input is cast before the log_softmax.
  ce.cpu_autocast = Autocast::kFp32;
  ce.attrs = {kReduction,
              {"ignore_index", AttrKind::kInt, AttrValue{int64_t{-100}}, "ignored class"},
              {"label_smoothing", AttrKind::kFloat, AttrValue{0.0}, "only 0 is modelled"}};
  ce.decompose = [](GraphBuilder& b, std::span<const ValueId> in, const Attrs& attrs) {
    if (attrs.get_float("label_smoothing") != 0.0) {
      b.fail(unsupported("cross_entropy with label_smoothing is not modelled"));
      return std::vector<ValueId>{kNone};
    }
    // LossNLL.cpp's cross_entropy_loss asks log_softmax for the input's own dtype, so under
    // CUDA autocast the log-probs stay fp16/bf16 and nll_loss (fp32 list) keeps an fp32 copy
    // of them: both are saved (the H100's allocator recordings show the two).
    const std::string dtype(dtype_name(b.value(in[0]).dtype));
    const ValueId logp = b.call1("log_softmax", {in[0]}, {{"dim", int64_t{1}}, {"dtype", dtype}});
    return std::vector<ValueId>{b.call1("nll_loss", {logp, in[1]},
                                        {{"reduction", attrs.get_string("reduction")},
                                         {"ignore_index", attrs.get_int("ignore_index")}})};
  };
  ops.push_back(std::move(ce));

  OpSchema mse;
  mse.name = "mse_loss";
  mse.family = "loss";
  mse.doc = "mean squared error (nn.MSELoss); keeps input and target";
  mse.min_inputs = 2;
  mse.max_inputs = 2;
  mse.attrs = {kReduction};
  mse.autocast = Autocast::kFp32;
  mse.infer = pair_loss_infer;
  mse.saved = [](const OpCall&) { return SavedList{saved_input(0), saved_input(1)}; };
  mse.workspace = no_workspace;
  ops.push_back(std::move(mse));

  OpSchema l1;
  l1.name = "l1_loss";
  l1.family = "loss";
  l1.doc = "mean absolute error (nn.L1Loss): (input - target).abs(); keeps the difference";
  l1.min_inputs = 2;
  l1.max_inputs = 2;
  l1.attrs = {kReduction};
  l1.autocast = Autocast::kFp32;
  l1.decompose = [](GraphBuilder& b, std::span<const ValueId> in, const Attrs& attrs) {
    const std::string& r = attrs.get_string("reduction");
    if (r != "mean" && r != "sum" && r != "none") {
      b.fail(
          invalid_argument(fmt::format("reduction must be 'mean', 'sum' or 'none', got '{}'", r)));
      return std::vector<ValueId>{kNone};
    }
    return reduce(b, b.call1("abs", {b.call1("sub", {in[0], in[1]})}), r);
  };
  ops.push_back(std::move(l1));

  OpSchema fused;
  fused.name = "fused_linear_cross_entropy";
  fused.family = "loss";
  fused.doc =
      "Liger-Kernel's lm_head + cross-entropy a chunk of tokens at a time, gradients made in "
      "forward; keeps them";
  fused.min_inputs = 2;
  fused.max_inputs = 2;
  fused.attrs = {{"vocab_size", AttrKind::kInt, std::nullopt, "rows of the head's weight"},
                 {"softcap", AttrKind::kFloat, AttrValue{0.0},
                  "cap * tanh(logits / cap) inside the kernel (no memory)"}};
  fused.params = fused_ce_params;
  fused.infer = fused_ce_infer;
  fused.saved = [](const OpCall& call) {
    SavedList saved{saved_output(1)};
    if (call.requires_grad(2)) saved.push_back(saved_output(2));
    return saved;
  };
  fused.workspace = no_workspace;
  fused.forward_steps = fused_ce_steps;
  fused.backward = [](const OpCall& call) {
    BackwardSpec spec;
    for (const int input : {0, 2}) {
      if (call.requires_grad(static_cast<size_t>(input))) {
        spec.grads.push_back({.input = input, .from_saved = true});
      }
    }
    // torch.equal(grad_output, torch.tensor(1.0)): on CUDA the scalar, eq's and all()'s
    // results, three 512-byte blocks alive together.
    if (call.on_cuda()) spec.scratch = {int64_t{3} * 512};
    return spec;
  };
  fused.uses_cublas = true;
  fused.gemm = [](const OpCall& call, const Dims&) {
    const FusedChunks c = fused_chunks(call);
    // The logits, the input's gradient and (when it trains) the weight's, all in forward.
    GemmShape g{.m = c.tokens, .n = c.vocab, .k = c.hidden, .count = 2, .operands = 0b1};
    if (call.requires_grad(2)) g.count = 3;
    return g;
  };
  fused.read_bytes = fused_ce_read_bytes;
  ops.push_back(std::move(fused));
}

}  // namespace trainfit
