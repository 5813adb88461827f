// torchvision ResNet (resnet18/34/50/101/152), as torchvision/models/resnet.py builds it:
// in-place ReLUs, `out += identity`, downsample on the first block of a stage.
#include "sources/zoo/resnet.h"

#include <fmt/format.h>

#include "sources/zoo/nn.h"
#include "sources/zoo/zoo.h"

namespace trainfit {
namespace {

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

ValueId norm(GraphBuilder& b, std::string_view name, ValueId x, NormLayer kind) {
  switch (kind) {
    case NormLayer::kBatchNorm:
      return nn::batch_norm2d(b, name, x);
    case NormLayer::kFrozenBatchNorm:
      return nn::frozen_batch_norm2d(b, name, x);
    case NormLayer::kGroupNorm:
      return nn::group_norm(b, name, x, b.dim(x, 1) / 16);
  }
  return kNone;
}

ValueId downsample(GraphBuilder& b, ValueId x, int64_t out, int64_t stride, NormLayer kind) {
  auto scope = b.module("downsample", "Sequential");
  x = nn::conv2d(b, "0", x, conv1x1(out, stride));
  return norm(b, "1", x, kind);
}

ValueId basic_block(GraphBuilder& b, ValueId x, int64_t planes, int64_t stride, bool down,
                    NormLayer kind) {
  const ValueId identity_in = x;
  ValueId out = nn::conv2d(b, "conv1", x, conv3x3(planes, stride));
  out = norm(b, "bn1", out, kind);
  out = nn::relu(b, "relu", out, true);
  out = nn::conv2d(b, "conv2", out, conv3x3(planes, 1));
  out = norm(b, "bn2", out, kind);
  const ValueId identity = down ? downsample(b, identity_in, planes, stride, kind) : identity_in;
  out = nn::add(b, out, identity, true);
  return nn::relu(b, "relu", out, true);
}

ValueId bottleneck(GraphBuilder& b, ValueId x, int64_t planes, int64_t stride, bool down,
                   NormLayer kind) {
  const ValueId identity_in = x;
  ValueId out = nn::conv2d(b, "conv1", x, conv1x1(planes, 1));
  out = norm(b, "bn1", out, kind);
  out = nn::relu(b, "relu", out, true);
  out = nn::conv2d(b, "conv2", out, conv3x3(planes, stride));
  out = norm(b, "bn2", out, kind);
  out = nn::relu(b, "relu", out, true);
  out = nn::conv2d(b, "conv3", out, conv1x1(planes * 4, 1));
  out = norm(b, "bn3", out, kind);
  const ValueId identity =
      down ? downsample(b, identity_in, planes * 4, stride, kind) : identity_in;
  out = nn::add(b, out, identity, true);
  return nn::relu(b, "relu", out, true);
}

void build_resnet(GraphBuilder& b, const ModelConfig& c, const ResNetShape& shape) {
  const Dims& in = c.input;
  ValueId x = b.input("image", {c.batch, in[0], in[1], in[2]}, b.activation_dtype());
  const ValueId target = b.input("target", {c.batch}, DType::kInt64);
  {
    auto model = b.module("", "ResNet");
    x = resnet_trunk(b, x, {shape, NormLayer::kBatchNorm, TrunkNames::kTorchvision});
    x = nn::adaptive_avg_pool2d(b, "avgpool", x, 1, 1);
    x = nn::flatten(b, x, 1);
    x = nn::linear(b, "fc", x, c.get_int("num_classes"));
  }
  b.set_loss(nn::cross_entropy(b, "loss", x, target));
}

}  // namespace

const ResNetShape* find_resnet(std::string_view name) {
  for (const ResNetShape& s : kResNets) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

int64_t resnet_channels(const ResNetShape& s) {
  return s.bottleneck ? 2048 : 512;
}

ValueId resnet_trunk(GraphBuilder& b, ValueId x, const ResNetTrunk& t) {
  const bool sequential = t.names == TrunkNames::kSequential;
  auto name = [&](int index, const char* torchvision) {
    return sequential ? std::to_string(index) : std::string(torchvision);
  };
  x = nn::conv2d(b, name(0, "conv1"), x,
                 {.out = 64, .kernel = 7, .stride = 2, .padding = 3, .bias = false});
  x = norm(b, name(1, "bn1"), x, t.norm);
  x = nn::relu(b, name(2, "relu"), x, true);
  x = nn::max_pool2d(b, name(3, "maxpool"), x, 3, 2, 1);
  const int64_t expansion = t.shape.bottleneck ? 4 : 1;
  int64_t inplanes = 64;
  for (int stage = 0; stage < 4; ++stage) {
    auto layer = b.module(
        sequential ? std::to_string(4 + stage) : fmt::format("layer{}", stage + 1), "Sequential");
    const int64_t planes = int64_t{64} << stage;
    for (int64_t i = 0; i < t.shape.blocks[stage]; ++i) {
      const int64_t stride = (stage > 0 && i == 0) ? 2 : 1;
      const bool down = i == 0 && (stride != 1 || inplanes != planes * expansion);
      auto block = b.module(std::to_string(i), t.shape.bottleneck ? "Bottleneck" : "BasicBlock");
      x = t.shape.bottleneck ? bottleneck(b, x, planes, stride, down, t.norm)
                             : basic_block(b, x, planes, stride, down, t.norm);
      inplanes = planes * expansion;
    }
  }
  return x;
}

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
    for (int stage = 1; stage <= 4; ++stage) {
      m.checkpoint_families.push_back(
          {fmt::format("layer{} blocks", stage), {fmt::format("layer{}.*", stage)}});
    }
    m.backbone = {"conv1", "bn1", "layer1", "layer2", "layer3", "layer4"};
    models.push_back(std::move(m));
  }
}

}  // namespace trainfit
