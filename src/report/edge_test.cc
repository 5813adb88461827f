// Note [The edge] (plan/batch_search.h) on the whole zoo: for every zoo model on every catalog
// GPU, `fit --gpu all`, `fit --gpu NAME` and `estimate --margin` give the same edge; and, on one
// model of each family, it is the exact one: every batch above it up to the first whose live
// tensors exceed the budget, tried one by one, does not fit.
//
// The reports run on one estimator that remembers its answers: the estimate of a request is
// the same whichever search asks for it (the goldens hold the pipeline to that), so each GPU's
// own search costs only its steering, and the test what the searches decide.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "report/fit_report.h"

namespace trainfit {
namespace {

// The pipeline, with its answers kept by what a search varies: the GPU, its memory, context and
// margin, the batch, and what the search asks for beyond the figures.
class RememberingEstimator final : public Estimator {
 public:
  Result<Estimate> estimate(const TrainingRequest& request, const EstimateDetail& detail) override {
    const DeviceProfile& d = request.device;
    const auto key = std::make_tuple(d.gpu, d.total_bytes, d.context_bytes, d.target.sm,
                                     d.target.sm_count, request.margin.value_or(-1), request.batch,
                                     detail.peak_after_oom, detail.step_time);
    if (auto it = seen_.find(key); it != seen_.end()) return it->second;
    Result<Estimate> e = pipeline_.estimate(request, detail);
    seen_.emplace(key, e);
    return e;
  }

 private:
  PipelineEstimator pipeline_;
  std::map<std::tuple<std::string, int64_t, int64_t, int, int, double, int64_t, bool, bool>,
           Result<Estimate>>
      seen_;
};

struct EdgeCase {
  std::string model;
  bool exhaustive = false;  // also try every batch above the edge
};

class ZooEdge : public ::testing::TestWithParam<EdgeCase> {};

TEST_P(ZooEdge, FitAllFitOneAndEstimateAgreeOnEveryGpu) {
  const EdgeCase& c = GetParam();
  TrainingRequest request;
  request.model = c.model;
  FitRequest all;
  all.request = request;
  all.all_gpus = true;
  RememberingEstimator estimator;
  const Result<FitReport> every = make_fit_report(all, estimator);
  ASSERT_TRUE(every.ok()) << every.status().to_string();
  ASSERT_EQ(every->gpus.size(), gpu_catalog().size());
  for (const GpuFit& row : every->gpus) {
    SCOPED_TRACE(std::string(row.gpu.name));
    const BatchFit& edge = row.fit;
    FitRequest one;
    one.request = request;
    one.request.device = cuda_profile(row.gpu);
    const Result<FitReport> alone = make_fit_report(one, estimator);
    ASSERT_TRUE(alone.ok()) << alone.status().to_string();
    EXPECT_EQ(alone->fit.max_batch, edge.max_batch);
    EXPECT_EQ(alone->fit.central_max_batch, edge.central_max_batch);
    EXPECT_EQ(alone->fit.device_used_upper_bytes, edge.device_used_upper_bytes);
    EXPECT_EQ(alone->fit.next_device_used_bytes, edge.next_device_used_bytes);

    // estimate --margin 5% (fit decides by the upper figures, Note [Workspace bounds]).
    const auto at = [&](int64_t batch, int64_t total) {
      TrainingRequest r = request;
      r.batch = batch;
      r.device = cuda_profile(row.gpu);
      r.device.total_bytes = total;
      if (total >= 0) r.margin = kDefaultMargin;
      Result<Estimate> e = estimator.estimate(r, {.peak_after_oom = false, .step_time = false});
      EXPECT_TRUE(e.ok()) << e.status().to_string();
      return e.ok() ? *e : Estimate{};
    };
    const int64_t total = row.gpu.total_bytes;
    if (edge.max_batch > 0) {
      const Estimate e = at(edge.max_batch, total);
      EXPECT_TRUE(e.fits_upper) << "batch " << edge.max_batch;
      EXPECT_EQ(e.device_used_upper_bytes, edge.device_used_upper_bytes);
    }
    if (edge.at_search_limit) continue;
    EXPECT_FALSE(at(edge.max_batch + 1, total).fits_upper) << "batch " << edge.max_batch + 1;
    if (!c.exhaustive) continue;
    // Every batch above the edge fails, up to the first whose live tensors alone (at their
    // bound) exceed the budget; from there on none can fit.
    const int64_t budget = edge.budget_bytes;
    for (int64_t b = edge.max_batch + 1; b <= kMaxSearchBatch; ++b) {
      const Estimate open = at(b, -1);
      if (open.peak_allocated_upper_bytes + open.cuda_context_bytes > budget) break;
      EXPECT_FALSE(at(b, total).fits_upper) << "batch " << b << " fits above the edge";
    }
  }
}

std::vector<EdgeCase> zoo_cases() {
  // One model of each family tried batch by batch above its edges; every model for agreement.
  const std::vector<std::string> exhaustive = {"resnet18", "vgg11_bn", "vit_b_32", "gpt2",
                                               "llama",    "gemma2",   "act"};
  std::vector<EdgeCase> cases;
  for (const ModelSpec& m : model_zoo()) {
    const std::string name(m.name);
    cases.push_back(
        {name, std::find(exhaustive.begin(), exhaustive.end(), name) != exhaustive.end()});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Zoo, ZooEdge, ::testing::ValuesIn(zoo_cases()),
                         [](const ::testing::TestParamInfo<EdgeCase>& info) {
                           std::string name = info.param.model;
                           for (char& ch : name) {
                             if (ch == '-' || ch == '.') ch = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace trainfit
