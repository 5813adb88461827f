// Attention: multi_head_attention (nn.MultiheadAttention, a composite), and
// scaled_dot_product_attention (a composite that picks a backend) with its fused backends
// sdpa_flash, sdpa_efficient and sdpa_cudnn.
//
// nn.MultiheadAttention (torch/nn/functional.py multi_head_attention_forward) decomposes
// differently by version, and the differences are memory:
//  - PyTorch 1.13 always takes the explicit path: q, k, v are chunk views of one projection,
//    each made contiguous (three copies); scores = bmm(q / sqrt(d), k^T) -> softmax -> dropout
//    -> bmm with v. Autograd keeps the (B*H, L, S) softmax output and the dropout mask.
//  - PyTorch 2.x packs q, k, v into one contiguous (3, L, B, E) copy. need_weights=True (the
//    default of forward) takes the same explicit path; need_weights=False calls
//    scaled_dot_product_attention, which on CUDA is a fused kernel that keeps only q, k, v,
//    the output and an fp32 logsumexp.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/size_math.h"
#include "graph/builder.h"
#include "graph/device_rules.h"
#include "graph/op_registry.h"

namespace trainfit {
namespace {

// ---- scaled_dot_product_attention ----------------------------------------------------------

// Grouped-query attention: enable_gqa with fewer key/value heads than query heads (dim -3).
bool grouped(const GraphBuilder& b, std::span<const ValueId> in, const Attrs& attrs) {
  const Dims& q = b.shape(in[0]);
  const Dims& k = b.shape(in[1]);
  return attrs.get_bool("enable_gqa") && q[q.size() - 3] != k[k.size() - 3];
}

Result<SdpaBackend> choose_backend(const GraphBuilder& b, std::span<const ValueId> in,
                                   const Attrs& attrs) {
  const std::string& name = attrs.get_string("backend");
  if (name == "flash") return SdpaBackend::kFlash;
  if (name == "efficient") return SdpaBackend::kEfficient;
  if (name == "math") return SdpaBackend::kMath;
  if (name == "cudnn") {
    if (b.options().target.device == Device::kCpu) {
      return unsupported("cuDNN's attention runs on CUDA GPUs only",
                         "use backend=flash or math on the cpu profile");
    }
    return SdpaBackend::kCudnn;
  }
  if (name != "auto") {
    return invalid_argument(fmt::format("unknown attention backend '{}'", name),
                            "use auto, cudnn, flash, efficient or math");
  }
  const bool has_mask = in.size() > 3;
  if (b.options().target.device == Device::kCpu) {
    // PyTorch 2.x on CPU: the flash kernel when there is no mask, else the math path.
    return has_mask ? SdpaBackend::kMath : SdpaBackend::kFlash;
  }
  // Note [Fused attention]: fp32 and masked grouped-query attention take the math path and
  // materialize the scores.
  const Dims& k = b.shape(in[1]);
  return cuda_sdpa_backend({.dtype = b.value(in[0]).dtype,
                            .mask = has_mask,
                            .head_dim = b.shape(in[0]).back(),
                            .value_dim = b.shape(in[2]).back(),
                            .keys = k[k.size() - 2],
                            .grouped_heads = grouped(b, in, attrs),
                            .dropout = attrs.get_float("dropout_p"),
                            .sm = b.options().target.sm});
}

// x.repeat_interleave(n, dim=-3) to q's heads, as an index_select would: one copy of the
// repeated shape (an expand over a new dim, then a reshape).
ValueId repeat_heads(GraphBuilder& b, ValueId x, const Dims& q) {
  Dims grouped = b.shape(x);
  const size_t heads = grouped.size() - 3;
  const int64_t n = q[q.size() - 3] / grouped[heads];
  x = b.call1("unsqueeze", {x}, {{"dim", static_cast<int64_t>(heads + 1)}});
  grouped.insert(grouped.begin() + static_cast<std::ptrdiff_t>(heads + 1), n);
  x = b.call1("expand", {x}, {{"sizes", grouped}});
  Dims repeated = b.shape(x);
  repeated.erase(repeated.begin() + static_cast<std::ptrdiff_t>(heads + 1));
  repeated[heads] *= n;
  return b.call1("reshape", {x}, {{"shape", repeated}});
}

std::vector<ValueId> sdpa_math(GraphBuilder& b, std::span<const ValueId> in, const Attrs& attrs) {
  // _scaled_dot_product_attention_math (attention.cpp): fp16/bf16 are upcast to fp32, q and k
  // are each scaled by sqrt(scale), scores are materialized, softmax, dropout, @ v.
  ValueId q = in[0], k = in[1], v = in[2];
  const DType origin = b.value(q).dtype;
  const bool upcast = origin == DType::kFloat16 || origin == DType::kBFloat16;
  if (upcast) {
    const Attrs to_fp32{{"dtype", std::string("float32")}};
    q = b.call1("to_copy", {q}, to_fp32);
    k = b.call1("to_copy", {k}, to_fp32);
    v = b.call1("to_copy", {v}, to_fp32);
  }
  if (grouped(b, in, attrs)) {
    // pre_process_group_query_attention_input: k and v repeat_interleave'd to every query head,
    // after the upcast.
    k = repeat_heads(b, k, b.shape(in[0]));
    v = repeat_heads(b, v, b.shape(in[0]));
  }
  const double head_dim = static_cast<double>(b.shape(in[0]).back());
  const double scale =
      attrs.get_float("scale") > 0 ? attrs.get_float("scale") : 1.0 / std::sqrt(head_dim);
  const double factor = std::sqrt(scale);
  const ValueId qs = b.call1("mul_scalar", {q}, {{"value", factor}});
  const ValueId kt = b.call1("transpose", {k}, {{"dim0", int64_t{-2}}, {"dim1", int64_t{-1}}});
  const ValueId ks = b.call1("mul_scalar", {kt}, {{"value", factor}});
  const NodeId scores_from = b.node_count();
  ValueId attn = b.call1("matmul", {qs, ks});
  ValueId mask = in.size() > 3 ? in[3] : kNone;
  if (attrs.get_bool("is_causal")) {
    // The causal mask is materialized as an (L, S) float tensor.
    const Dims& s = b.shape(attn);
    mask = b.call1("full", {},
                   {{"shape", Dims{s[s.size() - 2], s.back()}},
                    {"dtype", std::string(dtype_name(b.value(attn).dtype))}});
  }
  if (mask != kNone) attn = b.call1("add", {attn, mask}, {{"inplace", true}});
  attn = b.call1("softmax", {attn}, {{"dim", int64_t{-1}}});
  if (attrs.get_float("dropout_p") > 0) {
    attn = b.call1("dropout", {attn}, {{"p", attrs.get_float("dropout_p")}});
  }
  b.mark_outputs_since(scores_from, ValueRole::kAttentionMatrix);
  ValueId out = b.call1("matmul", {attn, v});
  if (upcast) out = b.call1("to_copy", {out}, {{"dtype", std::string(dtype_name(origin))}});
  return {out};
}

std::vector<ValueId> sdpa_decompose(GraphBuilder& b, std::span<const ValueId> in,
                                    const Attrs& attrs) {
  if (b.options().target.torch == TorchVersion::k1_13) {
    b.fail(unsupported("scaled_dot_product_attention does not exist in PyTorch 1.13",
                       "the cpu profile follows PyTorch 1.13; use explicit attention there"));
    return {kNone};
  }
  for (size_t i = 0; i < 3; ++i) {
    if (b.shape(in[i]).size() < 3) {
      b.fail(invalid_argument(fmt::format("attention inputs must be (..., L, E), got {}",
                                          shape_string(b.shape(in[i])))));
      return {kNone};
    }
  }
  // Heads are dim -3, as sdp_utils' check_grouped_query_attention reads them.
  const Dims& q = b.shape(in[0]);
  const Dims& k = b.shape(in[1]);
  const Dims& v = b.shape(in[2]);
  const int64_t k_heads = k[k.size() - 3];
  if (attrs.get_bool("enable_gqa") &&
      (q.size() != k.size() || v.size() != k.size() || v[v.size() - 3] != k_heads || k_heads == 0 ||
       q[q.size() - 3] % k_heads != 0)) {
    b.fail(
        invalid_argument(fmt::format("enable_gqa needs key and value of one shape whose heads "
                                     "divide the query's: q {}, k {}, v {}",
                                     shape_string(q), shape_string(k), shape_string(v))));
    return {kNone};
  }
  std::vector<ValueId> args(in.begin(), in.end());
  if (args.size() > 3 && b.value(args[3]).dtype == DType::kBool) {
    // convert_boolean_attn_mask, before any backend: where(mask.logical_not(), -inf, 0) in q's
    // dtype, both dense over the mask's (broadcast) shape.
    const ValueId inverted = b.call1("full", {args[3]}, {{"dtype", std::string("bool")}});
    args[3] =
        b.call1("full", {inverted}, {{"dtype", std::string(dtype_name(b.value(args[0]).dtype))}});
  }
  in = args;
  Result<SdpaBackend> backend = choose_backend(b, in, attrs);
  if (!backend.ok()) {
    b.fail(backend.status());
    return {kNone};
  }
  if (*backend == SdpaBackend::kMath) {
    if (!grouped(b, in, attrs) || attrs.get_string("backend") != "auto") {
      return sdpa_math(b, in, attrs);
    }
    // No fused kernel takes these grouped heads, and PyTorch falls back to the math path
    // without a word. The scope names it where reports name modules ("SDPAMathFallback" is
    // what the estimate report looks for to say so).
    auto fallback = b.module("math_fallback", "SDPAMathFallback");
    return sdpa_math(b, in, attrs);
  }
  const char* op = *backend == SdpaBackend::kFlash   ? "sdpa_flash"
                   : *backend == SdpaBackend::kCudnn ? "sdpa_cudnn"
                                                     : "sdpa_efficient";
  if (*backend == SdpaBackend::kFlash && in.size() > 3) {
    b.fail(unsupported("the flash attention backend takes no attention mask"));
    return {kNone};
  }
  if (*backend == SdpaBackend::kEfficient && grouped(b, in, attrs)) {
    b.fail(unsupported("the memory-efficient attention backend takes no grouped-query attention",
                       "use backend=flash or math, or repeat k and v to every query head"));
    return {kNone};
  }
  const Attrs fused{{"dropout_p", attrs.get_float("dropout_p")},
                    {"is_causal", attrs.get_bool("is_causal")}};
  return {b.call1(op, std::vector<ValueId>(in.begin(), in.end()), fused)};
}

// A fused kernel's products: Q K^T and the product with V, two batches of `rows` (batch x heads)
// L x E by E x S products; q, k and v each get their gradient from products of that size.
GemmShape attention_products(int64_t rows, int64_t queries, int64_t keys, int64_t width) {
  GemmShape g;
  g.batch = rows;
  g.m = queries;
  g.n = keys;
  g.k = width;
  g.count = 2;
  g.operands = 0b111;
  return g;
}

// Strides of cuDNN's output (MHA.cpp alloc_with_matching_layout): q's own when the shapes
// agree (empty_like), else dense in the order of q's strides.
Dims matching_layout(const Value& q, const Dims& shape) {
  if (q.shape == shape) return empty_like_strides(q.shape, q.strides);
  std::vector<size_t> order(shape.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return q.strides[a] < q.strides[b]; });
  Dims strides(shape.size());
  int64_t step = 1;
  for (const size_t d : order) {
    strides[d] = step;
    step *= shape[d];
  }
  return strides;
}

// Strides of a (B, H, L, E) tensor laid out as (B, L, H, E): flash's and memory-efficient's
// output, and memory-efficient's gradients of q, k and v.
Dims heads_inner_strides(const Dims& bhle) {
  return Dims{bhle[2] * bhle[1] * bhle[3], bhle[3], bhle[1] * bhle[3], 1};
}

// Flash and memory-efficient return an output laid out as (B, L, H, E) and viewed as
// (B, H, L, E); cuDNN lays it out as q is.
Status fused_infer(const OpCall& call, std::vector<OutputSpec>& out, SdpaBackend backend) {
  for (size_t i = 0; i < 3; ++i) {
    if (call.in(i).shape.size() != 4) {
      return invalid_argument(fmt::format("fused attention needs 4-D (B, H, L, E) inputs, got {}",
                                          shape_string(call.in(i).shape)));
    }
  }
  const Dims& q = call.in(0).shape;
  const Dims& k = call.in(1).shape;
  const Dims& v = call.in(2).shape;
  // Flash and cuDNN take fewer key/value heads (grouped-query attention); efficient the same.
  const bool takes_groups = backend != SdpaBackend::kEfficient;
  if (k[1] != v[1] || k[1] == 0 || (takes_groups ? q[1] % k[1] != 0 : q[1] != k[1])) {
    return invalid_argument(fmt::format("fused attention: q {}, k {} and v {} do not match",
                                        shape_string(q), shape_string(k), shape_string(v)));
  }
  const int64_t batch = q[0], heads = q[1], len = q[2], ev = v[3];
  const Dims shape{batch, heads, len, ev};
  const Dims strides = backend == SdpaBackend::kCudnn ? matching_layout(call.in(0), shape)
                                                      : heads_inner_strides(shape);
  out.push_back(OutputSpec::fresh_strided(shape, strides, call.in(0).dtype));
  // logsumexp: fp32 (B, H, L); the memory-efficient kernel pads L to a multiple of 32, cuDNN
  // keeps it as (B, H, L, 1).
  const int64_t padded = backend == SdpaBackend::kEfficient ? ceil_div(len, 32) * 32 : len;
  out.push_back(backend == SdpaBackend::kCudnn
                    ? OutputSpec::aux({batch, heads, len, 1}, DType::kFloat32)
                    : OutputSpec::aux({batch, heads, padded}, DType::kFloat32));
  if (backend == SdpaBackend::kCudnn) {
    // The philox seed and offset (_cudnn_attention_forward makes them on the device).
    out.push_back(OutputSpec::aux({1}, DType::kInt64));
    out.push_back(OutputSpec::aux({1}, DType::kInt64));
  }
  return {};
}

OpSchema fused_schema(std::string_view name, std::string_view doc, SdpaBackend backend) {
  OpSchema s;
  s.name = name;
  s.family = "attention";
  s.doc = doc;
  s.min_inputs = 3;
  s.max_inputs = backend == SdpaBackend::kFlash ? 3 : 4;
  s.attrs = {{"dropout_p", AttrKind::kFloat, AttrValue{0.0}, "attention dropout"},
             {"is_causal", AttrKind::kBool, AttrValue{false}, "causal mask"}};
  s.infer = [backend](const OpCall& c, std::vector<OutputSpec>& out) {
    return fused_infer(c, out, backend);
  };
  s.gemm = [](const OpCall& c, const Dims&) {
    const Dims& q = c.in(0).shape;
    const Dims& k = c.in(1).shape;
    return attention_products(q[0] * q[1], q[2], k[k.size() - 2], q[3]);
  };
  s.saved = [backend](const OpCall& call) {
    SavedList saved{saved_input(0), saved_input(1), saved_input(2)};
    if (call.inputs.size() > 3) saved.push_back(saved_input(3));
    // The order they are released in: memory-efficient's node lets go of the logsumexp before
    // the output (the H100 recordings of ViT-B/16, every layer).
    if (backend == SdpaBackend::kEfficient) {
      saved.push_back(saved_output(1));
      saved.push_back(saved_output(0));
      return saved;
    }
    saved.push_back(saved_output(0));
    saved.push_back(saved_output(1));
    if (backend == SdpaBackend::kCudnn) {
      saved.push_back(saved_output(2));
      saved.push_back(saved_output(3));
    }
    return saved;
  };
  // Backward: new gradients for q, k and v, plus fp32 scratch (Note [Fused attention]); flash
  // and cuDNN with fewer key/value heads also expand dk and dv to every query head (B, S, H, E)
  // before they are summed (cuDNN's frontend: dK_fullhead, dV_fullhead).
  const auto bytes = [backend](const OpCall& call) {
    const Dims& q = call.in(0).shape;
    const Dims& v = call.in(2).shape;
    return fused_attention_bytes(backend, {.rows = q[0] * q[1],
                                           .queries = q[2],
                                           .keys = v[2],
                                           .head_dim = q[3],
                                           .value_dim = v[3],
                                           .dtype = call.in(2).dtype,
                                           .sm = call.target.sm});
  };
  // Note [Memory-efficient attention's backward]: it reads the gradient in the output's layout.
  if (backend == SdpaBackend::kEfficient) s.dense_grad = DenseGrad::kOutputLayoutFirst;
  s.backward = [backend, bytes](const OpCall& call) {
    BackwardSpec spec = backward_of(OpSchema{}, call);
    const Dims& q = call.in(0).shape;
    const Dims& k = call.in(1).shape;
    FusedAttentionBytes b = bytes(call);
    spec.workspace_bytes = b.backward_workspace;
    spec.kernel_steps = std::move(b.backward_steps);
    if (backend == SdpaBackend::kEfficient) {
      // Its gradients are made as (B, L, H, E) and handed on transposed, as its output is.
      for (GradRule& rule : spec.grads) {
        if (rule.input > 2) continue;
        rule.strides = heads_inner_strides(call.in(static_cast<size_t>(rule.input)).shape);
      }
    }
    if (backend != SdpaBackend::kEfficient && k[1] != q[1]) {
      const int64_t expanded = k[0] * q[1] * k[2] * dtype_bytes(call.in(1).dtype);
      spec.workspace_bytes += expanded * (k[3] + call.in(2).shape[3]);
    }
    return spec;
  };
  s.workspace = [bytes](const OpCall& call) -> int64_t { return bytes(call).forward_workspace; };
  return s;
}

// ---- flash_attn (the flash-attn package) ---------------------------------------------------

// flash_attn_func(q, k, v, causal=True) as transformers' flash_attention_2 calls it: q (B, L, H,
// D), k and v (B, S, Hk, D) with Hk dividing H (grouped-query attention without repeating k and v).
// FlashAttnFunc keeps q, k, v, the output, the fp32 (B, H, L) logsumexp and the two-int64 RNG
// state (flash_attn_interface.py; mha_fwd allocates the output like q).
Status flash_attn_infer(const OpCall& call, std::vector<OutputSpec>& out) {
  for (size_t i = 0; i < 3; ++i) {
    const Value& x = call.in(i);
    if (x.shape.size() != 4) {
      return invalid_argument(
          fmt::format("flash_attn needs 4-D (B, L, H, D) inputs, got {}", shape_string(x.shape)));
    }
    if (x.dtype != DType::kFloat16 && x.dtype != DType::kBFloat16) {
      return invalid_argument(
          fmt::format("flash-attention runs on fp16 or bf16, not {}", dtype_name(x.dtype)),
          "train in --precision bf16 or amp-bf16, or use attention=sdpa");
    }
    if (x.strides.back() != 1) {
      return invalid_argument("flash_attn needs inputs whose last dim is contiguous");
    }
  }
  const Dims& q = call.in(0).shape;
  const Dims& k = call.in(1).shape;
  if (k[0] != q[0] || k[3] != q[3] || k[2] == 0 || q[2] % k[2] != 0 ||
      call.in(2).shape[1] != k[1] || call.in(2).shape[2] != k[2]) {
    return invalid_argument(fmt::format("flash_attn: q {}, k {} and v {} do not match",
                                        shape_string(q), shape_string(k),
                                        shape_string(call.in(2).shape)));
  }
  const int64_t dv = call.in(2).shape[3];
  out.push_back(OutputSpec::fresh({q[0], q[1], q[2], dv}, call.in(0).dtype));
  out.push_back(OutputSpec::aux({q[0], q[2], q[1]}, DType::kFloat32));  // softmax_lse
  out.push_back(OutputSpec::aux({2}, DType::kInt64));                   // rng_state
  return {};
}

OpSchema flash_attn_schema() {
  OpSchema s;
  s.name = "flash_attn";
  s.family = "attention";
  s.doc =
      "flash-attn's flash_attn_func on (B, L, H, D), k and v with fewer heads allowed; keeps q, "
      "k, v, the output, fp32 logsumexp and the RNG state";
  s.min_inputs = 3;
  s.max_inputs = 3;
  s.attrs = {{"dropout_p", AttrKind::kFloat, AttrValue{0.0}, "attention dropout"},
             {"causal", AttrKind::kBool, AttrValue{true}, "causal mask"}};
  s.infer = flash_attn_infer;
  s.workspace = no_workspace;  // mha_fwd splits the keys only when few blocks would run
  s.gemm = [](const OpCall& c, const Dims&) {
    const Dims& q = c.in(0).shape;  // (B, L, H, D)
    return attention_products(q[0] * q[2], q[1], c.in(1).shape[1], q[3]);
  };
  s.saved = [](const OpCall&) {
    return SavedList{saved_input(0),  saved_input(1),  saved_input(2),
                     saved_output(0), saved_output(1), saved_output(2)};
  };
  // Backward (FlashAttnFunc.backward, then flash_api.cpp mha_bwd): dq, dk and dv like q, k and v;
  // softmax_d fp32 (B, H, L rounded to 128); dq_accum fp32 (B, L rounded to 128, H, D rounded to
  // 32, or to 64 above 128); with fewer key/value heads, dk and dv expanded to every query head
  // (B, S, H, D) before they are summed into dk and dv. Not yet measured on a GPU.
  s.backward = [](const OpCall& call) {
    BackwardSpec spec = backward_of(OpSchema{}, call);
    const Dims& q = call.in(0).shape;
    const Dims& k = call.in(1).shape;
    const int64_t rows = ceil_div(q[1], 128) * 128;
    const int64_t width = q[3] <= 128 ? ceil_div(q[3], 32) * 32 : ceil_div(q[3], 64) * 64;
    spec.workspace_bytes = 4 * q[0] * q[2] * rows + 4 * q[0] * rows * q[2] * width;
    if (k[2] != q[2]) {
      const int64_t rows_by_heads = k[0] * k[1] * q[2] * dtype_bytes(call.in(1).dtype);
      spec.workspace_bytes += rows_by_heads * (k[3] + call.in(2).shape[3]);
    }
    return spec;
  };
  return s;
}

// ---- multi_head_attention -----------------------------------------------------------------

struct Mha {
  GraphBuilder& b;
  const Attrs& attrs;
  int64_t embed = 0, heads = 0, head_dim = 0;
  bool bias = true;
  ValueId in_w = kNone, in_b = kNone, out_w = kNone, out_b = kNone;

  // The packed weight (and bias) as functional.py splits them: whole, w.split([E, 2E]) for
  // encoder-decoder attention, or w.chunk(3). The backward of a split or chunk assembles one
  // full-size gradient from its pieces.
  std::vector<ValueId> pieces(ValueId t, const Dims& sizes) const {
    if (sizes.size() == 1) return {t};
    return b.call("split", {t}, {{"sizes", sizes}, {"dim", int64_t{0}}});
  }
  std::vector<ValueId> project(const std::vector<ValueId>& xs, const Dims& sizes) const {
    const std::vector<ValueId> w = pieces(in_w, sizes);
    const std::vector<ValueId> bs =
        bias ? pieces(in_b, sizes) : std::vector<ValueId>(sizes.size(), kNone);
    std::vector<ValueId> out;
    for (size_t i = 0; i < sizes.size(); ++i) {
      std::vector<ValueId> params{w[i]};
      if (bias) params.push_back(bs[i]);
      out.push_back(
          b.call1("linear", {xs[i]}, {{"out_features", sizes[i]}, {"bias", bias}}, params));
    }
    return out;
  }
  // (L, B, E) -> (B*H, L, hd)
  ValueId split_heads(ValueId t, bool make_contiguous) const {
    if (make_contiguous) t = b.call1("contiguous", {t});
    const int64_t len = b.dim(t, 0);
    const int64_t batch = b.dim(t, 1);
    t = b.call1("view", {t}, {{"shape", Dims{len, batch * heads, head_dim}}});
    return b.call1("transpose", {t}, {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}});
  }
  // proj (..., n*E) -> n contiguous pieces (n, ..., E), as 2.x's _in_projection_packed does.
  std::vector<ValueId> packed_pieces(ValueId proj, int64_t n) const {
    ValueId t = b.call1("unflatten", {proj}, {{"dim", int64_t{-1}}, {"sizes", Dims{n, embed}}});
    t = b.call1("unsqueeze", {t}, {{"dim", int64_t{0}}});
    t = b.call1("transpose", {t}, {{"dim0", int64_t{0}}, {"dim1", int64_t{-2}}});
    t = b.call1("squeeze", {t}, {{"dim", int64_t{-2}}});
    t = b.call1("contiguous", {t});
    std::vector<ValueId> out;
    for (int64_t i = 0; i < n; ++i) {
      out.push_back(b.call1("select", {t}, {{"dim", int64_t{0}}, {"index", i}}));
    }
    return out;
  }
};

std::vector<ValueId> mha_decompose(GraphBuilder& b, std::span<const ValueId> in,
                                   const Attrs& attrs) {
  Mha m{b, attrs};
  m.embed = attrs.get_int("embed_dim");
  m.heads = attrs.get_int("num_heads");
  m.bias = attrs.get_bool("bias");
  if (m.heads < 1 || m.embed % m.heads != 0) {
    b.fail(invalid_argument(
        fmt::format("embed_dim {} is not divisible by num_heads {}", m.embed, m.heads)));
    return {kNone};
  }
  m.head_dim = m.embed / m.heads;
  const size_t n_params = m.bias ? 4 : 2;
  const size_t n_act = in.size() - n_params;
  m.in_w = in[n_act];
  m.in_b = m.bias ? in[n_act + 1] : kNone;
  m.out_w = in[n_act + (m.bias ? 2 : 1)];
  m.out_b = m.bias ? in[n_act + 3] : kNone;
  ValueId query = in[0], key = in[1], value = in[2];
  const ValueId key_padding_mask = n_act > 3 ? in[3] : kNone;
  for (ValueId t : {query, key, value}) {
    if (b.shape(t).size() != 3 || b.shape(t).back() != m.embed) {
      b.fail(invalid_argument(fmt::format("attention inputs must be 3-D with {} features, got {}",
                                          m.embed, shape_string(b.shape(t)))));
      return {kNone};
    }
  }
  const bool torch2 = b.options().target.torch == TorchVersion::k2;
  const bool same_qk = query == key;
  const bool same_kv = key == value;
  const DType dtype = b.value(query).dtype;
  // 2.x converts a bool key_padding_mask to float (-inf where set) before anything else.
  ValueId kpm = key_padding_mask;
  if (kpm != kNone && torch2 && b.value(kpm).dtype == DType::kBool) {
    ValueId f = b.call1("full", {kpm}, {{"dtype", std::string(dtype_name(dtype))}});
    kpm = b.call1("masked_fill", {f, kpm}, {{"value", -INFINITY}, {"inplace", true}});
  }
  if (attrs.get_bool("batch_first")) {
    const Attrs swap{{"dim0", int64_t{1}}, {"dim1", int64_t{0}}};
    query = b.call1("transpose", {query}, swap);
    key = same_qk ? query : b.call1("transpose", {key}, swap);
    value = same_kv ? key : b.call1("transpose", {value}, swap);
  }
  const int64_t len = b.dim(query, 0), batch = b.dim(query, 1), src = b.dim(key, 0);
  const int64_t e = m.embed;

  // In-projection.
  ValueId q = kNone, k = kNone, v = kNone;
  if (same_qk && same_kv) {
    const ValueId proj = m.project({query}, {3 * e})[0];
    std::vector<ValueId> p;
    if (torch2) {
      p = m.packed_pieces(proj, 3);
    } else {
      p = b.call("chunk", {proj}, {{"chunks", int64_t{3}}, {"dim", int64_t{-1}}});
    }
    q = p[0], k = p[1], v = p[2];
  } else if (same_kv) {
    const std::vector<ValueId> qkv = m.project({query, key}, {e, 2 * e});
    q = qkv[0];
    const ValueId kv = qkv[1];
    std::vector<ValueId> p;
    if (torch2) {
      p = m.packed_pieces(kv, 2);
    } else {
      p = b.call("chunk", {kv}, {{"chunks", int64_t{2}}, {"dim", int64_t{-1}}});
    }
    k = p[0], v = p[1];
  } else {
    const std::vector<ValueId> qkv = m.project({query, key, value}, {e, e, e});
    q = qkv[0], k = qkv[1], v = qkv[2];
  }
  // 1.13 makes each piece contiguous; 2.x views them directly.
  q = m.split_heads(q, !torch2);
  k = m.split_heads(k, !torch2);
  v = m.split_heads(v, !torch2);

  // key_padding_mask (B, S) -> (B*H, 1, S) additive mask.
  ValueId mask = kNone;
  if (kpm != kNone) {
    ValueId t = b.call1("view", {kpm}, {{"shape", Dims{batch, 1, 1, src}}});
    t = b.call1("expand", {t}, {{"sizes", Dims{-1, m.heads, -1, -1}}});
    mask = b.call1("reshape", {t}, {{"shape", Dims{batch * m.heads, 1, src}}});
    if (b.value(mask).dtype == DType::kBool) {
      const ValueId f = b.call1("full", {mask}, {{"dtype", std::string(dtype_name(dtype))}});
      mask = b.call1("masked_fill", {f, mask}, {{"value", -INFINITY}, {"inplace", true}});
    }
  }
  const double dropout = attrs.get_bool("training") ? attrs.get_float("dropout") : 0.0;
  const bool need_weights = attrs.get_bool("need_weights");

  ValueId out = kNone;
  ValueId weights = kNone;
  if (torch2 && !need_weights) {
    std::vector<ValueId> sdpa_in{
        b.call1("view", {q}, {{"shape", Dims{batch, m.heads, len, m.head_dim}}}),
        b.call1("view", {k}, {{"shape", Dims{batch, m.heads, src, m.head_dim}}}),
        b.call1("view", {v}, {{"shape", Dims{batch, m.heads, src, m.head_dim}}})};
    if (mask != kNone) {
      sdpa_in.push_back(b.call1("view", {mask}, {{"shape", Dims{batch, m.heads, -1, src}}}));
    }
    out = b.call1("scaled_dot_product_attention", sdpa_in, {{"dropout_p", dropout}});
    out = b.call1("permute", {out}, {{"dims", Dims{2, 0, 1, 3}}});
  } else {
    const double root = std::sqrt(static_cast<double>(m.head_dim));
    const ValueId scaled = torch2 ? b.call1("mul_scalar", {q}, {{"value", 1.0 / root}})
                                  : b.call1("div_scalar", {q}, {{"value", root}});
    const ValueId kt = b.call1("transpose", {k}, {{"dim0", int64_t{-2}}, {"dim1", int64_t{-1}}});
    const NodeId scores_from = b.node_count();
    ValueId attn =
        mask != kNone ? b.call1("baddbmm", {mask, scaled, kt}) : b.call1("bmm", {scaled, kt});
    attn = b.call1("softmax", {attn}, {{"dim", int64_t{-1}}});
    if (dropout > 0) attn = b.call1("dropout", {attn}, {{"p", dropout}});
    b.mark_outputs_since(scores_from, ValueRole::kAttentionMatrix);
    out = b.call1("bmm", {attn, v});
    out = b.call1("transpose", {out}, {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}});
    weights = attn;
  }
  out = b.call1("contiguous", {out});
  out = b.call1("view", {out}, {{"shape", Dims{len * batch, e}}});
  std::vector<ValueId> out_params{m.out_w};
  if (m.bias) out_params.push_back(m.out_b);
  out = b.call1("linear", {out}, {{"out_features", e}, {"bias", m.bias}}, out_params);
  // The weights are averaged once the output is projected (the output's view, which allocates
  // nothing, is made last so that it is what the module returns).
  if (need_weights) {
    weights = b.call1("view", {weights}, {{"shape", Dims{batch, m.heads, len, src}}});
    if (attrs.get_bool("average_attn_weights")) {
      if (torch2) {
        weights = b.call1("mean", {weights}, {{"dims", Dims{1}}});
      } else {
        weights = b.call1("sum", {weights}, {{"dims", Dims{1}}});
        weights = b.call1("div_scalar", {weights}, {{"value", static_cast<double>(m.heads)}});
      }
    }
  } else {
    weights = kNone;
  }
  out = b.call1("view", {out}, {{"shape", Dims{len, batch, e}}});
  if (attrs.get_bool("batch_first")) {
    out = b.call1("transpose", {out}, {{"dim0", int64_t{1}}, {"dim1", int64_t{0}}});
  }
  // Until the call returns, its arguments and the function's locals stay referenced, and they
  // go as Python unwinds (the H100 recording of ACT): multi_head_attention_forward's merged
  // mask and q with its frame, the module's float key-padding mask with its forward, the
  // weights when the caller takes [0], the inputs with the caller's frame.
  for (ValueId held : {mask, q, kpm, weights, in[0], in[1], in[2]}) b.hold(held);
  return {out, weights};
}

}  // namespace

void add_attention_ops(std::vector<OpSchema>& ops) {
  OpSchema mha;
  mha.name = "multi_head_attention";
  mha.family = "attention";
  mha.doc =
      "nn.MultiheadAttention as its forward runs it (explicit softmax with need_weights, SDPA "
      "without on PyTorch 2)";
  mha.min_inputs = 3;
  mha.max_inputs = 4;
  mha.attrs = {
      {"embed_dim", AttrKind::kInt, std::nullopt, "model width E"},
      {"num_heads", AttrKind::kInt, std::nullopt, "heads (E must divide)"},
      {"dropout", AttrKind::kFloat, AttrValue{0.0}, "attention-weight dropout"},
      {"bias", AttrKind::kBool, AttrValue{true}, "projection biases"},
      {"batch_first", AttrKind::kBool, AttrValue{false}, "inputs are (B, L, E)"},
      {"need_weights", AttrKind::kBool, AttrValue{true}, "return attention weights"},
      {"average_attn_weights", AttrKind::kBool, AttrValue{true}, "average them over heads"},
      {"training", AttrKind::kBool, AttrValue{true}, "apply dropout"}};
  mha.params = [](const OpCall& call) -> Result<std::vector<ParamSpec>> {
    const int64_t e = call.attrs.get_int("embed_dim");
    if (e < 1) return invalid_argument("embed_dim must be positive");
    std::vector<ParamSpec> p{{"in_proj_weight", {3 * e, e}}};
    if (call.attrs.get_bool("bias")) p.push_back({"in_proj_bias", {3 * e}});
    p.push_back({"out_proj.weight", {e, e}});
    if (call.attrs.get_bool("bias")) p.push_back({"out_proj.bias", {e}});
    return p;
  };
  mha.decompose = mha_decompose;
  ops.push_back(std::move(mha));

  OpSchema sdpa;
  sdpa.name = "scaled_dot_product_attention";
  sdpa.family = "attention";
  sdpa.doc = "F.scaled_dot_product_attention on (B, H, L, E): flash, memory-efficient or math";
  sdpa.min_inputs = 3;
  sdpa.max_inputs = 4;
  sdpa.attrs = {{"dropout_p", AttrKind::kFloat, AttrValue{0.0}, "attention dropout"},
                {"is_causal", AttrKind::kBool, AttrValue{false}, "causal mask"},
                {"scale", AttrKind::kFloat, AttrValue{0.0}, "softmax scale (0: 1/sqrt(E))"},
                {"backend", AttrKind::kString, AttrValue{std::string("auto")},
                 "auto, cudnn, flash, efficient or math"},
                {"enable_gqa", AttrKind::kBool, AttrValue{false},
                 "k and v with fewer heads than q, each serving a group of query heads"}};
  sdpa.autocast = Autocast::kLower;
  sdpa.decompose = sdpa_decompose;
  ops.push_back(std::move(sdpa));

  ops.push_back(fused_schema("sdpa_flash",
                             "flash attention kernel; keeps q, k, v, output and fp32 logsumexp",
                             SdpaBackend::kFlash));
  ops.push_back(flash_attn_schema());
  ops.push_back(fused_schema(
      "sdpa_efficient",
      "memory-efficient attention kernel; keeps q, k, v, mask, output and fp32 logsumexp",
      SdpaBackend::kEfficient));
  ops.push_back(fused_schema(
      "sdpa_cudnn",
      "cuDNN's attention (Hopper, Blackwell); output laid out as q, keeps q, k, v, mask, output "
      "and fp32 softmax statistics",
      SdpaBackend::kCudnn));
}

}  // namespace trainfit
