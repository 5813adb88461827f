#include "lower/ddp.h"

#include <algorithm>
#include <map>

namespace trainfit {

std::vector<GradientBucket> assign_buckets(std::span<const BucketTensor> tensors,
                                           std::span<const int64_t> limits, BucketOrder order) {
  struct Open {
    GradientBucket bucket;
    size_t limit = 0;  // index into `limits`
  };
  std::vector<GradientBucket> closed;
  // The reducer keys its accumulators by dtype (and device: one device per rank here). It
  // flushes what is left in hash-map order; an ordered map makes that deterministic, and with
  // one dtype (nearly every model) there is nothing to order.
  std::map<DType, Open> open;
  for (const BucketTensor& t : tensors) {
    Open& o = open[t.dtype];
    o.bucket.tensors.push_back(t.index);
    o.bucket.bytes += t.bytes;
    if (!limits.empty() && o.bucket.bytes >= limits[o.limit]) {
      closed.push_back(std::move(o.bucket));
      o.bucket = {};
      o.limit = std::min(o.limit + 1, limits.size() - 1);
    }
  }
  for (auto& [dtype, o] : open) {
    if (!o.bucket.tensors.empty()) closed.push_back(std::move(o.bucket));
  }
  if (order == BucketOrder::kByFirstIndex) {
    std::stable_sort(closed.begin(), closed.end(),
                     [](const GradientBucket& a, const GradientBucket& b) {
                       return *std::min_element(a.tensors.begin(), a.tensors.end()) <
                              *std::min_element(b.tensors.begin(), b.tensors.end());
                     });
  }
  return closed;
}

std::vector<std::vector<int32_t>> zero_redundancy_partition(std::span<const ShardParam> params,
                                                            int world_size) {
  std::vector<std::vector<int32_t>> ranks(static_cast<size_t>(std::max(world_size, 1)));
  std::vector<int64_t> sizes(ranks.size(), 0);
  std::vector<ShardParam> sorted(params.begin(), params.end());
  // Groups in order; within one, largest first, ties in the order given.
  std::stable_sort(sorted.begin(), sorted.end(), [](const ShardParam& a, const ShardParam& b) {
    return a.group != b.group ? a.group < b.group : a.numel > b.numel;
  });
  for (const ShardParam& p : sorted) {
    const auto rank =
        static_cast<size_t>(std::min_element(sizes.begin(), sizes.end()) - sizes.begin());
    ranks[rank].push_back(p.index);
    sizes[rank] += p.numel;
  }
  return ranks;
}

}  // namespace trainfit
