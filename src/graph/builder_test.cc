#include "graph/builder.h"

#include <gtest/gtest.h>

#include "graph/activations.h"

namespace trainfit {
namespace {

BuildOptions cpu() {
  return {{Device::kCpu, TorchVersion::k1_13}, Precision::kFp32, {}};
}

TEST(Builder, NamesParametersByModulePath) {
  GraphBuilder b("m", {});
  ValueId x = b.input("x", {2, 3, 8, 8}, DType::kFloat32);
  {
    auto root = b.module("", "Net");
    auto layer = b.module("layer1", "Sequential");
    auto conv = b.module("0", "Conv2d");
    x = b.call1("conv2d", {x}, {{"out_channels", int64_t{4}}, {"kernel_size", int64_t{3}}});
  }
  const Graph g = *std::move(b).finish();
  ASSERT_EQ(g.params.size(), 2U);
  EXPECT_EQ(g.params[0].name, "layer1.0.weight");
  EXPECT_EQ(g.params[1].name, "layer1.0.bias");
  EXPECT_EQ(g.modules[0].name, "m");
  EXPECT_EQ(g.modules[2].path, "layer1.0");
  EXPECT_EQ(g.modules[2].depth, 2);
  EXPECT_EQ(g.modules[2].output, x);
}

TEST(Builder, ReenteringAModuleReusesItsParameters) {
  GraphBuilder b("m", {});
  ValueId x = b.input("x", {2, 5}, DType::kFloat32);
  for (int i = 0; i < 2; ++i) {
    auto fc = b.module("fc", "Linear");
    x = b.call1("linear", {x}, {{"out_features", int64_t{5}}});
  }
  const Graph g = *std::move(b).finish();
  EXPECT_EQ(g.params.size(), 2U);
  EXPECT_EQ(g.nodes.size(), 2U);
}

TEST(Builder, FreezeByPrefix) {
  EXPECT_TRUE(path_matches("layer1.0.conv1.weight", "layer1"));
  EXPECT_FALSE(path_matches("layer10.conv.weight", "layer1"));
  EXPECT_TRUE(path_matches("layer1", "layer1"));
  BuildOptions o;
  o.freeze = {"a"};
  GraphBuilder b("m", o);
  ValueId x = b.input("x", {2, 5}, DType::kFloat32);
  {
    auto a = b.module("a", "Linear");
    x = b.call1("linear", {x}, {{"out_features", int64_t{5}}});
  }
  {
    auto c = b.module("c", "Linear");
    x = b.call1("linear", {x}, {{"out_features", int64_t{5}}});
  }
  const Graph g = *std::move(b).finish();
  EXPECT_FALSE(g.params[0].trainable);
  EXPECT_TRUE(g.params[2].trainable);
  // The frozen first layer records no backward node: nothing below it needs a gradient.
  EXPECT_FALSE(g.nodes[0].recorded);
  EXPECT_TRUE(g.nodes[1].recorded);
}

TEST(Builder, FreezePrefixThatMatchesNothingIsAnError) {
  BuildOptions o;
  o.freeze = {"backbone"};
  GraphBuilder b("m", o);
  const ValueId x = b.input("x", {2, 5}, DType::kFloat32);
  b.call1("linear", {x}, {{"out_features", int64_t{5}}});
  const Result<Graph> g = std::move(b).finish();
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(g.status().message().find("backbone"), std::string::npos);
}

TEST(Builder, KeepsTheFirstErrorWithItsModule) {
  GraphBuilder b("m", {});
  ValueId x = b.input("x", {2, 3, 4, 4}, DType::kFloat32);
  {
    auto root = b.module("", "Net");
    auto pool = b.module("pool", "MaxPool2d");
    x = b.call1("max_pool2d", {x}, {{"kernel_size", int64_t{8}}});
  }
  EXPECT_EQ(x, kNone);
  EXPECT_EQ(b.call1("relu", {b.input("y", {1}, DType::kFloat32)}), kNone);  // a no-op now
  const Result<Graph> g = std::move(b).finish();
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("pool (MaxPool2d)"), std::string::npos)
      << g.status().to_string();
  EXPECT_NE(g.status().message().find("too small"), std::string::npos);
}

TEST(Builder, StopsAtTheOpLimitWithAnError) {
  EXPECT_EQ(BuildOptions{}.max_ops, kMaxOps);
  GraphBuilder b("m", {.max_ops = 100});
  ValueId x = b.input("x", {1}, DType::kFloat32);
  size_t built = 0;
  for (; built <= 1000 && x != kNone; ++built) x = b.call1("relu", {x});
  EXPECT_EQ(built, 101);  // the last call was refused
  EXPECT_EQ(b.call1("relu", {b.input("y", {1}, DType::kFloat32)}), kNone);
  const Result<Graph> g = std::move(b).finish();
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.status().message().find("more than 100 ops"), std::string::npos)
      << g.status().to_string();
}

TEST(Builder, RejectsUnknownOpsAndAttributes) {
  {
    GraphBuilder b("m", {});
    b.call1("no_such_op", {b.input("x", {1}, DType::kFloat32)});
    EXPECT_EQ(std::move(b).finish().status().code(), ErrorCode::kNotFound);
  }
  {
    GraphBuilder b("m", {});
    b.call1("relu", {b.input("x", {1}, DType::kFloat32)}, {{"inplcae", true}});
    const Status s = std::move(b).finish().status();
    EXPECT_NE(s.message().find("no attribute 'inplcae'"), std::string::npos);
  }
  {
    GraphBuilder b("m", {});
    b.call1("linear", {b.input("x", {2, 3}, DType::kFloat32)},
            {{"out_features", std::string("7")}});
    EXPECT_NE(std::move(b).finish().status().message().find("must be int"), std::string::npos);
  }
  {
    GraphBuilder b("m", {});
    b.call1("linear", {b.input("x", {2, 3}, DType::kFloat32)});
    EXPECT_NE(std::move(b).finish().status().message().find("needs attribute 'out_features'"),
              std::string::npos);
  }
  {
    // torch.mean of a bool or integer tensor raises; sum accumulates it in int64.
    GraphBuilder b("m", {});
    const ValueId mask = b.input("mask", {2, 3}, DType::kBool);
    EXPECT_EQ(b.value(b.call1("sum", {mask})).dtype, DType::kInt64);
    b.call1("mean", {mask});
    EXPECT_NE(std::move(b).finish().status().message().find("no floating dtype"),
              std::string::npos);
  }
}

TEST(Builder, OverflowingSizesAreErrors) {
  GraphBuilder b("m", {});
  b.input("x", {int64_t{1} << 40, int64_t{1} << 30}, DType::kFloat32);
  const Result<Graph> g = std::move(b).finish();
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), ErrorCode::kOutOfRange);
}

TEST(Builder, ViewsAndInPlaceOpsShareStorage) {
  GraphBuilder b("m", {});
  const ValueId x = b.input("x", {2, 3, 4}, DType::kFloat32, true);
  const ValueId t = b.call1("transpose", {x}, {{"dim0", int64_t{0}}, {"dim1", int64_t{1}}});
  const ValueId r = b.call1("relu", {x}, {{"inplace", true}});
  const ValueId c = b.call1("contiguous", {t});
  const Graph g = *std::move(b).finish();
  EXPECT_EQ(g.value(t).storage, g.value(x).storage);
  EXPECT_EQ(g.value(r).storage, g.value(x).storage);
  EXPECT_NE(g.value(c).storage, g.value(x).storage);
  EXPECT_EQ(g.value(t).strides, (Dims{4, 12, 1}));
}

TEST(Builder, DeadBranchesKeepNothingAtTheEndOfForward) {
  GraphBuilder b("m", cpu());
  const ValueId x = b.input("x", {4, 8}, DType::kFloat32, true);
  const ValueId kept = b.call1("sigmoid", {x});  // keeps its output
  b.call1("tanh", {x});                          // keeps its output, but is unused
  b.set_loss(b.call1("sum", {kept}));
  const Graph g = *std::move(b).finish();
  EXPECT_EQ(activation_bytes(g), 4 * 8 * 4);
}

TEST(Builder, PythonScalarsKeptByMulAreHostMemory) {
  for (Device d : {Device::kCpu, Device::kCuda}) {
    BuildOptions o;
    o.target = {d, d == Device::kCpu ? TorchVersion::k1_13 : TorchVersion::k2};
    GraphBuilder b("m", o);
    const ValueId x = b.input("x", {4}, DType::kFloat32, true);
    b.set_loss(b.call1("sum", {b.call1("mul_scalar", {x}, {{"value", 2.0}})}));
    const Graph g = *std::move(b).finish();
    EXPECT_EQ(activation_bytes(g), d == Device::kCpu ? 8 : 0);
  }
}

// Autocast follows the device's lists (autocast_mode.cpp). On CUDA the products and the
// transposed convolutions run in bf16, and pow, softmax and the losses in fp32; PyTorch 1.13's
// CPU lists (the cpu profile) lower the products too, leave the transposed convolution, pow and
// softmax in the dtype that arrives, and cast cross_entropy's input to fp32 before its
// log_softmax.
TEST(Builder, AutocastFollowsTheDevicesLists) {
  struct Dtypes {
    DType linear, conv_transpose, pow, softmax, log_softmax_input;
  };
  const auto run = [](Device device) {
    BuildOptions o;
    o.target = {device, device == Device::kCpu ? TorchVersion::k1_13 : TorchVersion::k2};
    o.precision = Precision::kAmpBf16;
    GraphBuilder b("m", o);
    const ValueId x = b.input("x", {2, 4}, DType::kFloat32, true);
    const ValueId low = b.input("low", {2, 4}, DType::kBFloat16, true);
    const ValueId image = b.input("image", {1, 2, 4, 4}, DType::kFloat32, true);
    const ValueId target = b.input("target", {2}, DType::kInt64);
    Dtypes d{};
    {
      auto fc = b.module("fc", "Linear");
      d.linear = b.value(b.call1("linear", {x}, {{"out_features", int64_t{4}}})).dtype;
    }
    {
      auto up = b.module("up", "ConvTranspose2d");
      d.conv_transpose = b.value(b.call1("conv_transpose2d", {image},
                                         {{"out_channels", int64_t{2}},
                                          {"kernel_size", int64_t{2}},
                                          {"stride", int64_t{2}}}))
                             .dtype;
    }
    d.pow = b.value(b.call1("pow_scalar", {low}, {{"exponent", 2.0}})).dtype;
    d.softmax = b.value(b.call1("softmax", {low}, {{"dim", int64_t{-1}}})).dtype;
    const NodeId first = b.node_count();
    b.call1("cross_entropy", {low, target});
    EXPECT_TRUE(b.ok()) << b.status().message();
    const Graph g = *std::move(b).finish();
    for (NodeId n = first; n < g.nodes.next_id(); ++n) {
      if (g.nodes[n].op->name == "log_softmax") {
        d.log_softmax_input = g.value(g.nodes[n].inputs[0]).dtype;
      }
    }
    return d;
  };
  const Dtypes cuda = run(Device::kCuda);
  EXPECT_EQ(cuda.linear, DType::kBFloat16);
  EXPECT_EQ(cuda.conv_transpose, DType::kBFloat16);
  EXPECT_EQ(cuda.pow, DType::kFloat32);
  EXPECT_EQ(cuda.softmax, DType::kFloat32);
  const Dtypes cpu = run(Device::kCpu);
  EXPECT_EQ(cpu.linear, DType::kBFloat16);
  EXPECT_EQ(cpu.conv_transpose, DType::kFloat32);
  EXPECT_EQ(cpu.pow, DType::kBFloat16);
  EXPECT_EQ(cpu.softmax, DType::kBFloat16);
  EXPECT_EQ(cpu.log_softmax_input, DType::kFloat32);
}

}  // namespace
}  // namespace trainfit
