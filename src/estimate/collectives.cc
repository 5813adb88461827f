#include "estimate/collectives.h"

#include <algorithm>

namespace trainfit {

// Bus bandwidths (all_reduce_perf's busbw, large messages):
// - PCIe 4.0: 24.5 GB/s, six RTX 4090s with peer-to-peer enabled by a patched driver, 32 MiB
//   (tinygrad/open-gpu-kernel-modules). The stock driver has no peer-to-peer on GeForce cards
//   and NCCL then stages through host memory; no stock figure was found, so for them this is an
//   optimistic bound (measure yours and give --bus-bandwidth).
// - PCIe 5.0: 28 GB/s, eight RTX 5090s (35 with four) (NVIDIA/nccl#1639).
// - PCIe 3.0: half of PCIe 4.0 (x16 carries 16 GB/s a direction against 32): derived.
// - NVLink 3: 200 GB/s, eight A100 SXM (about 200-208, NVIDIA/nccl-tests#149, #178).
// - NVLink 4: 370 GB/s, eight H100 SXM with the ring algorithm (NVLS about 480,
//   NVIDIA/nccl-tests#212).
// - NVLink 2: V100 SXM2's 150 GB/s a direction at A100's achieved share of NVLink 3's 300
//   (2/3): derived.
Link link_of(LinkKind kind) {
  switch (kind) {
    case LinkKind::kPcie3:
      return {kind, "PCIe 3.0 x16", 12.25, false, "half of PCIe 4.0's measured figure"};
    case LinkKind::kPcie4:
      return {kind, "PCIe 4.0 x16", 24.5, true,
              "6x RTX 4090 with peer-to-peer (patched driver); stock GeForce may be slower"};
    case LinkKind::kPcie5:
      return {kind, "PCIe 5.0 x16", 28.0, true, "8x RTX 5090"};
    case LinkKind::kNvlink2:
      return {kind, "NVLink 2", 100.0, false, "V100's link rate at A100's achieved share"};
    case LinkKind::kNvlink3:
      return {kind, "NVLink 3", 200.0, true, "8x A100 SXM"};
    case LinkKind::kNvlink4:
      return {kind, "NVLink 4", 370.0, true, "8x H100 SXM, ring"};
  }
  return {};
}

LinkKind default_link(std::string_view gpu) {
  if (gpu == "rtx5090") return LinkKind::kPcie5;
  if (gpu == "t4") return LinkKind::kPcie3;
  if (gpu.starts_with("v100")) return LinkKind::kNvlink2;
  if (gpu.starts_with("a100")) return LinkKind::kNvlink3;
  if (gpu.starts_with("h100") || gpu == "h200") return LinkKind::kNvlink4;
  return LinkKind::kPcie4;  // rtx3060, rtx3090, rtx4090, a10, l4
}

namespace {

double transfer(double bytes, double factor, double bus_gbps) {
  if (bus_gbps <= 0) return kCollectiveLatencyS;
  return kCollectiveLatencyS + factor * bytes / (bus_gbps * 1e9);
}

}  // namespace

double all_reduce_seconds(double bytes, int ranks, double bus_gbps) {
  const double n = std::max(1, ranks);
  return transfer(bytes, 2 * (n - 1) / n, bus_gbps);
}

double all_gather_seconds(double bytes, int ranks, double bus_gbps) {
  const double n = std::max(1, ranks);
  return transfer(bytes, (n - 1) / n, bus_gbps);
}

double broadcast_seconds(double bytes, double bus_gbps) {
  return transfer(bytes, 1, bus_gbps);
}

double ring_bus_gbps(const Link& link, int nodes, double network_gbps) {
  return nodes > 1 ? std::min(link.bus_gbps, network_gbps) : link.bus_gbps;
}

CommTime ddp_comm_time(std::span<const GradientBucket> buckets, std::span<const double> ready_s,
                       double backward_s, int ranks, const Link& link) {
  CommTime c;
  c.link = link;
  c.ranks = ranks;
  c.bus_gbps = link.bus_gbps;
  double free_at = 0;  // the NCCL stream
  for (const GradientBucket& b : buckets) {
    BucketTime t;
    t.bytes = b.bytes;
    for (int32_t i : b.tensors) {
      if (i >= 0 && static_cast<size_t>(i) < ready_s.size()) {
        t.ready_s = std::max(t.ready_s, ready_s[static_cast<size_t>(i)]);
      }
    }
    t.start_s = std::max(t.ready_s, free_at);
    t.end_s = t.start_s + all_reduce_seconds(static_cast<double>(b.bytes), ranks, link.bus_gbps);
    free_at = t.end_s;
    c.all_reduce_s += t.end_s - t.start_s;
    c.buckets.push_back(t);
  }
  c.exposed_s = std::max(0.0, free_at - backward_s);
  return c;
}

}  // namespace trainfit
