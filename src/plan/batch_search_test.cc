// The batch search against a fake estimator whose answers are known: the batch it returns fits
// and one more does not, it stops at the search limit, says when not even batch 1 fits, treats
// an error above a fitting batch as not fitting, and finds the limit in few estimates beyond
// its walk down (Note [The edge]).
#include "plan/batch_search.h"

#include <gtest/gtest.h>

#include "plan/fake_estimator_test_util.h"

namespace trainfit {
namespace {

TrainingRequest at(TrainingRequest r, int64_t batch) {
  r.batch = batch;
  return r;
}

// The largest batch the fake fits, by trying every one.
int64_t brute_force(const FakeEstimator& fake, const TrainingRequest& r) {
  int64_t b = 0;
  while (b < kMaxSearchBatch && fake.fits(at(r, b + 1))) ++b;
  return b;
}

// What `batch` shows on the whole GPU, without the margin, where it fits that; else -1.
int64_t on_whole_gpu(const FakeEstimator& fake, TrainingRequest r, int64_t batch) {
  r = at(r, batch);
  r.margin = 0;
  if (!fake.fits(r)) return -1;
  return std::min(fake.device_used(r), r.device.total_bytes);
}

// The first batch whose live bytes and CUDA context are over the budget: the search walks down
// from it (Note [The edge]).
int64_t first_over(const FakeEstimator& fake, const TrainingRequest& r) {
  int64_t b = 1;
  while (fake.allocated(at(r, b)) + r.device.context_bytes <= fake.budget(r)) ++b;
  return b;
}

TEST(BatchSearch, LargestBatchFitsAndOneMoreDoesNot) {
  for (const int64_t total : {int64_t{2} * kGiB, 12 * kGiB, 24 * kGiB, 80 * kGiB}) {
    for (const double margin : {0.0, 0.05, 0.2}) {
      SCOPED_TRACE(testing::Message() << total << " bytes, margin " << margin);
      FakeEstimator fake;
      const TrainingRequest r = fake.request(total, margin);
      BatchSearch search(fake, r);
      const Result<BatchFit> fit = search.fit(r.device, margin);
      ASSERT_TRUE(fit.ok()) << fit.status().to_string();
      EXPECT_EQ(fit->max_batch, brute_force(fake, r));
      EXPECT_TRUE(fake.fits(at(r, fit->max_batch)));
      EXPECT_FALSE(fake.fits(at(r, fit->max_batch + 1)));
      EXPECT_EQ(fit->budget_bytes, total - margin_bytes(total, margin));
      EXPECT_EQ(fit->device_used_bytes, fake.device_used(at(r, fit->max_batch)));
      EXPECT_EQ(fit->next_device_used_bytes, on_whole_gpu(fake, r, fit->max_batch + 1));
      EXPECT_EQ(search.estimates(), fake.calls);
      EXPECT_LT(search.estimates(), 30);
    }
  }
}

TEST(BatchSearch, FittingByRetriesIsBracketedNotCrept) {
  // The cache grows with the batch, so well below the limit the unbounded device use is over
  // the budget while the bounded run fits by freeing the cache: the line through the
  // unbounded figures crosses the budget below batches that fit (resnet18 at 32x32 on an
  // RTX 4090 once took 22,797 estimates this way).
  FakeEstimator fake;
  fake.per_sample_bytes = int64_t{450} * 1024;
  fake.cache_share = 0.4;
  const TrainingRequest r = fake.request(24 * kGiB);
  BatchSearch search(fake, r);
  const Result<BatchFit> fit = search.fit(r.device, 0.05);
  ASSERT_TRUE(fit.ok());
  EXPECT_EQ(fit->max_batch, brute_force(fake, r));
  EXPECT_GT(fit->max_batch, 40'000);
  EXPECT_EQ(fit->alloc_retries, 1);
  // The walk down from the first batch whose live bytes are over the budget, and the few
  // probes that find that batch; not a creep up from below.
  const int64_t walk = first_over(fake, r) - fit->max_batch;
  EXPECT_GT(walk, 100) << "the fake's 64 MiB of slack is a long walk at 450 KiB a sample";
  EXPECT_LE(search.estimates(), walk + 20) << "crept towards the limit";
}

TEST(BatchSearch, SearchLimitAndNothingFits) {
  FakeEstimator tiny;
  tiny.per_sample_bytes = 1024;
  const TrainingRequest r = tiny.request(80 * kGiB);
  const Result<BatchFit> all = BatchSearch(tiny, r).fit(r.device, 0.05);
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->max_batch, kMaxSearchBatch);
  EXPECT_TRUE(all->at_search_limit);

  FakeEstimator huge;
  huge.fixed_bytes = 100 * kGiB;
  const TrainingRequest h = huge.request(24 * kGiB);
  const Result<BatchFit> none = BatchSearch(huge, h).fit(h.device, 0.05);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->max_batch, 0);
  EXPECT_EQ(none->next_device_used_bytes, -1) << "batch 1 does not fit the whole GPU either";
  EXPECT_EQ(none->next_unlimited_bytes, huge.device_used(at(h, 1)));
}

TEST(BatchSearch, AnErrorAboveAFittingBatchDoesNotFitAnErrorAtOneIsReturned) {
  FakeEstimator fake;
  fake.per_sample_bytes = 1024;
  fake.fails_above = 300;
  const TrainingRequest r = fake.request(80 * kGiB);
  const Result<BatchFit> fit = BatchSearch(fake, r).fit(r.device, 0.05);
  ASSERT_TRUE(fit.ok());
  EXPECT_EQ(fit->max_batch, 300);

  FakeEstimator broken;
  broken.fails_above = 0;
  const TrainingRequest b = broken.request(24 * kGiB);
  const Result<BatchFit> failed = BatchSearch(broken, b).fit(b.device, 0.05);
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().message(), "the batch overflows");
}

TEST(BatchSearch, SharesUnboundedEstimatesBetweenGpusOfOneClass) {
  FakeEstimator fake;
  const TrainingRequest r = fake.request(24 * kGiB);
  BatchSearch search(fake, r);
  DeviceProfile small = r.device;
  small.total_bytes = 12 * kGiB;
  ASSERT_TRUE(search.fit(r.device, 0.05).ok());
  const int first = search.estimates();
  const Result<BatchFit> again = search.fit(small, 0.05);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->max_batch, brute_force(fake, at(fake.request(12 * kGiB), 1)));
  EXPECT_LT(search.estimates() - first, first) << "the second GPU reuses the first's probes";
}

}  // namespace
}  // namespace trainfit
