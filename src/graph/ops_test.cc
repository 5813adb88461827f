// Op registry tests.
//
// 1. Every op case in tests/data/op_cases.json (measured on PyTorch CPU by
//    validation/op_cases.py, some under CPU autocast) replays through the registry under the cpu
//    profile: same output shape and dtype, same inputs kept, same bytes and count of new
//    storages kept, same parameter count.
// 2. Every registered op is complete and has at least one case here or in kSpecCases below.
// 3. CUDA-profile behaviour that cannot be measured on this machine, with expected values read
//    off the kernel sources cited in each test.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "base/size_math.h"
#include "graph/activations.h"
#include "graph/builder.h"
#include "graph/op_registry.h"
#include "graph/summary.h"

namespace trainfit {
namespace {

using nlohmann::json;

json load_cases() {
  std::ifstream f(std::string(TRAINFIT_TEST_DATA_DIR) + "/op_cases.json");
  EXPECT_TRUE(f.good()) << "missing tests/data/op_cases.json";
  return json::parse(f);
}

AttrValue to_attr(const json& v) {
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number()) return v.get<double>();
  if (v.is_string()) return v.get<std::string>();
  return v.get<Dims>();
}

struct Kept {
  std::set<int> inputs;
  int64_t new_bytes = 0;
  int new_count = 0;
};

// What every recorded node keeps, classified as graph inputs or new storages.
Kept kept_by_all_nodes(const Graph& g) {
  Kept k;
  std::set<StorageId> seen;
  for (const Node& n : g.nodes) {
    if (!n.recorded) continue;
    for (ValueId v : n.saved) {
      const StorageId sid = g.value(v).storage;
      const Storage& s = g.storages[sid];
      if (!seen.insert(sid).second) continue;
      if (s.kind == StorageKind::kInput) {
        for (size_t i = 0; i < g.inputs.size(); ++i) {
          if (g.value(g.inputs[i]).storage == sid) k.inputs.insert(static_cast<int>(i));
        }
      } else if (s.kind == StorageKind::kActivation && s.bytes > 0) {
        k.new_bytes += s.bytes;
        ++k.new_count;
      }
    }
  }
  return k;
}

struct CaseResult {
  Result<Graph> graph = Status(invalid_argument("not run"));
  ValueId first_output = kNone;
};

CaseResult run_case(const json& c, KernelTarget target) {
  BuildOptions options;
  options.target = target;
  const bool has_params = op_registry().find(c["op"].get<std::string>())->params != nullptr;
  if (!c["params_trainable"].get<bool>() && has_params) options.freeze = {""};
  // The PyTorch case converts a module to its bfloat16 input's dtype: pure bf16 here. Under
  // autocast the module stays fp32.
  if (c.contains("autocast")) {
    options.precision = Precision::kAmpBf16;
  } else {
    for (const json& in : c["inputs"]) {
      if (in["dtype"] == "bfloat16") options.precision = Precision::kBf16;
    }
  }
  GraphBuilder b("case", options);
  std::vector<ValueId> inputs;
  for (const json& in : c["inputs"]) {
    const Dims shape = in["shape"].get<Dims>();
    const DType dtype = *parse_dtype(in["dtype"].get<std::string>());
    const bool grad = in["requires_grad"].get<bool>();
    if (in["permute"].is_null()) {
      inputs.push_back(b.input("x", shape, dtype, grad));
      continue;
    }
    const Dims perm = in["permute"].get<Dims>();
    Dims base(shape.size());
    for (size_t i = 0; i < perm.size(); ++i) base[static_cast<size_t>(perm[i])] = shape[i];
    inputs.push_back(b.call1("permute", {b.input("x", base, dtype, grad)}, {{"dims", perm}}));
  }
  std::vector<ValueId> args;
  for (const json& a : c["args"]) args.push_back(inputs[a.get<size_t>()]);
  Attrs attrs;
  for (const auto& [k, v] : c["attrs"].items()) attrs.set(k, to_attr(v));
  CaseResult r;
  r.first_output = b.call(c["op"].get<std::string>(), args, attrs).front();
  r.graph = std::move(b).finish();
  return r;
}

TEST(OpCases, MatchPyTorchOnCpu) {
  const json data = load_cases();
  ASSERT_GT(data["cases"].size(), 100U);
  for (const json& c : data["cases"]) {
    SCOPED_TRACE(c["id"].get<std::string>());
    CaseResult r = run_case(c, {Device::kCpu, TorchVersion::k1_13});
    if (!r.graph.ok()) {
      ADD_FAILURE() << r.graph.status().to_string();
      continue;
    }
    const Graph& g = *r.graph;
    const json& expect = c["expect"];
    const Value& out = g.value(r.first_output);
    EXPECT_EQ(out.shape, expect["output_shape"].get<Dims>());
    EXPECT_EQ(dtype_name(out.dtype), expect["output_dtype"].get<std::string>());
    const Kept k = kept_by_all_nodes(g);
    EXPECT_EQ(k.inputs, expect["saved_inputs"].get<std::set<int>>());
    EXPECT_EQ(k.new_bytes, expect["saved_new_bytes"].get<int64_t>());
    EXPECT_EQ(k.new_count, expect["saved_new_count"].get<int>());
    int64_t params = 0;
    for (const Param& p : g.params) {
      if (!p.buffer) params += checked_numel(g.value(p.value).shape).value_or(0);
    }
    EXPECT_EQ(params, expect["parameters"].get<int64_t>());
  }
}

// Ops whose cases cannot run on PyTorch 1.13 CPU; covered by the CUDA and bitsandbytes tests
// below (the 4-bit ops also by validation/check_llm.py's QLoRA cases).
const std::set<std::string> kSpecCases = {"scaled_dot_product_attention", "sdpa_flash",
                                          "sdpa_efficient", "sdpa_cudnn", "flash_attn",
                                          "dequantize_4bit", "matmul_4bit",
                                          // A Python autograd.Function: check_llm.py measures it
                                          // in models, and the lowering test its timeline.
                                          "fused_linear_cross_entropy"};

TEST(OpRegistry, EveryOpIsCompleteAndTested) {
  std::set<std::string> tested(kSpecCases);
  const json data = load_cases();
  for (const json& c : data["cases"]) tested.insert(c["op"].get<std::string>());
  for (const OpSchema& s : op_registry().ops()) {
    SCOPED_TRACE(std::string(s.name));
    EXPECT_FALSE(s.doc.empty());
    EXPECT_FALSE(s.family.empty());
    EXPECT_LE(s.min_inputs, s.max_inputs);
    if (s.composite()) {
      EXPECT_FALSE(s.infer || s.saved || s.workspace) << "a composite has only decompose";
    } else {
      EXPECT_TRUE(s.infer && s.saved && s.workspace) << "a primitive needs infer, saved, workspace";
    }
    for (const AttrSpec& a : s.attrs) EXPECT_FALSE(a.doc.empty()) << a.name;
    // An op autocast runs in fp32 through an argument declares that argument, a string.
    if (s.autocast == Autocast::kFp32Output) {
      const auto attr = std::find_if(s.attrs.begin(), s.attrs.end(), [&](const AttrSpec& a) {
        return a.name == s.compute_dtype_attr;
      });
      ASSERT_NE(attr, s.attrs.end()) << "compute_dtype_attr '" << s.compute_dtype_attr << "'";
      EXPECT_EQ(attr->kind, AttrKind::kString);
    } else {
      EXPECT_TRUE(s.compute_dtype_attr.empty());
    }
    EXPECT_EQ(op_registry().find(s.name), &s);
    EXPECT_TRUE(tested.count(std::string(s.name))) << "no test case for " << s.name;
  }
}

// ---- CUDA profile (PyTorch 2.x), from the sources ------------------------------------------

struct Built {
  Graph graph;
  ValueId out = kNone;
};

Built build_one(std::string_view op, const std::vector<std::pair<Dims, bool>>& inputs,
                const Attrs& attrs, const BuildOptions& options = {}) {
  GraphBuilder b("case", options);
  std::vector<ValueId> ids;
  ids.reserve(inputs.size());
  for (const auto& [shape, grad] : inputs)
    ids.push_back(b.input("x", shape, b.activation_dtype(), grad));
  const ValueId out = b.call1(op, ids, attrs);
  Result<Graph> g = std::move(b).finish();
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  return {std::move(*g), out};
}

// A built node as its schema sees it: the call, and the backward the call gives.
class NodeCall {
 public:
  NodeCall(const Graph& g, const Node& n) : g_(g), n_(n) {
    for (ValueId v : n.inputs) inputs_.push_back(&g.value(v));
  }
  OpCall call() const { return {n_.attrs, inputs_, g_.target, g_.precision}; }
  BackwardSpec backward() const { return backward_of(*n_.op, call()); }

 private:
  const Graph& g_;
  const Node& n_;
  std::vector<const Value*> inputs_;
};

// nn.MultiheadAttention over x, batch first, without weights (as torchvision's ViT calls it).
Graph build_mha(const BuildOptions& options, const Dims& x_shape, int64_t heads) {
  GraphBuilder b("mha", options);
  const ValueId x = b.input("x", x_shape, DType::kFloat32, true);
  b.call("multi_head_attention", {x, x, x},
         {{"embed_dim", x_shape.back()},
          {"num_heads", heads},
          {"batch_first", true},
          {"need_weights", false}});
  return *std::move(b).finish();
}

TEST(CudaOps, DropoutKeepsAOneByteMask) {
  // Dropout.cpp: CUDA takes native_dropout (is_fused_kernel_acceptable), whose mask is bool.
  const Built b = build_one("dropout", {{{2, 4, 6, 6}, true}}, {{"p", 0.1}});
  EXPECT_EQ(kept_by_all_nodes(b.graph).new_bytes, 2 * 4 * 6 * 6);
}

TEST(CudaOps, InPlaceDropoutKeepsNoiseInTheInputDtype) {
  // dropout_ has no fused CUDA path: _dropout_impl multiplies by a noise tensor.
  const Built b = build_one("dropout", {{{2, 4, 6, 6}, true}}, {{"p", 0.1}, {"inplace", true}});
  EXPECT_EQ(kept_by_all_nodes(b.graph).new_bytes, 2 * 4 * 6 * 6 * 4);
}

TEST(CudaOps, MaxPoolComputesIndicesWithoutGrad) {
  // max_pool2d always dispatches to max_pool2d_with_indices on CUDA; unused indices are freed.
  const Built b = build_one("max_pool2d", {{{2, 4, 6, 6}, false}}, {{"kernel_size", 2}});
  ASSERT_EQ(b.graph.nodes.size(), 1U);
  ASSERT_EQ(b.graph.nodes[0].outputs.size(), 2U);
  EXPECT_EQ(b.graph.value(b.graph.nodes[0].outputs[1]).dtype, DType::kInt64);
}

TEST(CudaOps, NormStatisticsAreFp32ForBf16Inputs) {
  // layer_norm_kernel.cu: mean and rstd use the accumulate type.
  BuildOptions o;
  o.precision = Precision::kBf16;
  const Built b = build_one("layer_norm", {{{4, 8}, true}}, {{"normalized_shape", Dims{8}}}, o);
  const Node& n = b.graph.nodes.back();
  EXPECT_EQ(b.graph.value(n.outputs[1]).dtype, DType::kFloat32);
  EXPECT_EQ(b.graph.value(n.outputs[0]).dtype, DType::kBFloat16);
}

TEST(CudaOps, GlobalAveragePoolKeepsNothingOnTorch2) {
  // AdaptiveAveragePooling.cpp: output 1x1 is input.mean({-1, -2}); mean keeps no tensor in 2.x.
  const Built b =
      build_one("adaptive_avg_pool2d", {{{2, 4, 6, 6}, true}}, {{"output_size", Dims{1, 1}}});
  EXPECT_TRUE(kept_by_all_nodes(b.graph).inputs.empty());
}

TEST(CudaOps, FlashAttentionKeepsQkvOutputAndLogsumexp) {
  // _scaled_dot_product_flash_attention saves q, k, v, output and an fp32 (B, H, L) logsumexp.
  BuildOptions o;
  o.precision = Precision::kAmpBf16;
  const Built b =
      build_one("scaled_dot_product_attention",
                {{{2, 4, 16, 8}, true}, {{2, 4, 16, 8}, true}, {{2, 4, 16, 8}, true}}, {}, o);
  const Node& n = b.graph.nodes.back();
  EXPECT_EQ(n.op->name, "sdpa_flash");
  const Kept k = kept_by_all_nodes(b.graph);
  // New storages: three bf16 casts of q, k, v, the bf16 output, the fp32 logsumexp.
  EXPECT_EQ(k.new_bytes, 4 * (2 * 4 * 16 * 8 * 2) + 2 * 4 * 16 * 4);
}

// enable_gqa: eight query heads over two key/value heads, 64 tokens of 32. In bf16 the flash
// kernel takes k and v at their own heads and, in backward, expands their gradients to every
// query head (flash_api.cpp mha_bwd); in fp32 the memory-efficient kernel cannot take them
// (sdp_utils.cpp), and the math path repeats them and keeps the scores.
TEST(CudaOps, GroupedQueryAttentionRunsFlashOrTheMathPath) {
  const std::vector<std::pair<Dims, bool>> qkv{
      {{2, 8, 64, 32}, true}, {{2, 2, 64, 32}, true}, {{2, 2, 64, 32}, true}};
  BuildOptions bf16;
  bf16.precision = Precision::kBf16;
  const Built flash = build_one("scaled_dot_product_attention", qkv, {{"enable_gqa", true}}, bf16);
  const Node& n = flash.graph.nodes.back();
  ASSERT_EQ(n.op->name, "sdpa_flash");
  EXPECT_EQ(flash.graph.value(n.inputs[1]).shape, (Dims{2, 2, 64, 32}));
  // Kept besides q, k and v: the bf16 output and the fp32 (B, H, L) logsumexp.
  EXPECT_EQ(kept_by_all_nodes(flash.graph).new_bytes,
            int64_t{2} * 8 * 64 * 32 * 2 + int64_t{2} * 8 * 64 * 4);
  const NodeCall call(flash.graph, n);
  // softmax_d (2, 8, 128) and dq_accum (2, 128, 8, 32) in fp32; dk and dv expanded to the eight
  // query heads, (2, 64, 8, 32) in bf16 each.
  EXPECT_EQ(call.backward().workspace_bytes, int64_t{4} * 2 * 8 * 128 +
                                                 int64_t{4} * 2 * 128 * 8 * 32 +
                                                 2 * (int64_t{2} * 64 * 8 * 32 * 2));

  const Built math = build_one("scaled_dot_product_attention", qkv, {{"enable_gqa", true}});
  bool fused = false;
  for (const Node& node : math.graph.nodes) {
    fused = fused || node.op->name == "sdpa_flash" || node.op->name == "sdpa_efficient";
  }
  EXPECT_FALSE(fused);
  // The fp32 probabilities (2, 8, 64, 64) are among the kept tensors.
  EXPECT_GE(kept_by_all_nodes(math.graph).new_bytes, int64_t{2} * 8 * 64 * 64 * 4);

  // Without enable_gqa the fused kernels take only matching heads, and the memory-efficient one
  // refuses grouped ones outright.
  auto refused = [&](const Attrs& attrs, std::string_view message) {
    GraphBuilder b("case", {});
    std::vector<ValueId> ids;
    ids.reserve(qkv.size());
    for (const auto& [shape, grad] : qkv) ids.push_back(b.input("x", shape, DType::kFloat32, grad));
    b.call1("scaled_dot_product_attention", ids, attrs);
    ASSERT_FALSE(b.ok());
    EXPECT_NE(b.status().message().find(message), std::string::npos) << b.status().message();
  };
  refused({{"enable_gqa", true}, {"backend", std::string("efficient")}},
          "takes no grouped-query attention");
  refused({{"backend", std::string("efficient")}}, "do not match");
  // Key/value heads that do not divide the query's, or none at all, are refused in one line.
  for (const Dims& key : {Dims{1, 4, 8, 16}, Dims{1, 0, 8, 16}}) {
    GraphBuilder odd("case", {});
    const ValueId q = odd.input("q", {1, 6, 8, 16}, DType::kFloat32, true);
    const ValueId k = odd.input("k", key, DType::kFloat32, true);
    odd.call1("scaled_dot_product_attention", {q, k, k}, {{"enable_gqa", true}});
    ASSERT_FALSE(odd.ok());
    EXPECT_NE(odd.status().message().find("divide"), std::string::npos) << odd.status().message();
  }
}

// flash-attn's flash_attn_func, eight query heads over two key/value heads, 64 tokens of 32, bf16
// (flash_attn_interface.py and flash_api.cpp mha_fwd / mha_bwd).
TEST(CudaOps, FlashAttnKeepsUnrepeatedKeysAndExpandsTheirGradients) {
  BuildOptions o;
  o.precision = Precision::kBf16;
  const Built b =
      build_one("flash_attn",
                {{{2, 64, 8, 32}, true}, {{2, 64, 2, 32}, true}, {{2, 64, 2, 32}, true}}, {}, o);
  const Node& n = b.graph.nodes.back();
  // Kept besides q, k and v: the bf16 output, the fp32 (B, H, L) logsumexp, the RNG state.
  EXPECT_EQ(kept_by_all_nodes(b.graph).new_bytes,
            int64_t{2} * 64 * 8 * 32 * 2 + int64_t{2} * 8 * 64 * 4 + int64_t{2} * 8);
  const NodeCall call(b.graph, n);
  const BackwardSpec spec = call.backward();
  EXPECT_EQ(spec.grads.size(), 3U);
  // softmax_d (2, 8, 128) and dq_accum (2, 128, 8, 32) in fp32, 64 tokens rounded to 128; dk
  // and dv expanded to the eight query heads, (2, 64, 8, 32) in bf16 each.
  EXPECT_EQ(spec.workspace_bytes, int64_t{4} * 2 * 8 * 128 + int64_t{4} * 2 * 128 * 8 * 32 +
                                      2 * (int64_t{2} * 64 * 8 * 32 * 2));
  // fp32 is refused: the kernels take fp16 and bf16.
  GraphBuilder fp32("case", {});
  const ValueId x = fp32.input("x", {1, 8, 2, 16}, DType::kFloat32, true);
  fp32.call1("flash_attn", {x, x, x});
  ASSERT_FALSE(fp32.ok());
  EXPECT_NE(fp32.status().message().find("fp16 or bf16"), std::string::npos);
}

// Liger's fused linear cross-entropy keeps the input's and the weight's gradients (made in
// forward) and nothing else; its backward hands them on. Autocast is refused.
TEST(CudaOps, LigerLossKeepsOnlyTheGradientsItMadeInForward) {
  BuildOptions o;
  o.precision = Precision::kBf16;
  GraphBuilder b("case", o);
  const ValueId x = b.input("x", {100, 16}, DType::kBFloat16, true);
  const ValueId y = b.input("y", {100}, DType::kInt64);
  const ValueId loss = b.call1("fused_linear_cross_entropy", {x, y}, {{"vocab_size", int64_t{64}}});
  const Graph g = *std::move(b).finish();
  EXPECT_EQ(g.value(loss).shape, Dims{});
  EXPECT_EQ(g.value(loss).dtype, DType::kFloat32);
  EXPECT_EQ(kept_by_all_nodes(g).new_bytes, int64_t{100} * 16 * 2 + int64_t{64} * 16 * 2);
  const Node& n = g.nodes.back();
  const NodeCall call(g, n);
  const BackwardSpec spec = call.backward();
  ASSERT_EQ(spec.grads.size(), 2U);
  EXPECT_TRUE(spec.grads[0].from_saved && spec.grads[1].from_saved);
  // torch.equal(grad_output, torch.tensor(1.0)) on CUDA: three 512-byte blocks.
  EXPECT_EQ(spec.scratch, std::vector<int64_t>{1536});

  BuildOptions amp;
  amp.precision = Precision::kAmpBf16;
  GraphBuilder a("case", amp);
  const ValueId ax = a.input("x", {100, 16}, DType::kFloat32, true);
  const ValueId ay = a.input("y", {100}, DType::kInt64);
  a.call1("fused_linear_cross_entropy", {ax, ay}, {{"vocab_size", int64_t{64}}});
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("without autocast"), std::string::npos);
}

TEST(CudaOps, EfficientAttentionPadsLogsumexpTo32) {
  // Memory-efficient attention (the fp32 choice): logsumexp is (B, H, ceil(L/32)*32).
  const Built b =
      build_one("scaled_dot_product_attention",
                {{{1, 2, 40, 8}, true}, {{1, 2, 40, 8}, true}, {{1, 2, 40, 8}, true}}, {});
  const Node& n = b.graph.nodes.back();
  EXPECT_EQ(n.op->name, "sdpa_efficient");
  EXPECT_EQ(b.graph.value(n.outputs[1]).shape, (Dims{1, 2, 64}));
}

// Note [Fused attention]: on Hopper PyTorch tries cuDNN's attention first, which lays its
// output out as q is, keeps an fp32 (B, H, L, 1) statistic and accumulates dq in fp32.
TEST(CudaOps, CudnnAttentionOnHopperLaysItsOutputOutAsQ) {
  BuildOptions hopper;
  hopper.precision = Precision::kBf16;
  hopper.target.sm = 90;
  // q, k and v (2, 8, 64, 32) viewed from (64, 2, 8, 32) storage, as nn.MultiheadAttention's.
  GraphBuilder b("case", hopper);
  std::vector<ValueId> qkv;
  for (const char* name : {"q", "k", "v"}) {
    const ValueId x = b.input(name, {64, 2, 8, 32}, DType::kBFloat16, true);
    qkv.push_back(b.call1("permute", {x}, {{"dims", Dims{1, 2, 0, 3}}}));
  }
  const ValueId out = b.call1("scaled_dot_product_attention", qkv, {});
  const Graph g = *std::move(b).finish();
  const Node& n = g.nodes.back();
  ASSERT_EQ(n.op->name, "sdpa_cudnn");
  EXPECT_EQ(g.value(out).strides, g.value(qkv[0]).strides);
  EXPECT_EQ(g.value(n.outputs[1]).shape, (Dims{2, 8, 64, 1}));
  EXPECT_EQ(g.value(n.outputs[1]).dtype, DType::kFloat32);
  const NodeCall call(g, n);
  // dQ_accum (2, 8, 64, 32) and the row sums (2, 8, 64) in fp32, no padding, and the 256 bytes
  // the H100's plans asked for besides; 256 forward.
  EXPECT_EQ(call.backward().workspace_bytes,
            int64_t{4} * 2 * 8 * 64 * 32 + int64_t{4} * 2 * 8 * 64 + 256);
  EXPECT_EQ(n.op->workspace(call.call()), 256);
  // Kept besides q, k and v: the bf16 output, the statistics and the int64 seed and offset.
  EXPECT_EQ(kept_by_all_nodes(g).new_bytes,
            int64_t{2} * 8 * 64 * 32 * 2 + int64_t{2} * 8 * 64 * 4 + int64_t{2} * 8);

  // What cuDNN declines goes on to flash: a head dim above 128, a dropout not in 1/16 steps, a
  // single key; fp32 to the memory-efficient kernel; and an Ampere card never asks cuDNN.
  const auto backend = [&](const Dims& q, const Dims& kv, const Attrs& attrs,
                           const BuildOptions& o) {
    const Built c =
        build_one("scaled_dot_product_attention", {{q, true}, {kv, true}, {kv, true}}, attrs, o);
    return std::string(c.graph.nodes.back().op->name);
  };
  EXPECT_EQ(backend({1, 2, 16, 256}, {1, 2, 16, 256}, {}, hopper), "sdpa_flash");
  EXPECT_EQ(backend({1, 2, 16, 64}, {1, 2, 16, 64}, {{"dropout_p", 0.1}}, hopper), "sdpa_flash");
  EXPECT_EQ(backend({1, 2, 16, 64}, {1, 2, 16, 64}, {{"dropout_p", 0.125}}, hopper), "sdpa_cudnn");
  EXPECT_EQ(backend({1, 2, 16, 64}, {1, 2, 1, 64}, {}, hopper), "sdpa_flash");
  BuildOptions fp32 = hopper;
  fp32.precision = Precision::kFp32;
  EXPECT_EQ(backend({1, 2, 16, 64}, {1, 2, 16, 64}, {}, fp32), "sdpa_efficient");
  BuildOptions ampere = hopper;
  ampere.target.sm = 80;
  EXPECT_EQ(backend({1, 2, 16, 64}, {1, 2, 16, 64}, {}, ampere), "sdpa_flash");
  BuildOptions blackwell = hopper;
  blackwell.target.sm = 100;
  EXPECT_EQ(backend({1, 2, 16, 64}, {1, 2, 16, 64}, {}, blackwell), "sdpa_cudnn");

  // Asked for by name on the cpu profile: refused in one line.
  BuildOptions cpu;
  cpu.target.device = Device::kCpu;
  GraphBuilder refused("case", cpu);
  const ValueId x = refused.input("x", {1, 2, 16, 64}, DType::kFloat32, true);
  refused.call1("scaled_dot_product_attention", {x, x, x}, {{"backend", std::string("cudnn")}});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("CUDA GPUs only"), std::string::npos);
}

// nn.MultiheadAttention without weights under autocast: flash's (B, L, H, E) output needs the
// permute(2, 0, 1, 3).contiguous() copy before out_proj; cuDNN's, laid out as the packed q,
// does not, and the copy's bytes are no longer kept for out_proj's backward (ViT-B/16 on the
// H100: 113 MB less at batch 32, validation/gpu_cases.py).
TEST(CudaOps, MhaOnHopperKeepsNoCopyOfCudnnsOutput) {
  const auto kept = [](int sm) {
    BuildOptions o;
    o.precision = Precision::kAmpFp16;
    o.target.sm = sm;
    return kept_by_all_nodes(build_mha(o, {4, 16, 64}, 4)).new_bytes;
  };
  // The copy's bytes, less cuDNN's int64 seed and offset.
  EXPECT_EQ(kept(80) - kept(90), int64_t{16} * 4 * 64 * 2 - int64_t{2} * 8);
}

// Note [Softmax's backward]: CUDA multiplies grad by output into a temporary first; log_softmax
// and the CPU do not.
TEST(CudaOps, SoftmaxBackwardTakesAProductOnCuda) {
  const auto product = [](std::string_view op, Device device) {
    BuildOptions o;
    o.target.device = device;
    const Built b = build_one(op, {{{4, 6, 10}, true}}, {{"dim", int64_t{-1}}}, o);
    const Node& n = b.graph.nodes.back();
    const NodeCall call(b.graph, n);
    const BackwardSpec spec = call.backward();
    EXPECT_EQ(spec.grads.size(), 1U);
    return spec.grads.empty() ? std::vector<int64_t>{} : spec.grads[0].workspace;
  };
  EXPECT_EQ(product("softmax", Device::kCuda), std::vector<int64_t>{int64_t{4} * 6 * 10 * 4});
  EXPECT_TRUE(product("softmax", Device::kCpu).empty());
  EXPECT_TRUE(product("log_softmax", Device::kCuda).empty());
}

TEST(CudaOps, MathAttentionMaterializesScores) {
  const Built b = build_one("scaled_dot_product_attention",
                            {{{1, 2, 5, 8}, true}, {{1, 2, 5, 8}, true}, {{1, 2, 5, 8}, true}},
                            {{"backend", std::string("math")}});
  bool softmax = false;
  for (const Node& n : b.graph.nodes) softmax |= n.op->name == "softmax";
  EXPECT_TRUE(softmax);
}

TEST(CudaOps, MhaWithoutWeightsUsesSdpaOnTorch2) {
  // functional.py (2.x): need_weights=False calls scaled_dot_product_attention.
  const Graph g = build_mha({}, {2, 5, 8}, 2);
  bool fused = false, softmax = false;
  for (const Node& n : g.nodes) {
    fused |= n.op->name == "sdpa_efficient";
    softmax |= n.op->name == "softmax";
  }
  EXPECT_TRUE(fused);
  EXPECT_FALSE(softmax);
}

TEST(CudaOps, AutocastCachesOneWeightCastPerParameter) {
  // autocast_mode.cpp cached_cast: an fp32 leaf that requires grad is cast once per region.
  BuildOptions o;
  o.precision = Precision::kAmpFp16;
  GraphBuilder b("tied", o);
  const ValueId x = b.input("x", {3, 5}, DType::kFloat32, true);
  const ValueId w = b.parameter("w", {7, 5});
  const ValueId y1 = b.call1("linear", {x}, {{"out_features", int64_t{7}}, {"bias", false}}, {w});
  b.call1("linear", {x}, {{"out_features", int64_t{7}}, {"bias", false}}, {w});
  const Graph g = *std::move(b).finish();
  EXPECT_EQ(g.value(y1).dtype, DType::kFloat16);
  EXPECT_EQ(g.autocast_cached.size(), 1U);
  int casts = 0;
  for (const Node& n : g.nodes) casts += n.op->name == "to_copy";
  EXPECT_EQ(casts, 3);  // x twice (activations are not cached), w once
}

TEST(CudaOps, AutocastSoftmaxOfFp16ReadsStraightIntoFp32) {
  // SoftMax.cpp: CUDA half input with dtype=float uses half_to_float, no converted copy.
  BuildOptions o;
  o.precision = Precision::kAmpFp16;
  GraphBuilder b("s", o);
  ValueId x = b.input("x", {4, 8}, DType::kFloat16, true);
  x = b.call1("softmax", {x}, {{"dim", int64_t{-1}}});
  const Graph g = *std::move(b).finish();
  EXPECT_EQ(g.value(x).dtype, DType::kFloat32);
  EXPECT_EQ(g.nodes.back().workspace_bytes, 0);
}

// ---- bitsandbytes 4-bit (functional.py quantize_4bit / dequantize_4bit, MatMul4Bit) ---------

// A Linear4bit's weight (out x in) dequantized and multiplied with x, as nn::linear builds it.
struct FourBit {
  Graph graph;
  ValueId weight = kNone;
  ValueId out = kNone;
};

FourBit four_bit(int64_t out, int64_t in, bool double_quant, bool x_grad) {
  BuildOptions o;
  o.precision = Precision::kBf16;
  GraphBuilder b("q", o);
  const ValueId x = b.input("x", {2, 3, in}, DType::kBFloat16, x_grad);
  const ValueId w = b.call("dequantize_4bit", {},
                           {{"out_features", out},
                            {"in_features", in},
                            {"dtype", std::string("bfloat16")},
                            {"double_quant", double_quant}})[0];
  const ValueId y = b.call1("matmul_4bit", {x, w}, {{"double_quant", double_quant}});
  Result<Graph> g = std::move(b).finish();
  EXPECT_TRUE(g.ok()) << g.status().to_string();
  return {std::move(*g), w, y};
}

TEST(BitsAndBytes, TheWeightPacksTwoCodesPerByteBesideItsQuantState) {
  // 96 x 200 = 19,200 weights: 9,600 bytes, 300 blocks of 64, 2 nested blocks of 256.
  const FourBit q = four_bit(96, 200, true, true);
  std::map<std::string, std::pair<Dims, DType>> params;
  for (const Param& p : q.graph.params) {
    params[p.name] = {q.graph.value(p.value).shape, q.graph.value(p.value).dtype};
    EXPECT_FALSE(p.trainable) << p.name;
    EXPECT_EQ(p.packing, p.name == "weight" ? 2 : 1) << p.name;
    EXPECT_EQ(p.buffer, p.name != "weight") << p.name;
  }
  using P = std::pair<Dims, DType>;
  EXPECT_EQ(params["weight"], P({9600, 1}, DType::kUInt8));
  EXPECT_EQ(params["weight.absmax"], P({300}, DType::kUInt8));
  EXPECT_EQ(params["weight.nested_absmax"], P({2}, DType::kFloat32));
  EXPECT_EQ(params["weight.nested_quant_map"], P({256}, DType::kFloat32));
  EXPECT_EQ(params["weight.offset"], P({}, DType::kFloat32));
  EXPECT_EQ(params["weight.quant_map"], P({16}, DType::kFloat32));
  EXPECT_EQ(summarize(q.graph, nullptr).parameters, 19200);
  // The forward makes the fp32 absmax and the bf16 weight; the product keeps neither.
  const Node& dequantize = q.graph.nodes[q.graph.value(q.weight).producer];
  ASSERT_EQ(dequantize.outputs.size(), 2U);
  EXPECT_EQ(q.graph.value(dequantize.outputs[0]).shape, Dims({96, 200}));
  EXPECT_EQ(q.graph.value(dequantize.outputs[0]).dtype, DType::kBFloat16);
  EXPECT_EQ(q.graph.value(dequantize.outputs[1]).shape, Dims({300}));
  EXPECT_EQ(q.graph.value(dequantize.outputs[1]).dtype, DType::kFloat32);
  EXPECT_EQ(kept_by_all_nodes(q.graph).new_bytes, 0);
  EXPECT_TRUE(q.graph.nodes.back().saved.empty());
  EXPECT_EQ(q.graph.value(q.out).shape, Dims({2, 3, 96}));
}

TEST(BitsAndBytes, BackwardDequantizesAgainForTheInputOnly) {
  const FourBit q = four_bit(96, 200, true, true);
  const Node& mm = q.graph.nodes.back();
  const BackwardSpec spec = NodeCall(q.graph, mm).backward();
  ASSERT_EQ(spec.grads.size(), 1U);
  EXPECT_EQ(spec.grads[0].input, 0);
  EXPECT_EQ(spec.scratch, (std::vector<int64_t>{int64_t{300} * 4, int64_t{96} * 200 * 2}));
  // Without double quantization the absmax is fp32 already: only the weight is made.
  const FourBit plain = four_bit(96, 200, false, true);
  const Node& mm2 = plain.graph.nodes.back();
  EXPECT_EQ(NodeCall(plain.graph, mm2).backward().scratch,
            (std::vector<int64_t>{int64_t{96} * 200 * 2}));
  // An input that needs no gradient: MatMul4Bit is not recorded.
  EXPECT_FALSE(four_bit(96, 200, true, false).graph.nodes.back().recorded);
}

}  // namespace
}  // namespace trainfit
