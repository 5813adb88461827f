// The torchvision ResNet convolutional trunk (conv1 ... layer4, without avgpool and fc), shared
// by the classifiers and by the robot policies that use it as a vision backbone.
//
//   const ResNetShape* s = find_resnet("resnet18");
//   ValueId features = resnet_trunk(b, image, {*s, NormLayer::kFrozenBatchNorm,
//                                              TrunkNames::kTorchvision});
#pragma once

#include <string_view>

#include "graph/builder.h"

namespace trainfit {

struct ResNetShape {
  const char* name;
  bool bottleneck;
  int64_t blocks[4];
  const char* params;  // for the doc line
};

const ResNetShape* find_resnet(std::string_view name);
int64_t resnet_channels(const ResNetShape& s);  // of layer4: 512, or 2048 with bottlenecks

enum class NormLayer : uint8_t {
  kBatchNorm,        // nn.BatchNorm2d in train mode
  kFrozenBatchNorm,  // torchvision.ops.FrozenBatchNorm2d (ACT)
  kGroupNorm,        // nn.GroupNorm(C / 16, C) in place of each BatchNorm2d (Diffusion Policy)
};

enum class TrunkNames : uint8_t {
  kTorchvision,  // conv1, bn1, relu, maxpool, layer1 ... layer4 (IntermediateLayerGetter)
  kSequential,   // 0 ... 7 (nn.Sequential(*list(resnet.children())[:-2]))
};

struct ResNetTrunk {
  const ResNetShape& shape;
  NormLayer norm = NormLayer::kBatchNorm;
  TrunkNames names = TrunkNames::kTorchvision;
};

// Runs the trunk in the current module on (N, C, H, W); returns (N, 512 or 2048, H', W') with
// every stride-2 stage mapping n to ceil(n / 2).
ValueId resnet_trunk(GraphBuilder& b, ValueId x, const ResNetTrunk& t);

}  // namespace trainfit
