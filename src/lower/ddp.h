// DistributedDataParallel's gradient buckets, as its reducer lays them out.
//
//   std::vector<BucketTensor> grads = ...;   // trainable parameters, in parameters() order
//   auto initial = assign_buckets(grads, {kNoBucketLimit}, BucketOrder::kByFirstIndex);
//   std::reverse(initial.begin(), initial.end());   // DDP hands them over last first
//
// PyTorch's compute_bucket_assignment_by_size (torch/csrc/distributed/c10d/reducer.cpp): one
// accumulator per dtype; a tensor joins its dtype's open bucket, and the bucket closes once it
// holds at least the current limit (so it overshoots by up to one tensor); each closed bucket
// moves that dtype on to the next limit, the last limit repeating. Each bucket is then one flat
// allocation of its tensors' bytes (Reducer::initialize_buckets), in the order given.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "graph/dtype.h"

namespace trainfit {

inline constexpr int64_t kNoBucketLimit = INT64_MAX;      // sys.maxsize: one bucket per dtype
inline constexpr int64_t kDdpFirstBucketBytes = 1 << 20;  // dist._DEFAULT_FIRST_BUCKET_BYTES
inline constexpr int64_t kDdpBucketCapBytes = 25 * (int64_t{1} << 20);  // bucket_cap_mb=25
inline constexpr int64_t kDdpBroadcastBucketBytes =
    250 * (int64_t{1} << 20);  // broadcast_bucket_size

struct BucketTensor {
  int32_t index = 0;  // the tensor's position in the list DDP was given
  int64_t bytes = 0;
  DType dtype = DType::kFloat32;
};

struct GradientBucket {
  std::vector<int32_t> tensors;  // BucketTensor::index, in the order they were added
  int64_t bytes = 0;
};

enum class BucketOrder : uint8_t {
  kByFirstIndex,  // sorted by the smallest index in each (the construction's layout)
  kAsClosed,      // as they closed (the rebuild, whose input is already in gradient-ready order)
};

std::vector<GradientBucket> assign_buckets(std::span<const BucketTensor> tensors,
                                           std::span<const int64_t> limits, BucketOrder order);

// torch.distributed.optim.ZeroRedundancyOptimizer's partition (_partition_parameters, 1.13 and
// 2.x): parameter group by group, largest first (a stable sort by elements), each parameter
// goes to the rank with the fewest elements so far (the lowest such rank), the counts carrying
// over from group to group. Each rank's local optimizer steps its parameters in that order.
struct ShardParam {
  int32_t index = 0;  // the parameter's position in the optimizer's parameter list
  int64_t numel = 0;
  int group = 0;  // its parameter group: groups in increasing order
};
// Per rank: ShardParam::index in the local optimizer's order.
std::vector<std::vector<int32_t>> zero_redundancy_partition(std::span<const ShardParam> params,
                                                            int world_size);

// One rank's DDP layout: the buckets the constructor allocates, and those the reducer rebuilds
// before the second forward in the order gradients became ready (none with
// find_unused_parameters).
struct DdpLayout {
  std::vector<GradientBucket> buckets;
  std::vector<GradientBucket> rebuilt;
  // With ZeroRedundancyOptimizer: the parameter elements each rank's optimizer state covers.
  std::vector<int64_t> shard_elements;
};

}  // namespace trainfit
