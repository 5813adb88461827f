// torchvision VGG (vgg11/13/16/19 and their _bn variants), as torchvision/models/vgg.py builds
// it: features (conv, [BatchNorm], in-place ReLU, max pools), a 7x7 adaptive average pool, and
// a classifier with two dropouts.
#include <fmt/format.h>

#include "sources/zoo/nn.h"
#include "sources/zoo/zoo.h"

namespace trainfit {
namespace {

constexpr int64_t kPool = 0;  // "M" in torchvision's configs

struct VggShape {
  const char* name;
  std::vector<int64_t> layers;
  const char* params;
};

const std::vector<VggShape>& vgg_shapes() {
  static const std::vector<VggShape> kShapes = {
      {"vgg11",
       {64, kPool, 128, kPool, 256, 256, kPool, 512, 512, kPool, 512, 512, kPool},
       "132.9M"},
      {"vgg13",
       {64, 64, kPool, 128, 128, kPool, 256, 256, kPool, 512, 512, kPool, 512, 512, kPool},
       "133.0M"},
      {"vgg16",
       {64, 64, kPool, 128, 128, kPool, 256, 256, 256, kPool, 512, 512, 512, kPool, 512, 512, 512,
        kPool},
       "138.4M"},
      {"vgg19",
       {64,  64,  kPool, 128, 128,   kPool, 256, 256, 256, 256,  kPool,
        512, 512, 512,   512, kPool, 512,   512, 512, 512, kPool},
       "143.7M"},
  };
  return kShapes;
}

void build_vgg(GraphBuilder& b, const ModelConfig& c, const VggShape& shape, bool batch_norm) {
  const Dims& in = c.input;
  ValueId x = b.input("image", {c.batch, in[0], in[1], in[2]}, b.activation_dtype());
  const ValueId target = b.input("target", {c.batch}, DType::kInt64);
  const double p = c.get_float("dropout");
  {
    auto model = b.module("", "VGG");
    {
      auto features = b.module("features", "Sequential");
      int index = 0;
      auto next = [&] { return std::to_string(index++); };
      for (int64_t v : shape.layers) {
        if (v == kPool) {
          x = nn::max_pool2d(b, next(), x, 2, 2);
          continue;
        }
        x = nn::conv2d(b, next(), x, {.out = v, .kernel = 3, .padding = 1});
        if (batch_norm) x = nn::batch_norm2d(b, next(), x);
        x = nn::relu(b, next(), x, true);
      }
    }
    x = nn::adaptive_avg_pool2d(b, "avgpool", x, 7, 7);
    x = nn::flatten(b, x, 1);
    {
      auto classifier = b.module("classifier", "Sequential");
      x = nn::linear(b, "0", x, 4096);
      x = nn::relu(b, "1", x, true);
      x = nn::dropout(b, "2", x, p);
      x = nn::linear(b, "3", x, 4096);
      x = nn::relu(b, "4", x, true);
      x = nn::dropout(b, "5", x, p);
      x = nn::linear(b, "6", x, c.get_int("num_classes"));
    }
  }
  b.set_loss(nn::cross_entropy(b, "loss", x, target));
}

}  // namespace

void add_vgg_models(std::vector<ModelSpec>& models) {
  for (const VggShape& shape : vgg_shapes()) {
    for (bool bn : {false, true}) {
      ModelSpec m;
      m.name = bn ? fmt::format("{}_bn", shape.name) : shape.name;
      m.family = "vgg";
      m.doc = fmt::format("torchvision {}{} ({} parameters), cross-entropy loss", shape.name,
                          bn ? " with BatchNorm" : "", shape.params);
      m.input = InputKind::kImage;
      m.default_input = {3, 224, 224};
      m.keys = {{"num_classes", AttrKind::kInt, int64_t{1000}, "classifier outputs", {}, 1.0, {}},
                {"dropout", AttrKind::kFloat, 0.5, "classifier dropout probability", {}, 0.0, 1.0}};
      m.build = [shape, bn](GraphBuilder& b, const ModelConfig& c) { build_vgg(b, c, shape, bn); };
      m.backbone = {"features"};
      models.push_back(std::move(m));
    }
  }
}

}  // namespace trainfit
