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

}  // namespace
}  // namespace trainfit
