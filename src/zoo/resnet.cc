// torchvision ResNet (resnet18/34/50/101/152), as torchvision/models/resnet.py builds it:
// in-place ReLUs, `out += identity`, downsample on the first block of a stage.
#include <fmt/format.h>

#include "zoo/nn.h"
#include "zoo/zoo.h"

namespace trainfit {
namespace {

struct ResNetShape {
  const char* name;
  bool bottleneck;
  int64_t blocks[4];
  const char* params;  // for the doc line
};

constexpr ResNetShape kResNets[] = {
    {"resnet18", false, {2, 2, 2, 2}, "11.7M"},  {"resnet34", false, {3, 4, 6, 3}, "21.8M"},
    {"resnet50", true, {3, 4, 6, 3}, "25.6M"},   {"resnet101", true, {3, 4, 23, 3}, "44.5M"},
    {"resnet152", true, {3, 8, 36, 3}, "60.2M"},
};

nn::Conv conv3x3(int64_t out, int64_t stride) {
  return {.out = out, .kernel = 3, .stride = stride, .padding = 1, .bias = false};
}
nn::Conv conv1x1(int64_t out, int64_t stride) {
  return {.out = out, .kernel = 1, .stride = stride, .bias = false};
}

ValueId downsample(GraphBuilder& b, ValueId x, int64_t out, int64_t stride) {
  auto scope = b.module("downsample", "Sequential");
  x = nn::conv2d(b, "0", x, conv1x1(out, stride));
  return nn::batch_norm2d(b, "1", x);
}

ValueId basic_block(GraphBuilder& b, ValueId x, int64_t planes, int64_t stride, bool down) {
  const ValueId identity_in = x;
  ValueId out = nn::conv2d(b, "conv1", x, conv3x3(planes, stride));
  out = nn::batch_norm2d(b, "bn1", out);
  out = nn::relu(b, "relu", out, true);
  out = nn::conv2d(b, "conv2", out, conv3x3(planes, 1));
  out = nn::batch_norm2d(b, "bn2", out);
  const ValueId identity = down ? downsample(b, identity_in, planes, stride) : identity_in;
  out = nn::add(b, out, identity, true);
  return nn::relu(b, "relu", out, true);
}

ValueId bottleneck(GraphBuilder& b, ValueId x, int64_t planes, int64_t stride, bool down) {
  const ValueId identity_in = x;
  ValueId out = nn::conv2d(b, "conv1", x, conv1x1(planes, 1));
  out = nn::batch_norm2d(b, "bn1", out);
  out = nn::relu(b, "relu", out, true);
  out = nn::conv2d(b, "conv2", out, conv3x3(planes, stride));
  out = nn::batch_norm2d(b, "bn2", out);
  out = nn::relu(b, "relu", out, true);
  out = nn::conv2d(b, "conv3", out, conv1x1(planes * 4, 1));
  out = nn::batch_norm2d(b, "bn3", out);
  const ValueId identity = down ? downsample(b, identity_in, planes * 4, stride) : identity_in;
  out = nn::add(b, out, identity, true);
  return nn::relu(b, "relu", out, true);
}

void build_resnet(GraphBuilder& b, const ModelConfig& c, const ResNetShape& shape) {
  const Dims& in = c.input;
  ValueId x = b.input("image", {c.batch, in[0], in[1], in[2]}, b.activation_dtype());
  const ValueId target = b.input("target", {c.batch}, DType::kInt64);
  {
    auto model = b.module("", "ResNet");
    x = nn::conv2d(b, "conv1", x,
                   {.out = 64, .kernel = 7, .stride = 2, .padding = 3, .bias = false});
    x = nn::batch_norm2d(b, "bn1", x);
    x = nn::relu(b, "relu", x, true);
    x = nn::max_pool2d(b, "maxpool", x, 3, 2, 1);
    const int64_t expansion = shape.bottleneck ? 4 : 1;
    int64_t inplanes = 64;
    for (int stage = 0; stage < 4; ++stage) {
      auto layer = b.module(fmt::format("layer{}", stage + 1), "Sequential");
      const int64_t planes = int64_t{64} << stage;
      for (int64_t i = 0; i < shape.blocks[stage]; ++i) {
        const int64_t stride = (stage > 0 && i == 0) ? 2 : 1;
        const bool down = i == 0 && (stride != 1 || inplanes != planes * expansion);
        auto block = b.module(std::to_string(i), shape.bottleneck ? "Bottleneck" : "BasicBlock");
        x = shape.bottleneck ? bottleneck(b, x, planes, stride, down)
                             : basic_block(b, x, planes, stride, down);
        inplanes = planes * expansion;
      }
    }
    x = nn::adaptive_avg_pool2d(b, "avgpool", x, 1, 1);
    x = nn::flatten(b, x, 1);
    x = nn::linear(b, "fc", x, c.get_int("num_classes"));
  }
  b.set_loss(nn::cross_entropy(b, "loss", x, target));
}

}  // namespace

void add_resnet_models(std::vector<ModelSpec>& models) {
  for (const ResNetShape& shape : kResNets) {
    ModelSpec m;
    m.name = shape.name;
    m.family = "resnet";
    m.doc =
        fmt::format("torchvision {} ({} parameters), cross-entropy loss", shape.name, shape.params);
    m.input = InputKind::kImage;
    m.default_input = {3, 224, 224};
    m.keys = {{"num_classes", AttrKind::kInt, int64_t{1000}, "classifier outputs", {}, 1.0, {}}};
    m.build = [shape](GraphBuilder& b, const ModelConfig& c) { build_resnet(b, c, shape); };
    models.push_back(std::move(m));
  }
}

}  // namespace trainfit
