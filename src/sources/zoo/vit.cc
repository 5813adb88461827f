// torchvision Vision Transformer (vit_b_16, vit_b_32, vit_l_16), as
// torchvision/models/vision_transformer.py builds it: a patchifying conv, a class token,
// learned position embeddings, pre-norm encoder blocks with nn.MultiheadAttention called with
// need_weights=False, and a linear head on the class token. The image must be square with a
// side divisible by the patch size; position embeddings follow the image size.
#include <fmt/format.h>

#include "sources/zoo/nn.h"
#include "sources/zoo/zoo.h"

namespace trainfit {
namespace {

struct VitShape {
  const char* name;
  int64_t patch, layers, heads, hidden, mlp;
  const char* params;
};

constexpr VitShape kVits[] = {
    {"vit_b_16", 16, 12, 12, 768, 3072, "86.6M"},
    {"vit_b_32", 32, 12, 12, 768, 3072, "88.2M"},
    {"vit_l_16", 16, 24, 16, 1024, 4096, "304.3M"},
};

ValueId encoder_block(GraphBuilder& b, ValueId input, const VitShape& s, double dropout,
                      double attention_dropout) {
  const ValueId normed = nn::layer_norm(b, "ln_1", input, 1e-6);
  ValueId x = kNone;
  {
    auto attn = b.module("self_attention", "MultiheadAttention");
    x = b.call1("multi_head_attention", {normed, normed, normed},
                {{"embed_dim", s.hidden},
                 {"num_heads", s.heads},
                 {"dropout", attention_dropout},
                 {"batch_first", true},
                 {"need_weights", false}});
  }
  // EncoderBlock's `x = self.ln_1(input)` is rebound only when the attention returns.
  nn::hold(b, {normed});
  x = nn::dropout(b, "dropout", x, dropout);
  x = nn::add(b, x, input);
  ValueId y = nn::layer_norm(b, "ln_2", x, 1e-6);
  {
    auto mlp = b.module("mlp", "MLPBlock");
    y = nn::linear(b, "0", y, s.mlp);
    y = nn::gelu(b, "1", y);
    y = nn::dropout(b, "2", y, dropout);
    y = nn::linear(b, "3", y, s.hidden);
    y = nn::dropout(b, "4", y, dropout);
  }
  return nn::add(b, x, y);
}

void build_vit(GraphBuilder& b, const ModelConfig& c, const VitShape& s) {
  const Dims& in = c.input;
  if (in[1] != in[2] || in[1] % s.patch != 0) {
    b.fail(invalid_argument(
        fmt::format("{} needs a square image whose side is a multiple of {}, got {}x{}", s.name,
                    s.patch, in[1], in[2]),
        fmt::format("for example --input {}x224x224", in[0])));
    return;
  }
  const double dropout = c.get_float("dropout");
  const double attention_dropout = c.get_float("attention_dropout");
  const int64_t grid = in[1] / s.patch;
  const int64_t seq = grid * grid + 1;
  ValueId x = b.input("image", {c.batch, in[0], in[1], in[2]}, b.activation_dtype());
  const ValueId target = b.input("target", {c.batch}, DType::kInt64);
  {
    auto model = b.module("", "VisionTransformer");
    const ValueId class_token = b.parameter("class_token", {1, 1, s.hidden});
    x = nn::conv2d(b, "conv_proj", x, {.out = s.hidden, .kernel = s.patch, .stride = s.patch});
    x = b.call1("reshape", {x}, {{"shape", Dims{c.batch, s.hidden, grid * grid}}});
    x = b.call1("permute", {x}, {{"dims", Dims{0, 2, 1}}});
    const ValueId cls = b.call1("expand", {class_token}, {{"sizes", Dims{c.batch, -1, -1}}});
    x = b.call1("cat", {cls, x}, {{"dim", int64_t{1}}});
    {
      auto encoder = b.module("encoder", "Encoder");
      const ValueId pos = b.parameter("pos_embedding", {1, seq, s.hidden});
      x = nn::add(b, x, pos);
      x = nn::dropout(b, "dropout", x, dropout);
      {
        auto layers = b.module("layers", "Sequential");
        for (int64_t i = 0; i < s.layers; ++i) {
          auto block = b.module(fmt::format("encoder_layer_{}", i), "EncoderBlock");
          x = encoder_block(b, x, s, dropout, attention_dropout);
        }
      }
      x = nn::layer_norm(b, "ln", x, 1e-6);
    }
    x = b.call1("select", {x}, {{"dim", int64_t{1}}, {"index", int64_t{0}}});
    {
      auto heads = b.module("heads", "Sequential");
      x = nn::linear(b, "head", x, c.get_int("num_classes"));
    }
  }
  b.set_loss(nn::cross_entropy(b, "loss", x, target));
}

}  // namespace

void add_vit_models(std::vector<ModelSpec>& models) {
  for (const VitShape& s : kVits) {
    ModelSpec m;
    m.name = s.name;
    m.family = "vit";
    m.doc = fmt::format("torchvision {} ({} parameters at 224x224), cross-entropy loss", s.name,
                        s.params);
    m.input = InputKind::kImage;
    m.default_input = {3, 224, 224};
    m.keys = {
        {"num_classes", AttrKind::kInt, int64_t{1000}, "classifier outputs", {}, 1.0, {}},
        {"dropout", AttrKind::kFloat, 0.0, "dropout after attention and in the MLP", {}, 0.0, 1.0},
        {"attention_dropout", AttrKind::kFloat, 0.0, "dropout on attention weights", {}, 0.0, 1.0}};
    m.build = [s](GraphBuilder& b, const ModelConfig& c) { build_vit(b, c, s); };
    m.checkpoint_families = {{"encoder layers", {"encoder.layers.*"}}};
    m.backbone = {"class_token", "conv_proj", "encoder"};
    models.push_back(std::move(m));
  }
}

}  // namespace trainfit
