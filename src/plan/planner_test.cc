// What-if rows and target-batch plans against a fake estimator whose answers are known: each
// row is the estimate of the request with its knob, ranked by the largest batch or by step
// time; a rejected knob is skipped with the reason; a target plan picks the least intrusive
// kind of knob that fits (within it the least recompute or step time), never returns a
// combination the estimator rejects, and falls back to accumulation.
#include <gtest/gtest.h>

#include <algorithm>

#include "pipeline/request_options.h"
#include "plan/fake_estimator_test_util.h"
#include "plan/target.h"
#include "plan/what_if.h"

namespace trainfit {
namespace {

std::vector<Knob> fake_knobs() {
  return {
      {"AMP bf16", KnobKind::kPrecision, "precision", set_precision(Precision::kAmpBf16), 0, "-"},
      {"AMP fp16", KnobKind::kPrecision, "precision", set_precision(Precision::kAmpFp16), 0, "-"},
      {"fused optimizer", KnobKind::kFree, "optimizer", set_optimizer_impl(OptimizerImpl::kFused),
       0, "none"},
      {"SGD", KnobKind::kRecipe, "optimizer", set_optimizer(OptimizerKind::kSgd), 0, "recipe"},
      {"expandable segments", KnobKind::kFree, "", use_expandable_segments(), 0, "none"},
      {"checkpoint blocks", KnobKind::kRecompute, "", add_checkpoints({"blocks.*"}), 0.2, "+20%"},
      {"smaller model", KnobKind::kModel, "", add_sets({{"width", "half"}}), 0, "model"},
  };
}

// The largest batch the fake fits for a request, by trying every one.
int64_t largest(const FakeEstimator& fake, TrainingRequest r) {
  r.batch = 0;
  while (r.batch < kMaxSearchBatch) {
    ++r.batch;
    if (!fake.fits(r)) return r.batch - 1;
  }
  return r.batch;
}

std::vector<std::string> names(const std::vector<Knob>& knobs) {
  std::vector<std::string> out;
  out.reserve(knobs.size());
  for (const Knob& k : knobs) out.push_back(k.name);
  std::sort(out.begin(), out.end());
  return out;
}

TEST(WhatIf, RowsAreTheKnobsEstimatesRankedByLargestBatch) {
  FakeEstimator fake;
  TrainingRequest r = fake.request(12 * kGiB);
  r.batch = 64;
  const std::vector<Knob> knobs = fake_knobs();
  const Result<WhatIf> w = what_if(fake, r, knobs);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  ASSERT_EQ(w->rows.size(), knobs.size());
  EXPECT_TRUE(w->skipped.empty());
  for (const WhatIfRow& row : w->rows) {
    SCOPED_TRACE(row.knob.name);
    const TrainingRequest with = with_knobs(r, {&row.knob});
    EXPECT_EQ(request_args(row.request), request_args(with));
    EXPECT_EQ(row.estimate.device_used_bytes, fake.device_used(with));
    EXPECT_EQ(row.fit.max_batch, largest(fake, with));
  }
  EXPECT_TRUE(std::is_sorted(
      w->rows.begin(), w->rows.end(),
      [](const WhatIfRow& a, const WhatIfRow& b) { return a.fit.max_batch > b.fit.max_batch; }));
  EXPECT_EQ(w->rows.front().knob.name, "smaller model");
  EXPECT_EQ(w->estimates, fake.calls);
}

TEST(WhatIf, RankByTimePutsTheFastestStepFirstWithItsChange) {
  FakeEstimator fake;
  TrainingRequest r = fake.request(12 * kGiB);
  r.batch = 64;
  const Result<WhatIf> w = what_if(fake, r, fake_knobs(), Rank::kTime);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  ASSERT_EQ(w->rows.size(), fake_knobs().size());
  for (const WhatIfRow& row : w->rows) {
    SCOPED_TRACE(row.knob.name);
    ASSERT_TRUE(row.step_change.has_value());
    EXPECT_NEAR(*row.step_change, fake.step_s(row.request) / fake.step_s(r) - 1, 1e-12);
  }
  EXPECT_TRUE(std::is_sorted(
      w->rows.begin(), w->rows.end(),
      [](const WhatIfRow& a, const WhatIfRow& b) { return *a.step_change < *b.step_change; }));
  EXPECT_EQ(w->rows.front().knob.name, "smaller model");     // x0.4
  EXPECT_EQ(w->rows[1].knob.name, "AMP bf16");               // x0.5
  EXPECT_EQ(w->rows.back().knob.name, "checkpoint blocks");  // x1.3
  EXPECT_NEAR(*w->rows.back().step_change, 0.3, 1e-12);
}

TEST(WhatIf, WithoutAStepTimeRankByTimeKeepsTheMemoryOrder) {
  FakeEstimator fake;
  fake.timed = false;
  TrainingRequest r = fake.request(12 * kGiB);
  r.batch = 64;
  const Result<WhatIf> by_time = what_if(fake, r, fake_knobs(), Rank::kTime);
  const Result<WhatIf> by_memory = what_if(fake, r, fake_knobs(), Rank::kMemory);
  ASSERT_TRUE(by_time.ok() && by_memory.ok());
  ASSERT_EQ(by_time->rows.size(), by_memory->rows.size());
  for (size_t i = 0; i < by_time->rows.size(); ++i) {
    EXPECT_FALSE(by_time->rows[i].step_change.has_value());
    EXPECT_EQ(by_time->rows[i].knob.name, by_memory->rows[i].knob.name);
  }
}

TEST(WhatIf, AKnobTheEstimatorRejectsIsSkippedWithTheReason) {
  FakeEstimator fake;
  fake.reject_amp_with_expandable = true;
  TrainingRequest r = fake.request(12 * kGiB);
  r.expandable_segments = true;
  const Result<WhatIf> w = what_if(fake, r, fake_knobs());
  ASSERT_TRUE(w.ok());
  ASSERT_EQ(w->skipped.size(), 2U);
  EXPECT_EQ(w->skipped[0].first, "AMP bf16");
  EXPECT_EQ(w->skipped[0].second, "AMP and expandable segments conflict in this fake");
  EXPECT_EQ(w->rows.size(), fake_knobs().size() - 2);
}

class Target : public ::testing::Test {
 protected:
  // The smallest batch the request does not fit, plus `more`.
  int64_t beyond(const TrainingRequest& r, int64_t more) { return largest(fake, r) + 1 + more; }

  Result<TargetPlan> plan(int64_t target, bool allow_model_changes = false,
                          Rank rank = Rank::kMemory) {
    return plan_target(fake, base, fake_knobs(), target, allow_model_changes, rank);
  }

  void expect_fits(const TargetPlan& p) {
    EXPECT_TRUE(p.fits);
    EXPECT_EQ(p.request.batch, p.target);
    EXPECT_TRUE(fake.fits(p.request));
    EXPECT_EQ(p.estimate.device_used_bytes, fake.estimate(p.request, {})->device_used_bytes);
  }

  FakeEstimator fake;
  TrainingRequest base = fake.request(12 * kGiB);
};

TEST_F(Target, FitsAsGiven) {
  const Result<TargetPlan> p = plan(8);
  ASSERT_TRUE(p.ok());
  expect_fits(*p);
  EXPECT_TRUE(p->knobs.empty());
  EXPECT_EQ(p->combinations_tried, 1);
}

TEST_F(Target, FreeKnobsFirstAndNoMoreThanNeeded) {
  // One batch past the limit: expandable segments' 64 MiB is enough.
  const Result<TargetPlan> p = plan(beyond(base, 0));
  ASSERT_TRUE(p.ok());
  expect_fits(*p);
  EXPECT_EQ(names(p->knobs), std::vector<std::string>{"expandable segments"});
  EXPECT_FALSE(p->as_given.fits);
}

TEST_F(Target, PrecisionBeforeRecomputeBeforeRecipe) {
  TrainingRequest amp = with_knobs(base, {&fake_knobs()[0]});
  const Result<TargetPlan> p = plan(largest(fake, amp));
  ASSERT_TRUE(p.ok());
  expect_fits(*p);
  for (const Knob& k : p->knobs) EXPECT_LE(k.kind, KnobKind::kPrecision) << k.name;
  EXPECT_TRUE(std::any_of(p->knobs.begin(), p->knobs.end(),
                          [](const Knob& k) { return k.kind == KnobKind::kPrecision; }));

  // Past what AMP and the free knobs reach, checkpointing is needed (and no recipe change).
  TrainingRequest all_but_recompute = with_knobs(base, {&fake_knobs()[0], &fake_knobs()[4]});
  const Result<TargetPlan> q = plan(beyond(all_but_recompute, 10));
  ASSERT_TRUE(q.ok());
  expect_fits(*q);
  EXPECT_EQ(std::count_if(q->knobs.begin(), q->knobs.end(),
                          [](const Knob& k) { return k.kind == KnobKind::kRecompute; }),
            1);
  for (const Knob& k : q->knobs) EXPECT_LE(k.kind, KnobKind::kRecompute) << k.name;
}

TEST_F(Target, RankByTimePicksTheFastestCombinationOfTheCheapestKind) {
  // A batch AMP alone reaches: by memory, AMP bf16 alone (the fewest knobs); by time, AMP bf16
  // with the fused optimizer, whose step is 5% shorter still. Both stay within precision.
  TrainingRequest amp = with_knobs(base, {&fake_knobs()[0]});
  const int64_t target = largest(fake, amp);
  const Result<TargetPlan> by_memory = plan(target);
  const Result<TargetPlan> by_time = plan(target, false, Rank::kTime);
  ASSERT_TRUE(by_memory.ok() && by_time.ok());
  expect_fits(*by_memory);
  expect_fits(*by_time);
  EXPECT_EQ(names(by_memory->knobs), std::vector<std::string>{"AMP bf16"});
  EXPECT_EQ(names(by_time->knobs), (std::vector<std::string>{"AMP bf16", "fused optimizer"}));
  ASSERT_TRUE(by_memory->step_change && by_time->step_change);
  EXPECT_NEAR(*by_memory->step_change, 0.5 - 1, 1e-12);
  EXPECT_NEAR(*by_time->step_change, 0.5 * 0.95 - 1, 1e-12);
}

TEST_F(Target, AccumulationWhenNoAllowedKnobReachesIt) {
  const int64_t target = 4096;
  const Result<TargetPlan> p = plan(target);
  ASSERT_TRUE(p.ok());
  EXPECT_FALSE(p->fits);
  EXPECT_TRUE(p->knobs.empty());
  EXPECT_GE(p->micro_batch * p->accumulation, target);
  EXPECT_EQ(p->effective_batch, p->micro_batch * p->accumulation);
  EXPECT_EQ(p->request.batch, p->micro_batch);
  EXPECT_EQ(p->request.grad_accum, p->accumulation);
  EXPECT_TRUE(fake.fits(p->request));
  TrainingRequest accumulating = base;
  accumulating.grad_accum = 2;
  EXPECT_LE(p->micro_batch, largest(fake, accumulating));
  // The fake's time is linear in the samples: the same time per sample, whatever the split.
  ASSERT_TRUE(p->step_change.has_value());
  EXPECT_NEAR(*p->step_change, 0, 1e-12);
}

TEST_F(Target, ModelChangesOnlyWhenAllowed) {
  const int64_t target = 900;  // beyond every other knob, within the smaller model's reach
  const Result<TargetPlan> strict = plan(target);
  ASSERT_TRUE(strict.ok());
  EXPECT_FALSE(strict->fits);
  const Result<TargetPlan> loose = plan(target, /*allow_model_changes=*/true);
  ASSERT_TRUE(loose.ok());
  expect_fits(*loose);
  EXPECT_TRUE(std::any_of(loose->knobs.begin(), loose->knobs.end(),
                          [](const Knob& k) { return k.kind == KnobKind::kModel; }));
}

TEST_F(Target, ACombinationTheEstimatorRejectsIsNeverTheAnswer) {
  fake.reject_amp_with_expandable = true;
  // Needs AMP; the strongest precision combination also turns on expandable segments, which
  // the estimator rejects with AMP: the plan drops one and still fits.
  TrainingRequest amp = with_knobs(base, {&fake_knobs()[0]});
  const Result<TargetPlan> p = plan(largest(fake, amp));
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_GT(fake.rejected, 0) << "the search never met the conflict";
  expect_fits(*p);
  EXPECT_TRUE(fake.estimate(p->request, {}).ok()) << "the plan is a rejected combination";
  const std::vector<std::string> chosen = names(p->knobs);
  EXPECT_FALSE(std::find(chosen.begin(), chosen.end(), "expandable segments") != chosen.end() &&
               p->request.precision != Precision::kFp32);
}

}  // namespace
}  // namespace trainfit
