#include "sources/trace/trace.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "estimate/gpu_catalog.h"
#include "graph/device_rules.h"
#include "sources/trace/trace_model.h"
#include "sources/trace/trace_summary.h"

namespace trainfit {
namespace {

// One parameter, one input, an activation and a gradient; sizes grow by 100 bytes per sample.
std::string run_json(int batch, int per_sample_activation = 100) {
  const int input = 16 + 100 * batch;
  const int activation = per_sample_activation * batch;
  return "{\"batch\":" + std::to_string(batch) +
         R"(,"iterations":1,"events":[
      {"phase":"setup","iteration":0},
      {"alloc":0,"bytes":4096,"category":"parameter","dtype":"float32","param":0},
      {"phase":"forward","iteration":1},
      {"alloc":1,"bytes":)" +
         std::to_string(input) + R"(,"category":"input","op":"aten::randn"},
      {"alloc":2,"bytes":)" +
         std::to_string(activation) +
         R"(,"category":"activation","op":"aten::relu","module":"body.act","dtype":"float32"},
      {"phase":"backward","iteration":1},
      {"free":2},
      {"alloc":3,"bytes":4096,"category":"gradient","op":"aten::mm","param":0},
      {"phase":"optimizer","iteration":1},
      {"free":3},
      {"free":1}]})";
}

std::string trace_json(const std::string& runs) {
  return R"({"format":"trainfit-trace","version":1,"model":"tiny","torch":"1.13",
    "optimizer":{"type":"SGD","kind":"sgd","impl":"loop","groups":[{"params":[0]}]},
    "parameters":[{"name":"body.w","bytes":4096,"dtype":"float32","trainable":true}],
    "runs":[)" +
         runs + "]}";
}

// A trace of run_json(2) and run_json(3) that also names its modules and their outputs.
std::string with_modules(const std::string& modules) {
  std::string text = trace_json(run_json(2) + "," + run_json(3));
  text.insert(text.rfind("\"runs\""), "\"modules\":[" + modules + "],");
  return text;
}

// The trace with an "autocast" field of `value`.
std::string with_autocast(const std::string& value, const std::string& runs = "") {
  std::string text = trace_json(runs.empty() ? run_json(1) + "," + run_json(2) : runs);
  text.insert(text.rfind("\"runs\""), "\"autocast\":" + value + ",");
  return text;
}

// A run whose forward is one 3x3 convolution of `channels` to 16 channels, 32x32, fp32: its
// output and, in backward, the weight's gradient, each with the "conv" record `fields` (by
// default the true one at this batch).
std::string conv_run(int batch, const std::string& fields = "") {
  const std::string b = std::to_string(batch);
  const std::string problem =
      fields.empty() ? R"("input":[)" + b + R"(,3,32,32],"weight":[16,3,3,3],"output":[)" + b +
                           R"(,16,32,32],"stride":[1,1],"padding":[1,1],"dilation":[1,1],)"
                           R"("groups":1)"
                     : fields;
  const std::string output = std::to_string(batch * 16 * 32 * 32 * 4);
  return "{\"batch\":" + b + R"(,"iterations":1,"events":[
      {"phase":"setup","iteration":0},
      {"alloc":0,"bytes":4096,"category":"parameter","dtype":"float32","param":0},
      {"phase":"forward","iteration":1},
      {"alloc":1,"bytes":)" +
         output + R"(,"category":"activation","op":"aten::convolution","dtype":"float32",)" +
         R"("conv":{"role":"output",)" + problem + R"(}},
      {"phase":"backward","iteration":1},
      {"free":1},
      {"alloc":2,"bytes":1728,"category":"gradient","op":"aten::convolution_backward",)" +
         R"("dtype":"float32","param":0,"conv":{)" +
         (fields.empty() ? R"("role":"grad_weight",)" + problem : fields) + R"(}},
      {"phase":"optimizer","iteration":1},
      {"free":2}]})";
}

std::string conv_trace(const std::string& fields) {
  return trace_json(conv_run(1, fields));
}

// nn.MultiheadAttention's core as PyTorch 1.13 runs it with need_weights=False, marked as the
// tracer marks it: 2 heads, 16 queries and keys of 4 wide, so q, k, v and the output are 512
// bytes a sample and the scores 2048. `mark` replaces the output's "attention" record.
std::string attention_run(int batch, const std::string& mark = "") {
  const std::string b = std::to_string(batch);
  const std::string qkv = std::to_string(512 * batch);
  const std::string scores = std::to_string(2048 * batch);
  const std::string shape = "[" + std::to_string(2 * batch) + ",16,4]";
  const std::string record =
      mark.empty() ? R"({"role":"output","first":5,"q":2,"k":3,"v":4,"q_shape":)" + shape +
                         R"(,"k_shape":)" + shape + R"(,"v_shape":)" + shape + R"(,"mask":false})"
                   : mark;
  const auto alloc = [](int id, const std::string& bytes, const std::string& rest) {
    return "{\"alloc\":" + std::to_string(id) + ",\"bytes\":" + bytes + "," + rest + "},";
  };
  const std::string f = R"("category":"temporary","dtype":"float32","module":"attn","op":)";
  const std::string a = R"("category":"activation","dtype":"float32","module":"attn","op":)";
  return "{\"batch\":" + b + R"(,"iterations":1,"events":[{"phase":"setup","iteration":0},
      {"alloc":0,"bytes":4096,"category":"parameter","dtype":"float32","param":0},
      {"phase":"forward","iteration":1},)" +
         alloc(1, qkv, R"("category":"input","op":"aten::randn")") +
         alloc(2, qkv, f + R"("aten::clone")") + alloc(3, qkv, a + R"("aten::clone")") +
         alloc(4, qkv, a + R"("aten::clone")") + alloc(5, qkv, a + R"("aten::div")") +
         alloc(6, scores, f + R"("aten::bmm")") + alloc(7, scores, a + R"("aten::_softmax")") +
         R"({"free":6},)" + alloc(8, qkv, f + R"("aten::bmm","attention":)" + record) +
         alloc(9, qkv, a + R"("aten::clone")") + R"({"free":2},{"free":8},
      {"phase":"backward","iteration":1},{"attention_backward":8},{"free":9},)" +
         alloc(10, qkv, f + R"("aten::bmm","attention":{"role":"grad_v","of":8})") +
         alloc(11, scores, f + R"("aten::bmm")") + R"({"free":4},)" +
         alloc(12, scores, f + R"("aten::_softmax_backward_data")") + R"({"free":7},{"free":11},)" +
         alloc(13, qkv, f + R"("aten::bmm","attention":{"role":"grad_k","of":8})") +
         alloc(14, qkv, f + R"("aten::bmm")") + R"({"free":3},{"free":5},{"free":12},)" +
         alloc(15, qkv, f + R"("aten::div","attention":{"role":"grad_q","of":8})") +
         R"({"free":14},)" +
         alloc(16, "4096", R"("category":"gradient","op":"aten::mm","param":0)") +
         R"({"free":10},{"free":13},{"free":15},{"free":1},
      {"phase":"optimizer","iteration":1},{"free":16}]})";
}

// A run whose backward sums a (batch, 197, 768) gradient over its first two dimensions into a
// bias gradient, as a linear layer's bias gradient is summed; `mark` replaces the "reduce".
std::string reduce_run(int batch, const std::string& mark = "") {
  const std::string b = std::to_string(batch);
  const std::string record =
      mark.empty() ? R"({"input":[)" + b + R"(,197,768],"dims":[0,1],"contiguous":true})" : mark;
  return "{\"batch\":" + b + R"(,"iterations":1,"events":[{"phase":"setup","iteration":0},
      {"alloc":0,"bytes":3072,"category":"parameter","dtype":"float32","param":0},
      {"phase":"forward","iteration":1},
      {"alloc":1,"bytes":)" +
         std::to_string(batch * 197 * 768 * 4) + R"(,"category":"input","op":"aten::randn"},
      {"phase":"backward","iteration":1},
      {"alloc":2,"bytes":3072,"category":"gradient","op":"aten::sum","dtype":"float32",)" +
         R"("param":0,"reduce":)" + record + R"(},
      {"free":1},{"phase":"optimizer","iteration":1},{"free":2}]})";
}

EstimateOptions cpu_options() {
  EstimateOptions o;
  o.device = cpu_profile();
  return o;
}

TEST(TraceParse, ReadsRunsSortedByBatch) {
  Result<Trace> t = parse_trace(trace_json(run_json(2) + "," + run_json(1)), "t.json");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  ASSERT_EQ(t->runs.size(), 2u);
  EXPECT_EQ(t->runs[0].batch, 1);
  EXPECT_EQ(t->runs[1].batch, 2);
  EXPECT_EQ(t->runs[0].events.size(), 7u);  // phase marks are not events
  EXPECT_EQ(t->optimizer.kind, OptimizerKind::kSgd);
}

TEST(TraceModelTest, ExtrapolatesAffineSizes) {
  Result<Trace> t = parse_trace(trace_json(run_json(1) + "," + run_json(2)), "t.json");
  ASSERT_TRUE(t.ok());
  Result<TraceModel> m = fit_trace(std::move(t).value());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  // Batch 10: parameter 4096 + input 1016 + activation 1000 alive at the end of forward.
  Result<Estimate> e = estimate_trace(*m, 10, cpu_options());
  ASSERT_TRUE(e.ok()) << e.status().to_string();
  EXPECT_EQ(e->activation_bytes, 1000);
  EXPECT_EQ(e->peak_allocated_bytes, 4096 + 1016 + 4096);  // input and gradient in backward
  EXPECT_EQ(e->parameters, 1024);
}

TEST(TraceModelTest, RejectsRunsThatDoNotLineUp) {
  std::string two = run_json(2);
  two.replace(two.find("aten::relu"), 10, "aten::gelu");
  Result<Trace> t = parse_trace(trace_json(run_json(1) + "," + two), "t.json");
  ASSERT_TRUE(t.ok());
  Result<TraceModel> m = fit_trace(std::move(t).value());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("do not line up"), std::string::npos);
  EXPECT_NE(m.status().message().find("aten::gelu"), std::string::npos);
  // Where, as the trace numbers iterations (from 1).
  EXPECT_NE(m.status().message().find("(forward of iteration 1, "), std::string::npos)
      << m.status().message();
}

TEST(TraceModelTest, RejectsSizesThatAreNotAffine) {
  // batch x batch: 100 bytes at batch 1, 400 at 2, 900 at 3.
  const std::string runs = run_json(1, 100) + "," + run_json(2, 200) + "," + run_json(3, 300);
  Result<Trace> t = parse_trace(trace_json(runs), "t.json");
  ASSERT_TRUE(t.ok());
  Result<TraceModel> m = fit_trace(std::move(t).value());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("not affine"), std::string::npos);
  // With two runs the negative size at batch 0 gives it away.
  Result<Trace> two = parse_trace(trace_json(run_json(1, 100) + "," + run_json(2, 200)), "t");
  ASSERT_TRUE(two.ok());
  EXPECT_FALSE(fit_trace(std::move(two).value()).ok());
}

TEST(TraceModelTest, OneRunReplaysOnlyItsBatch) {
  Result<Trace> t = parse_trace(trace_json(run_json(4)), "t.json");
  ASSERT_TRUE(t.ok());
  Result<TraceModel> m = fit_trace(std::move(t).value());
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(estimate_trace(*m, 4, cpu_options()).ok());
  EXPECT_FALSE(estimate_trace(*m, 8, cpu_options()).ok());
}

TEST(TraceModelTest, OverflowingBatchIsAnError) {
  Result<Trace> t = parse_trace(trace_json(run_json(1) + "," + run_json(2)), "t.json");
  ASSERT_TRUE(t.ok());
  Result<TraceModel> m = fit_trace(std::move(t).value());
  ASSERT_TRUE(m.ok());
  Result<Estimate> e = estimate_trace(*m, INT64_MAX / 2, cpu_options());
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), ErrorCode::kOutOfRange);
}

TEST(TraceParse, MalformedInputsAreOneClearError) {
  const std::string good = trace_json(run_json(1) + "," + run_json(2));
  const std::string bad[] = {
      "",
      "not json",
      "[]",
      R"({"format":"other"})",
      R"({"format":5})",
      R"({"format":"trainfit-trace","version":99})",
      R"({"format":"trainfit-trace","version":1})",
      R"({"format":"trainfit-trace","version":1,"parameters":{},"optimizer":{},"runs":[]})",
      trace_json(R"({"batch":0,"iterations":1,"events":[]})"),
      trace_json(R"({"batch":1,"iterations":1,"events":[{"free":7}]})"),
      trace_json(R"({"batch":1,"iterations":1,"events":[{"alloc":1,"bytes":-5}]})"),
      trace_json(
          R"({"batch":1,"iterations":1,"events":[{"alloc":1,"bytes":8},{"alloc":1,"bytes":8}]})"),
      trace_json(R"({"batch":1,"iterations":1,"events":[{"alloc":1,"bytes":8,"category":"x"}]})"),
      trace_json(R"({"batch":1,"iterations":1,"events":[{"alloc":1,"bytes":8,"param":5}]})"),
      trace_json(R"({"batch":1,"iterations":1,"events":[{"phase":"lunch","iteration":1}]})"),
      trace_json(R"({"batch":1,"iterations":1,"events":[{"alloc":1,"bytes":1e400}]})"),
      trace_json(
          R"({"batch":1,"iterations":1,"events":[{"alloc":1,"bytes":99999999999999999999}]})"),
      trace_json(R"({"batch":1,"iterations":1,"events":[7]})"),
      trace_json(run_json(1) + "," + run_json(1)),
      trace_json(R"({"batch":1,"iterations":1,"outputs":[1],"events":[]})"),
      trace_json(R"({"batch":1,"iterations":1,"outputs":{"a":5},"events":[]})"),
      trace_json(R"({"batch":1,"iterations":1,"outputs":{"a":[2,-1]},"events":[]})"),
      trace_json(R"({"batch":1,"iterations":1,"outputs":{"a":[2.5]},"events":[]})"),
      with_modules(R"({"path":"a"})"),
      with_autocast("5"),
      with_autocast(R"({"dtype":"float32","lists":"cuda"})"),
      with_autocast(R"({"dtype":"bfloat16","lists":"tpu"})"),
      with_autocast(R"({"lists":"cuda"})"),
      conv_trace(R"("role":"kernel","input":[1,3,8,8],"weight":[8,3,3,3],"output":[1,8,8,8],)"
                 R"("stride":[1,1],"padding":[1,1],"dilation":[1,1],"groups":1)"),
      conv_trace(R"("role":"output","input":[1,3,8],"weight":[8,3,3,3],"output":[1,8,8,8],)"
                 R"("stride":[1,1],"padding":[1,1],"dilation":[1,1],"groups":1)"),
      conv_trace(R"("role":"output","input":[1,3,8,8],"weight":[8,3,3,3],"output":[1,8,8,8],)"
                 R"("stride":[1],"padding":[1,1],"dilation":[1,1],"groups":1)"),
      conv_trace(R"("role":"output","input":[1,3,8,-8],"weight":[8,3,3,3],"output":[1,8,8,8],)"
                 R"("stride":[1,1],"padding":[1,1],"dilation":[1,1],"groups":1)"),
      conv_trace(R"("role":"output","input":[1,3,8,8],"weight":[8,3,3,3],"output":[1,8,8,8],)"
                 R"("stride":[1,1],"padding":[1,1],"dilation":[1,1],"groups":0)"),
      with_modules(R"({"path":3,"type":"Linear"})"),
      with_modules("7"),
      trace_json(attention_run(1, "5")),
      trace_json(attention_run(1, R"({"role":"scores"})")),
      trace_json(attention_run(1, R"({"role":"output","first":5,"q":99,"k":3,"v":4,)"
                                  R"("q_shape":[2,16,4],"k_shape":[2,16,4],"v_shape":[2,16,4]})")),
      trace_json(attention_run(1, R"({"role":"output","first":5,"q":2,"k":3,"v":4,)"
                                  R"("q_shape":[2,16],"k_shape":[2,16,4],"v_shape":[2,16,4]})")),
      trace_json(attention_run(1, R"({"role":"output","first":5,"q":2,"k":3,"v":4,)"
                                  R"("q_shape":[2,16,4],"k_shape":[2,16,8],"v_shape":[2,16,4]})")),
      trace_json(attention_run(1, R"({"role":"output","first":5,"q":2,"k":3,"v":4,)"
                                  R"("q_shape":[2,16,4],"k_shape":[2,16,4]})")),
      trace_json(R"({"batch":1,"iterations":1,"events":[{"attention_backward":3}]})"),
      trace_json(R"({"batch":1,"iterations":1,"events":[{"alloc":1,"bytes":8,)"
                 R"("attention":{"role":"grad_q","of":7}}]})"),
      trace_json(reduce_run(1, "[1]")),
      trace_json(reduce_run(1, R"({"input":[1,197,768],"dims":[1,0]})")),
      trace_json(reduce_run(1, R"({"input":[1,197,768],"dims":[3]})")),
      trace_json(reduce_run(1, R"({"input":[1,197,768]})")),
      trace_json(reduce_run(1, R"({"dims":[0]})")),
      trace_json(reduce_run(1, R"({"input":[1,-197],"dims":[0]})")),
  };
  for (const std::string& text : bad) {
    Result<Trace> t = parse_trace(text, "bad.json");
    EXPECT_FALSE(t.ok()) << text;
    if (!t.ok()) {
      EXPECT_EQ(t.status().message().rfind("bad.json", 0), 0u) << t.status().message();
      EXPECT_FALSE(t.status().hint().empty()) << t.status().message();
    }
  }
  // Every truncation of a good trace is an error, never a crash.
  for (size_t n = 0; n < good.size(); n += 7) {
    EXPECT_FALSE(parse_trace(good.substr(0, n), "cut.json").ok()) << n;
  }
  EXPECT_TRUE(parse_trace(good, "good.json").ok());
}

TEST(TraceSummary, ModuleTableFromATrace) {
  std::string text =
      with_modules(R"({"path":"","type":"Tiny"},{"path":"body","type":"Sequential"},)"
                   R"({"path":"body.act","type":"ReLU"},{"path":"head","type":"Identity"})");
  // Outputs: the model's [batch, 10]; body.act's [batch, 25] (100 bytes of float32 a sample).
  for (const int batch : {2, 3}) {
    const std::string run = "{\"batch\":" + std::to_string(batch);
    text.replace(text.find(run), run.size(),
                 run + ",\"outputs\":{\"\":[" + std::to_string(batch) + ",10],\"body.act\":[" +
                     std::to_string(batch) + ",25]}");
  }
  Result<std::shared_ptr<const TraceModel>> m = load_trace(text, "t.json");
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  Result<Summary> s = summarize_trace(**m, 8, cpu_options());
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(s->model, "tiny");
  EXPECT_EQ(s->batch, 8);
  EXPECT_EQ(s->parameters, 1024);
  EXPECT_EQ(s->activation_bytes, 800);
  EXPECT_EQ(s->activation_bytes_per_sample, 100);
  EXPECT_EQ(s->input_bytes, 16 + 800);
  ASSERT_EQ(s->modules.size(), 4u);  // named_modules() order, the model first
  const ModuleRow& model = s->modules[0];
  EXPECT_EQ(model.type, "Tiny");
  EXPECT_EQ(model.depth, 0);
  EXPECT_EQ(model.output_shape, (Dims{8, 10}));
  EXPECT_EQ(model.parameters, 1024);  // body.w rolls up
  EXPECT_EQ(model.kept_bytes, 800);
  const ModuleRow& body = s->modules[1];
  EXPECT_EQ(body.parameters, 1024);  // owns body.w
  EXPECT_FALSE(body.has_output);     // not recorded
  const ModuleRow& act = s->modules[2];
  EXPECT_EQ(act.name, "act");
  EXPECT_EQ(act.depth, 2);
  EXPECT_EQ(act.output_shape, (Dims{8, 25}));
  EXPECT_EQ(act.parameters, 0);
  EXPECT_EQ(act.kept_bytes, 800);
  EXPECT_EQ(act.kept_bytes_per_sample, 100);
  const ModuleRow& head = s->modules[3];  // no events: zeros, not missing
  EXPECT_EQ(head.kept_bytes, 0);
  EXPECT_EQ(head.kept_bytes_per_sample, 0);
}

TEST(TraceSummary, WithoutModuleNamesRowsFollowTheEvents) {
  Result<std::shared_ptr<const TraceModel>> m =
      load_trace(trace_json(run_json(1) + "," + run_json(2)), "t.json");
  ASSERT_TRUE(m.ok());
  Result<Summary> s = summarize_trace(**m, 4, cpu_options());
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  ASSERT_EQ(s->modules.size(), 3u);  // the model, body, body.act
  EXPECT_EQ(s->modules[2].path, "body.act");
  EXPECT_EQ(s->modules[2].type, "");
  EXPECT_EQ(s->modules[1].kept_bytes, 400);
}

TEST(TraceParse, DtypeItemsizes) {
  EXPECT_EQ(dtype_itemsize("float32"), 4);
  EXPECT_EQ(dtype_itemsize("bfloat16"), 2);
  EXPECT_EQ(dtype_itemsize("int8"), 1);
  EXPECT_EQ(dtype_itemsize("complex128"), 16);
  EXPECT_EQ(dtype_itemsize("quint4x2"), 0);
}

TEST(TraceModelTest, ModulesGroupIntoBlocksAsForAGraph) {
  const std::string run = R"({"batch":1,"iterations":1,"events":[
      {"phase":"forward","iteration":1},
      {"alloc":1,"bytes":8,"category":"activation","module":"body.a.conv"},
      {"alloc":2,"bytes":8,"category":"activation","module":"body.b"},
      {"alloc":3,"bytes":8,"category":"activation","module":"head"},
      {"free":1},{"free":2},{"free":3}]})";
  Result<Trace> t = parse_trace(trace_json(run), "t.json");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  Result<TraceModel> m = fit_trace(std::move(t).value());
  ASSERT_TRUE(m.ok());
  // The tree: the model, body, body.a, body.a.conv, body.b, head.
  EXPECT_EQ(m->tree.modules.size(), 6u);
  const EventNames names = trace_names(*m);
  const auto block_of = [&](size_t traced) {
    const ModuleId id = m->module_of[traced];
    return names.module(names.blocks[static_cast<size_t>(id)]);
  };
  EXPECT_EQ(names.module(m->module_of[0]), "body.a.conv");
  EXPECT_EQ(block_of(0), "body");
  EXPECT_EQ(block_of(1), "body");
  EXPECT_EQ(block_of(2), "head");
}

TEST(TraceModelTest, PerSampleBlocksForCompare) {
  Result<Trace> t = parse_trace(trace_json(run_json(1, 300) + "," + run_json(2, 300)), "t.json");
  ASSERT_TRUE(t.ok());
  Result<TraceModel> m = fit_trace(std::move(t).value());
  ASSERT_TRUE(m.ok());
  Result<BlockFigures> f = per_sample_blocks(*m, cpu_options());
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  // body.w belongs to body, the activation (300 bytes a sample) to body.act; body's one child
  // makes the block (module_blocks), which holds both.
  ASSERT_EQ(f->blocks.size(), 1u);
  EXPECT_EQ(f->blocks[0].block, "body.act");
  EXPECT_EQ(f->blocks[0].parameters, 1024);
  EXPECT_EQ(f->blocks[0].kept_bytes, 300);
  EXPECT_EQ(f->kept_bytes, 300);
  EXPECT_FALSE(f->attention_known);

  Result<Trace> one = parse_trace(trace_json(run_json(4)), "t.json");
  ASSERT_TRUE(one.ok());
  Result<TraceModel> single = fit_trace(std::move(one).value());
  ASSERT_TRUE(single.ok());
  Result<BlockFigures> none = per_sample_blocks(*single, cpu_options());
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().to_string().find("two batch sizes"), std::string::npos);
}

TEST(TraceModelTest, NotesAttentionTracedUnderTorch1OnCuda) {
  std::string run = run_json(1);
  run.replace(run.find("aten::relu"), 10, "aten::_softmax");
  const auto notes = [&](const std::string& torch, const DeviceProfile& device) {
    std::string doc = trace_json(run);
    doc.replace(doc.find("\"1.13\""), 6, "\"" + torch + "\"");
    Result<Trace> t = parse_trace(doc, "t.json");
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    Result<TraceModel> m = fit_trace(std::move(t).value());
    EXPECT_TRUE(m.ok());
    return trace_notes(*m, device.target);
  };
  const std::vector<std::string> cuda = notes("1.13.1", cuda_profile(std::nullopt));
  ASSERT_EQ(cuda.size(), 1u);
  EXPECT_NE(cuda[0].find("traced under PyTorch 1.13.1"), std::string::npos);
  EXPECT_TRUE(notes("1.13.1", cpu_profile()).empty());
  EXPECT_TRUE(notes("2.4.0", cuda_profile(std::nullopt)).empty());

  Result<TraceModel> cnn = fit_trace(*parse_trace(trace_json(run_json(1)), "t.json"));
  ASSERT_TRUE(cnn.ok());
  EXPECT_TRUE(trace_notes(*cnn, cuda_profile(std::nullopt).target).empty());
}

TEST(TraceParse, ReadsAutocastAndConvolutions) {
  Result<Trace> plain = parse_trace(trace_json(run_json(1)), "t.json");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->autocast.has_value());
  Result<Trace> amp = parse_trace(with_autocast(R"({"dtype":"bfloat16","lists":"cuda"})"), "t");
  ASSERT_TRUE(amp.ok()) << amp.status().to_string();
  ASSERT_TRUE(amp->autocast.has_value());
  EXPECT_EQ(amp->autocast->dtype, "bfloat16");
  EXPECT_EQ(amp->autocast->lists, Device::kCuda);

  Result<Trace> conv = parse_trace(trace_json(conv_run(2)), "t.json");
  ASSERT_TRUE(conv.ok()) << conv.status().to_string();
  const TraceRun& run = conv->runs[0];
  ASSERT_EQ(run.convs.size(), 2u);
  EXPECT_EQ(run.events[1].conv_role, ConvRole::kOutput);
  EXPECT_EQ(run.events[3].conv_role, ConvRole::kGradWeight);
  EXPECT_EQ(run.convs[0].input, (Dims{2, 3, 32, 32}));
  EXPECT_EQ(run.convs[0].padding, (Dims{1, 1}));
  EXPECT_FALSE(run.convs[0].transposed);
}

// The events the cuda profile (an H100) makes of a trace at `batch`, under `training`.
EventList h100_events(const std::string& text, int64_t batch, TrainingConfig training = {}) {
  Result<Trace> t = parse_trace(text, "t.json");
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  Result<TraceModel> m = fit_trace(std::move(t).value());
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  EstimateOptions o;
  o.device = cuda_profile(*find_gpu("h100-80gb"));
  o.training = std::move(training);
  Result<EventList> list = trace_events(*m, batch, o);
  EXPECT_TRUE(list.ok()) << list.status().to_string();
  return list.ok() ? std::move(list).value() : EventList{};
}

TEST(TraceModelTest, ConvolutionsTakeCudnnWorkspacesOnCuda) {
  // At batch 8: the problem the trace recorded at 1 and 2, grown with the batch.
  ConvProblem p;
  p.batch = 8;
  p.in_channels = 3;
  p.out_channels = 16;
  p.in_spatial = p.out_spatial = {32, 32};
  p.kernel = {3, 3};
  p.stride = p.dilation = {1, 1};
  p.padding = {1, 1};
  const ConvWorkspaces want = cudnn_conv_workspaces(p, 90);
  ASSERT_GT(want.forward, 0);
  ASSERT_GT(want.backward_filter, 0);
  const EventList list = h100_events(trace_json(conv_run(1) + "," + conv_run(2)), 8);
  // Each kernel's workspace comes right after the tensor it fills, and goes at once.
  std::vector<int64_t> workspaces;
  for (size_t i = 0; i + 1 < list.events.size(); ++i) {
    const Event& e = list.events[i];
    const Buffer& b = list.buffers[e.buffer];
    if (!e.alloc || b.category != Category::kWorkspace) continue;
    const Event& before = list.events[i - 1];
    EXPECT_TRUE(before.alloc);
    EXPECT_EQ(list.buffers[before.buffer].node, b.node);
    EXPECT_FALSE(list.events[i + 1].alloc);
    EXPECT_EQ(list.events[i + 1].buffer, e.buffer);
    workspaces.push_back(b.bytes);
  }
  EXPECT_EQ(workspaces, (std::vector<int64_t>{want.forward, want.backward_filter}));
  // The cpu profile has none.
  Result<std::shared_ptr<const TraceModel>> m =
      load_trace(trace_json(conv_run(1) + "," + conv_run(2)), "t.json");
  ASSERT_TRUE(m.ok());
  Result<EventList> cpu = trace_events(**m, 8, cpu_options());
  ASSERT_TRUE(cpu.ok());
  for (const Buffer& b : cpu->buffers) EXPECT_NE(b.category, Category::kWorkspace);
}

TEST(TraceModelTest, TracesWithoutConvolutionShapesSaySo) {
  std::string run = run_json(1);
  run.replace(run.find("aten::relu"), 10, "aten::convolution");
  Result<TraceModel> old = fit_trace(*parse_trace(trace_json(run), "t.json"));
  ASSERT_TRUE(old.ok());
  const std::vector<std::string> notes =
      trace_notes(*old, cuda_profile(*find_gpu("h100-80gb")).target);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("cuDNN's workspaces are left out"), std::string::npos);
  EXPECT_TRUE(trace_notes(*old, cpu_profile().target).empty());
  Result<TraceModel> recorded = fit_trace(*parse_trace(trace_json(conv_run(1)), "t.json"));
  ASSERT_TRUE(recorded.ok());
  EXPECT_TRUE(trace_notes(*recorded, cuda_profile(*find_gpu("h100-80gb")).target).empty());
}

TEST(TraceModelTest, GradScalerUnderFp16) {
  const std::string text = with_autocast(R"({"dtype":"bfloat16","lists":"cuda"})");
  const auto count = [](const EventList& list, int64_t bytes, Category category) {
    return std::count_if(list.buffers.begin(), list.buffers.end(), [&](const Buffer& b) {
      return b.bytes == bytes && b.category == category;
    });
  };
  const EventList bf16 = h100_events(text, 4);
  EXPECT_EQ(count(bf16, 4, Category::kOptimizerState), 0);
  TrainingConfig fp16;
  fp16.trace_grad_scaler = true;
  const EventList scaled = h100_events(text, 4, fp16);
  // _scale and _growth_tracker once; per iteration the scaled loss, then unscale_'s scale as
  // a double, its reciprocal, inv_scale and found_inf.
  EXPECT_EQ(count(scaled, 4, Category::kOptimizerState), 2);
  EXPECT_EQ(count(scaled, 4, Category::kTemporary), 3);
  EXPECT_EQ(count(scaled, 8, Category::kTemporary), 2);
  EXPECT_EQ(scaled.buffers.size(), bf16.buffers.size() + 2 + 1 + 4);
  // The scaled loss lives from the end of forward to the end of backward.
  const auto scaled_loss =
      std::find_if(scaled.events.begin(), scaled.events.end(), [&](const Event& e) {
        const Buffer& b = scaled.buffers[e.buffer];
        return e.alloc && b.bytes == 4 && b.category == Category::kTemporary;
      });
  ASSERT_NE(scaled_loss, scaled.events.end());
  EXPECT_EQ(scaled_loss->phase, Phase::kForward);
  const auto freed = std::find_if(scaled_loss, scaled.events.end(), [&](const Event& e) {
    return !e.alloc && e.buffer == scaled_loss->buffer;
  });
  ASSERT_NE(freed, scaled.events.end());
  EXPECT_EQ(freed->phase, Phase::kOptimizer);
}

}  // namespace
}  // namespace trainfit

namespace trainfit {
namespace {

// An event list as "+bytes category" and "-bytes" lines, setup left out.
std::vector<std::string> lines(const EventList& list) {
  std::vector<std::string> out;
  for (const Event& e : list.events) {
    if (e.phase == Phase::kSetup) continue;
    const Buffer& b = list.buffers[e.buffer];
    out.push_back(e.alloc ? fmt::format("+{} {}", b.bytes, category_name(b.category))
                          : fmt::format("-{}", b.bytes));
  }
  return out;
}

TEST(TraceParse, ReadsAttentionCoresAndReductions) {
  Result<Trace> t = parse_trace(trace_json(attention_run(1) + "," + attention_run(2)), "t.json");
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  const TraceRun& run = t->runs[0];
  ASSERT_EQ(run.attentions.size(), 1u);
  const TraceAttention& core = run.attentions[0];
  EXPECT_EQ(core.first, 5);  // dense buffer indices: the ids are dense here
  EXPECT_EQ(core.q, 2);
  EXPECT_EQ(core.v, 4);
  EXPECT_EQ(core.q_shape, (Dims{2, 16, 4}));
  EXPECT_FALSE(core.mask);
  int grads = 0;
  for (const TraceEvent& e : run.events) {
    if (e.attention_role == AttentionRole::kOutput) EXPECT_EQ(e.buffer, 8);
    if (e.attention_role >= AttentionRole::kGradQ) {
      EXPECT_EQ(e.attention, 0);
      ++grads;
    }
  }
  EXPECT_EQ(grads, 3);
  // The backward mark points at the event after it: the free of the output's copy.
  ASSERT_GE(core.backward_from, 0);
  EXPECT_FALSE(run.events[static_cast<size_t>(core.backward_from)].alloc);
  EXPECT_EQ(run.events[static_cast<size_t>(core.backward_from)].buffer, 9);

  Result<Trace> r = parse_trace(trace_json(reduce_run(1)), "t.json");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->runs[0].reduces.size(), 1u);
  EXPECT_EQ(r->runs[0].reduces[0].input, (Dims{1, 197, 768}));
  EXPECT_EQ(r->runs[0].reduces[0].dims, (Dims{0, 1}));
}

TEST(TraceModelTest, AttentionCoresReplayFusedOnCuda) {
  const std::string text = trace_json(attention_run(1) + "," + attention_run(2));
  // Batch 10: q, k, v and the output 5,120 bytes, the scores 20,480; 20 rows of 16 queries run
  // the memory-efficient kernel (fp32).
  const FusedAttentionBytes fused =
      fused_attention_bytes(SdpaBackend::kEfficient, {.rows = 20,
                                                      .queries = 16,
                                                      .keys = 16,
                                                      .head_dim = 4,
                                                      .value_dim = 4,
                                                      .dtype = DType::kFloat32,
                                                      .sm = 90});
  ASSERT_EQ(fused.logsumexp, 4 * 20 * 32);  // 16 queries padded to 32
  // Backward (Note [Memory-efficient attention's backward]): fp32 delta through grad_out * out
  // (5,120 bytes) and its (B, L, H) sum, then the kernel's dq tiles: one 64 x 64 block and its
  // 4-float header per row.
  ASSERT_EQ(fused.backward_workspace, 0);
  ASSERT_EQ(fused.backward_steps.size(), 8u);
  ASSERT_EQ(fused.backward_steps[5].arg, 20 * (4 + 64 * 64) * 4);
  const std::string ws = fmt::format("+{} workspace", cublas_workspace_bytes(90));
  // Forward: q, k, v (kept: the kernel saves them), then the output (the cuBLAS handle's
  // workspace comes with the first product left) and its logsumexp; no scaled q, no scores.
  // Backward: the three gradients, then the kernel's scratch; q, k, v, the output and the
  // logsumexp go when it is done.
  const std::vector<std::string> want = {"+5120 input",
                                         "+5120 activation",
                                         "+5120 activation",
                                         "+5120 activation",
                                         "+5120 activation",
                                         ws,
                                         "+2560 activation",
                                         "+5120 activation",
                                         "-5120",
                                         "+5120 temporary",
                                         ws,
                                         "+5120 temporary",
                                         "+5120 temporary",
                                         "+5120 workspace",
                                         "+1280 workspace",
                                         "+1280 workspace",
                                         "-1280",
                                         "-5120",
                                         "+328000 workspace",
                                         "-1280",
                                         "-328000",
                                         "-2560",
                                         "-5120",
                                         "-5120",
                                         "-5120",
                                         "-5120",
                                         "+4096 gradient",
                                         "-5120",
                                         "-5120",
                                         "-5120",
                                         "-5120",
                                         "-4096"};
  EXPECT_EQ(lines(h100_events(text, 10)), want);
  // The cpu profile replays the core as traced: scaled q and the scores are there.
  Result<std::shared_ptr<const TraceModel>> m = load_trace(text, "t.json");
  ASSERT_TRUE(m.ok());
  Result<EventList> cpu = trace_events(**m, 10, cpu_options());
  ASSERT_TRUE(cpu.ok());
  const std::vector<std::string> traced = lines(*cpu);
  EXPECT_EQ(std::count(traced.begin(), traced.end(), "+20480 activation"), 1);
  EXPECT_EQ(std::count(traced.begin(), traced.end(), "+20480 temporary"), 3);
  // A core whose backward never came replays as traced.
  std::string no_backward = text;
  for (size_t at; (at = no_backward.find(R"({"attention_backward":8},)")) != std::string::npos;) {
    no_backward.erase(at, std::string_view(R"({"attention_backward":8},)").size());
  }
  const std::vector<std::string> unfused = lines(h100_events(no_backward, 10));
  EXPECT_EQ(std::count(unfused.begin(), unfused.end(), "+20480 activation"), 1);
}

TEST(TraceModelTest, SumsStagePartialsOnCuda) {
  // At batch 8: 1,576 rows of 768 (Note [Reductions' staging]: 9,830,400 bytes, 24 of
  // semaphores on the H100).
  ReduceProblem p;
  p.outputs = 768;
  p.inputs_per_output = int64_t{8} * 197;
  p.contiguous_inputs = false;
  EstimateOptions o;
  o.device = cuda_profile(*find_gpu("h100-80gb"));
  p.sm_count = o.device.target.sm_count;
  p.sm = o.device.target.sm;
  const ReduceScratch want = cuda_reduce_scratch(p);
  ASSERT_EQ(want.buffer, 9'830'400);
  ASSERT_EQ(want.semaphores, 24);
  const std::vector<std::string> got =
      lines(h100_events(trace_json(reduce_run(1) + "," + reduce_run(2)), 8));
  const std::vector<std::string> expected = {fmt::format("+{} input", 8 * 197 * 768 * 4),
                                             "+3072 gradient",
                                             "+9830400 workspace",
                                             "+24 workspace",
                                             "-24",
                                             "-9830400",
                                             fmt::format("-{}", 8 * 197 * 768 * 4),
                                             "-3072"};
  EXPECT_EQ(got, expected);
  // The cpu profile has none.
  Result<std::shared_ptr<const TraceModel>> m =
      load_trace(trace_json(reduce_run(1) + "," + reduce_run(2)), "t.json");
  ASSERT_TRUE(m.ok());
  Result<EventList> cpu = trace_events(**m, 8, cpu_options());
  ASSERT_TRUE(cpu.ok());
  for (const Buffer& b : cpu->buffers) EXPECT_NE(b.category, Category::kWorkspace);
}

}  // namespace
}  // namespace trainfit
