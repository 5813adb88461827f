// Communication between the GPUs of a data-parallel run: what a link between cards carries, what
// NCCL's ring collectives cost on it, and how much of DistributedDataParallel's gradient
// all-reduce backward hides.
//
//   Link l = link_of(default_link("rtx4090"));          // PCIe 4.0, 24.5 GB/s bus bandwidth
//   all_reduce_seconds(100e6, 4, l.bus_gbps);            // 6.1 ms: 2(n-1)/n x S / busbw
//   CommTime c = ddp_comm_time(buckets, ready_s, 0.120, 4, l);
//   c.exposed_s;   // the all-reduce still running when backward ends
//
// The cost model is nccl-tests' (doc/PERFORMANCE.md): a collective of S bytes over n ranks
// takes S/busbw times 2(n-1)/n for all-reduce, (n-1)/n for reduce-scatter and all-gather, 1 for
// broadcast, where busbw, the bus bandwidth all_reduce_perf prints, is a property of the link
// that does not depend on n. Each collective also pays a fixed latency.
//
// DDP's reducer launches a bucket's all-reduce once all its gradients are ready, one bucket after
// another in bucket order on one NCCL stream (Reducer::mark_bucket_ready); backward goes on
// meanwhile. What is still running when backward ends is added to the step. Gradient
// accumulation under no_sync() all-reduces in the last micro-batch only.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "base/enum_names.h"
#include "lower/ddp.h"

namespace trainfit {

enum class LinkKind : uint8_t { kPcie3, kPcie4, kPcie5, kNvlink2, kNvlink3, kNvlink4 };
inline constexpr auto kLinkNames = enum_names<LinkKind>({{LinkKind::kPcie3, "pcie3"},
                                                         {LinkKind::kPcie4, "pcie4"},
                                                         {LinkKind::kPcie5, "pcie5"},
                                                         {LinkKind::kNvlink2, "nvlink2"},
                                                         {LinkKind::kNvlink3, "nvlink3"},
                                                         {LinkKind::kNvlink4, "nvlink4"}});

// A link between the GPUs of one node, as NCCL's all-reduce uses it.
struct Link {
  LinkKind kind = LinkKind::kPcie4;
  std::string_view display;  // "PCIe 4.0 x16"
  double bus_gbps = 0;       // all_reduce_perf's busbw at large sizes, GB/s (10^9 bytes)
  // Where the figure comes from: a published all_reduce_perf run, or derived from one.
  bool measured = false;
  std::string_view source;
};

Link link_of(LinkKind kind);
// The link a catalog GPU's cards have between them in the usual server: PCIe for GeForce and
// PCIe data-centre cards (GeForce cards have no peer-to-peer, so NCCL goes through host memory),
// NVLink for SXM cards.
LinkKind default_link(std::string_view gpu_name);

// Latency per collective call: NCCL's launch and ring set-up for a small message (a chosen
// constant, tens of microseconds in all_reduce_perf's small sizes).
inline constexpr double kCollectiveLatencyS = 25e-6;

double all_reduce_seconds(double bytes, int ranks, double bus_gbps);
double all_gather_seconds(double bytes, int ranks, double bus_gbps);  // bytes: the full result
double broadcast_seconds(double bytes, double bus_gbps);

// One bucket's all-reduce in the steady state, seconds from the start of the (last
// micro-batch's) backward.
struct BucketTime {
  int64_t bytes = 0;
  double ready_s = 0;  // its last gradient is ready
  double start_s = 0;
  double end_s = 0;
};

struct CommTime {
  Link link;
  int ranks = 1;
  int nodes = 1;
  double network_gbps = 0;  // between nodes, per node (with more than one)
  double bus_gbps = 0;      // what the collectives ran at: the slower of the two
  std::vector<BucketTime> buckets;
  // FSDP: all_reduce_s holds the units' reduce-scatters and serial_s their all-gathers.
  bool sharded = false;
  double all_reduce_s = 0;  // the buckets' all-reduces, end to end
  double exposed_s = 0;     // of them, after backward ends
  // Not overlapped: DDP's buffer broadcast before each forward, ZeroRedundancyOptimizer's
  // broadcast of the updated parameters after the step, find_unused_parameters' used map.
  double serial_s = 0;
  double added_s() const { return exposed_s + serial_s; }
};

// `ready_s[i]`: when DDP parameter i's gradient is ready, seconds into backward (`backward_s`
// long); the buckets hold DDP indices. The caller adds `serial_s`.
CommTime ddp_comm_time(std::span<const GradientBucket> buckets, std::span<const double> ready_s,
                       double backward_s, int ranks, const Link& link);

// The bus bandwidth of a ring over `nodes` nodes: every ring crosses each node's network once
// in and once out, so across nodes the per-node network bounds it (NCCL runs one ring per NIC:
// give the node's total).
double ring_bus_gbps(const Link& link, int nodes, double network_gbps);

}  // namespace trainfit
