#include "lower/flops.h"

#include <gtest/gtest.h>

#include "lower/two_layers_test_util.h"
#include "sources/zoo/zoo.h"

namespace trainfit {
namespace {

// Two linear layers, batch 4: 2·4·8·16 and 2·4·16·2 multiply-add FLOPs forward, plus one per
// element of the ReLU between them.
TEST(Flops, ProductsCountTwoPerMultiplyAdd) {
  const Graph g = two_linear_layers();
  const StepFlops f = *step_flops(g, {});
  const double fc1 = 2.0 * 4 * 8 * 16;
  const double fc2 = 2.0 * 4 * 16 * 2;
  EXPECT_DOUBLE_EQ(f.forward, fc1 + 4 * 16 + fc2 + 1 /* the sum's one output */);
  // fc1's input needs no gradient: only its weight and bias; fc2 has three inputs that do.
  EXPECT_GT(f.backward, fc1 + 3 * fc2);
  EXPECT_EQ(f.recompute, 0);
  // Checkpointing fc2 re-runs its forward once.
  const StepFlops c = *step_flops(g, {"fc2"});
  EXPECT_DOUBLE_EQ(c.recompute, fc2);
}

TEST(Flops, Resnet50ForwardIsAboutFourGigaMultiplyAdds) {
  ModelRequest r;
  r.name = "resnet50";
  r.batch = 1;
  const Graph g = *build_model(r);
  const StepFlops f = *step_flops(g, {});
  // torchvision lists 4.09 GFLOPS (multiply-adds) for resnet50 at 224x224; elementwise ops
  // add about a percent.
  EXPECT_GT(f.forward, 2 * 4.09e9);
  EXPECT_LT(f.forward, 2 * 4.09e9 * 1.03);
  EXPECT_GT(f.backward, 1.5 * f.forward);
  EXPECT_LT(f.backward, 2.1 * f.forward);
}

TEST(Flops, UnknownCheckpointPatternIsAnError) {
  ModelRequest r;
  r.name = "resnet18";
  const Graph g = *build_model(r);
  EXPECT_FALSE(step_flops(g, {"nowhere.*"}).ok());
}

}  // namespace
}  // namespace trainfit
