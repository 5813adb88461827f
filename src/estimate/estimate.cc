#include "estimate/estimate.h"

#include <fmt/format.h>

#include <algorithm>

#include "base/size_math.h"
#include "graph/activations.h"
#include "graph/op_schema.h"
#include "lower/lowering.h"

namespace trainfit {
namespace {

Moment moment_of(const EventNames& names, const Event& e) {
  Moment m;
  m.phase = e.phase;
  m.iteration = e.iteration;
  if (e.node != kNone) {
    m.op = names.op(e.node);
    const ModuleId module = names.node_module(e.node);
    if (module != kNone) m.module = names.module(module);
  }
  return m;
}

std::string module_label(const Graph& g, ModuleId id) {
  const Module& m = g.modules[id];
  return m.path.empty() ? m.name : m.path;
}

}  // namespace

EventNames names_of(const Graph& g) {
  EventNames names;
  names.op = [&g](NodeId n) { return std::string(g.nodes[n].op->name); };
  names.node_module = [&g](NodeId n) { return g.nodes[n].module; };
  names.module = [&g](ModuleId m) { return module_label(g, m); };
  names.param = [&g](int32_t p) { return g.params[p].name; };
  names.blocks = module_blocks(g);
  return names;
}

namespace {

struct Replay {
  IdVector<int64_t> live_sizes;  // per buffer at the peak (explain only)
  int64_t peak_allocated = 0;
  int64_t peak_reserved = 0;
  size_t peak_event = 0;
  std::array<int64_t, kCategoryCount> breakdown{};
  std::array<int64_t, kFigureSourceCount> workspace_sources{};  // workspaces at the peak
  std::vector<int64_t> activations;                             // per top module slot, at the peak
  int64_t retries = 0;
  std::optional<size_t> oom_event;
  OutOfMemory oom;
  std::vector<TimelinePoint> timeline;
};

// What a buffer asks of the allocator in this replay: its bound at the bound's (Note
// [Workspace bounds]); 0 where it is made at the other replay only.
int64_t asked_bytes(const Buffer& b, bool at_bound) {
  return at_bound && b.bound_bytes >= 0 ? b.bound_bytes : b.bytes;
}
bool made_in_replay(const Buffer& b, bool at_bound) {
  return b.bound_bytes < 0 || asked_bytes(b, at_bound) > 0;
}

Replay replay(const EventList& list, const DeviceProfile& device, AllocatorConfig config,
              bool timeline, const IdVector<int>& slot_of_buffer, size_t slots, bool at_bound,
              std::optional<size_t> stop_after = std::nullopt) {
  Replay r;
  r.activations.assign(slots, 0);
  const bool caching = device.caching_allocator;
  const bool skip_host = !host_tensors_use_device_memory(device.target);
  CachingAllocator allocator(config);
  IdVector<CachingAllocator::BlockId> block(list.buffers.size(), -1);
  std::array<int64_t, kCategoryCount> live{};
  std::array<int64_t, kFigureSourceCount> live_sources{};
  std::vector<int64_t> live_activations(slots, 0);
  int64_t allocated = 0;
  int64_t reserved = 0;
  if (timeline) r.timeline.reserve(list.events.size());
  for (size_t i = 0; i < list.events.size(); ++i) {
    const Event& e = list.events[i];
    if (e.empty_cache) {
      if (caching) allocator.empty_cache();
      reserved = caching ? allocator.stats().reserved_bytes : reserved;
      if (timeline) {
        r.timeline.push_back({e.phase, e.iteration, e.node, false, true, Category::kWorkspace, 0,
                              allocated, reserved});
      }
      continue;
    }
    const Buffer& b = list.buffers[e.buffer];
    if ((b.host && skip_host) || !made_in_replay(b, at_bound)) continue;
    const int64_t asked = asked_bytes(b, at_bound);
    int64_t size = asked;
    if (caching) {
      if (e.alloc) {
        const auto id = allocator.malloc(asked);
        if (!id) {
          r.oom_event = i;
          r.oom = allocator.last_oom();
          break;
        }
        block[e.buffer] = *id;
        size = allocator.block_size(*id);
      } else {
        size = allocator.block_size(block[e.buffer]);
        allocator.free(block[e.buffer]);
      }
      allocated = allocator.stats().allocated_bytes;
      reserved = allocator.stats().reserved_bytes;
    } else {
      allocated += e.alloc ? size : -size;
      reserved = allocated;
    }
    const int64_t delta = e.alloc ? size : -size;
    live[static_cast<size_t>(b.category)] += delta;
    if (b.category == Category::kWorkspace) live_sources[static_cast<size_t>(b.source)] += delta;
    if (b.category == Category::kActivation) {
      live_activations[static_cast<size_t>(slot_of_buffer[e.buffer])] += delta;
    }
    if (allocated > r.peak_allocated) {
      r.peak_allocated = allocated;
      r.peak_event = i;
      r.breakdown = live;
      r.workspace_sources = live_sources;
      r.activations = live_activations;
    }
    r.peak_reserved = std::max(r.peak_reserved, reserved);
    if (timeline) {
      r.timeline.push_back(
          {e.phase, e.iteration, e.node, e.alloc, false, b.category, asked, allocated, reserved});
    }
    if (stop_after && i == *stop_after) {
      r.live_sizes.assign(list.buffers.size(), 0);
      for (size_t j = 0; j <= i; ++j) {
        const Event& ev = list.events[j];
        if (ev.empty_cache) continue;
        const Buffer& buffer = list.buffers[ev.buffer];
        if ((buffer.host && skip_host) || !made_in_replay(buffer, at_bound)) continue;
        r.live_sizes[ev.buffer] = ev.alloc ? 1 : 0;
      }
      for (size_t k = 0; k < r.live_sizes.size(); ++k) {
        if (r.live_sizes[k] == 0) continue;
        r.live_sizes[k] =
            caching ? allocator.block_size(block[k]) : asked_bytes(list.buffers[k], at_bound);
      }
      break;
    }
  }
  r.retries = allocator.stats().num_alloc_retries;
  return r;
}

}  // namespace

LoweringOptions lowering_options(const DeviceProfile& device) {
  LoweringOptions lowering;
  if (kernels_take_workspaces(device.target)) {
    lowering.cublas_workspace_bytes = device.cublas_workspace_bytes;
    lowering.cublaslt_workspace_bytes = cublaslt_workspace_bytes();
    lowering.op_workspaces = true;
  }
  return lowering;
}

Result<LoweredStep> lower_step(const Graph& g, const EstimateOptions& options) {
  LoweredStep step;
  TF_ASSIGN_OR_RETURN(step.list,
                      lower_training_step(g, options.training, lowering_options(options.device)));
  for (const Param& p : g.params) {
    if (p.buffer) continue;
    const int64_t n = param_weights(g, p);
    step.facts.parameters += n;
    if (p.trainable) step.facts.trainable_parameters += n;
  }
  step.facts.activation_bytes = activation_bytes(g);
  return step;
}

Result<Estimate> estimate_lowered(const Graph& g, const LoweredStep& step,
                                  const EstimateOptions& options) {
  const EventNames names = names_of(g);
  TF_ASSIGN_OR_RETURN(Estimate e, estimate_events(step.list, names, step.facts, options));
  TF_RETURN_IF_ERROR(add_workspace_bound(e, step.list, names, options));
  if (options.step_time) {
    TF_ASSIGN_OR_RETURN(e.time, graph_step_time(g, options, &step.list));
    if (e.time && options.dataset_size) {
      e.epoch = epoch_time(*e.time, *options.dataset_size, options.training.distributed.world_size);
    }
  }
  return e;
}

Result<Estimate> estimate(const Graph& g, const EstimateOptions& options) {
  TF_ASSIGN_OR_RETURN(const LoweredStep step, lower_step(g, options));
  return estimate_lowered(g, step, options);
}

namespace {

// DDP's (and ZeroRedundancyOptimizer's) collectives in one steady-state step.
CommTime data_parallel_comm(const Graph& g, const TrainingConfig& training, const StepTime& t,
                            const DdpLayout& layout, const Link& link) {
  const DistributedConfig& d = training.distributed;
  // The reducer's parameters: those that train, in parameters() order (lower/lowering.cc).
  std::vector<double> ready;
  double buffer_bytes = 0;
  std::vector<double> param_bytes;
  for (size_t p = 0; p < g.params.size(); ++p) {
    const Param& param = g.params[p];
    const auto bytes = static_cast<double>(value_bytes(g.value(param.value)));
    if (param.buffer) {
      buffer_bytes += bytes;
      continue;
    }
    if (!param.trainable) continue;
    param_bytes.push_back(bytes);
    // A parameter without a gradient (find_unused_parameters) is marked ready when backward ends.
    const double at = p < t.grad_ready_s.size() ? t.grad_ready_s[p] : -1;
    ready.push_back(at >= 0 ? at : t.micro_backward_s);
  }
  const std::vector<GradientBucket>& buckets =
      layout.rebuilt.empty() ? layout.buckets : layout.rebuilt;
  const double bus = ring_bus_gbps(link, d.nodes, d.network_gbps);
  Link used = link;
  used.bus_gbps = bus;
  CommTime c = ddp_comm_time(buckets, ready, t.micro_backward_s, d.world_size, used);
  c.link = link;
  c.nodes = d.nodes;
  c.network_gbps = d.nodes > 1 ? d.network_gbps : 0;
  if (d.ddp.broadcast_buffers && buffer_bytes > 0) {
    // Before every forward, no_sync()'s included.
    c.serial_s += training.grad_accum * broadcast_seconds(buffer_bytes, bus);
  }
  if (d.ddp.find_unused_parameters) {
    c.serial_s += all_reduce_seconds(4.0 * static_cast<double>(ready.size()), d.world_size,
                                     bus);  // the used map
  }
  if (d.strategy == Strategy::kZero1) {
    // _broadcast_params: every parameter from the rank that stepped it, one call each.
    for (double bytes : param_bytes) c.serial_s += broadcast_seconds(bytes, bus);
  }
  return c;
}

// FSDP's collectives in one steady-state step. Without prefetching in forward, each unit's
// all-gather runs before its compute can start: serial. Its reduce-scatter runs on another
// stream while backward goes on; what backward does not cover, and the last unit's, is added.
CommTime fsdp_comm(const TrainingConfig& training, const StepTime& t,
                   const std::vector<FsdpUnitSize>& units, const Link& link) {
  const DistributedConfig& d = training.distributed;
  const double bus = ring_bus_gbps(link, d.nodes, d.network_gbps);
  CommTime c;
  c.link = link;
  c.ranks = d.world_size;
  c.nodes = d.nodes;
  c.network_gbps = d.nodes > 1 ? d.network_gbps : 0;
  c.bus_gbps = bus;
  c.sharded = true;
  double gathers = 0;
  double last_scatter = 0;
  for (const FsdpUnitSize& unit : units) {
    const double gather =
        all_gather_seconds(static_cast<double>(unit.padded_bytes), d.world_size, bus);
    // FULL_SHARD gathers a wrapped unit again for backward; the root stays gathered.
    const bool root = unit.module == kNone;
    gathers += gather * (!root && d.fsdp.sharding == FsdpSharding::kFullShard ? 2 : 1);
    // A reduce-scatter moves what an all-gather of the same result does.
    c.all_reduce_s += gather;
    // The last to finish: the root's, else the first wrapped unit's (backward ends there).
    if (root || last_scatter == 0) last_scatter = gather;
  }
  c.serial_s = gathers * training.grad_accum;
  c.exposed_s = training.grad_accum * std::max(last_scatter, c.all_reduce_s - t.micro_backward_s);
  return c;
}

}  // namespace

Result<std::optional<StepTime>> graph_step_time(const Graph& g, const EstimateOptions& options,
                                                const EventList* lowered) {
  const DeviceProfile& device = options.device;
  if (!device.timing || device.target.device != Device::kCuda) return std::optional<StepTime>();
  TF_ASSIGN_OR_RETURN(const StepCost cost, step_cost(g, options.training, options.cost));
  StepTime t = time_step(cost, *device.timing);
  const Strategy strategy = options.training.distributed.strategy;
  if (strategy == Strategy::kSingle) return std::optional<StepTime>(std::move(t));
  // The communication follows the layout the lowering made: DDP's buckets, FSDP's units.
  EventList own;
  if (lowered == nullptr) {
    TF_ASSIGN_OR_RETURN(own, lower_training_step(g, options.training, {}));
    lowered = &own;
  }
  if (strategy == Strategy::kFsdp) {
    add_communication(t, fsdp_comm(options.training, t, lowered->fsdp, device.timing->link));
  } else if (lowered->ddp) {
    add_communication(
        t, data_parallel_comm(g, options.training, t, *lowered->ddp, device.timing->link));
  }
  return std::optional<StepTime>(std::move(t));
}

Result<Estimate> estimate_events(const EventList& list, const EventNames& names, Estimate facts,
                                 const EstimateOptions& options, bool at_bound) {
  const DeviceProfile& device = options.device;
  if (list.events.empty()) {
    return invalid_argument("there are no allocation events to replay",
                            "the model allocated nothing during its training step");
  }
  // Activation bytes at the peak are reported per block (graph.h module_blocks).
  const std::vector<ModuleId>& blocks = names.blocks;
  std::vector<ModuleId> slot_modules;
  IdVector<int> slot_of_buffer(list.buffers.size(), 0);
  slot_modules.push_back(kNone);
  for (size_t i = 0; i < list.buffers.size(); ++i) {
    const ModuleId m = list.buffers[i].module;
    const ModuleId top = m == kNone ? kNone : blocks[static_cast<size_t>(m)];
    auto it = std::find(slot_modules.begin(), slot_modules.end(), top);
    if (it == slot_modules.end()) {
      slot_modules.push_back(top);
      it = slot_modules.end() - 1;
    }
    slot_of_buffer[i] = static_cast<int>(it - slot_modules.begin());
  }

  Estimate e = std::move(facts);
  // The events this replay plays: not those of buffers made at the other one only.
  e.events = static_cast<size_t>(
      std::count_if(list.events.begin(), list.events.end(), [&](const Event& ev) {
        return ev.empty_cache || made_in_replay(list.buffers[ev.buffer], at_bound);
      }));
  e.ddp = list.ddp;
  e.plan_searches = list.plan_searches;
  e.unmeasured_searches = list.unmeasured_searches;
  e.workspace_calls = list.workspace_sources;
  e.fsdp = list.fsdp;
  e.total_bytes = device.total_bytes;
  e.margin_bytes = device.total_bytes >= 0 ? options.margin_bytes : 0;
  e.cuda_context_bytes = device.target.device == Device::kCuda ? device.context_bytes : 0;

  AllocatorConfig config = options.allocator;
  if (device.total_bytes >= 0 && device.caching_allocator) {
    config.capacity =
        std::max<int64_t>(0, device.total_bytes - e.margin_bytes - e.cuda_context_bytes);
  }
  Replay r =
      replay(list, device, config, options.timeline, slot_of_buffer, slot_modules.size(), at_bound);
  if (r.oom_event) {
    e.oom = moment_of(names, list.events[*r.oom_event]);
    e.oom_numbers = r.oom;
    e.fits = false;
    if (options.peak_after_oom) {
      // Note [Past an OOM].
      std::optional<Replay> whole;
      if (e.margin_bytes > 0) {
        config.capacity = std::max<int64_t>(0, device.total_bytes - e.cuda_context_bytes);
        whole = replay(list, device, config, options.timeline, slot_of_buffer, slot_modules.size(),
                       at_bound);
        if (whole->oom_event) whole.reset();
      }
      if (whole) {
        r = std::move(*whole);
        e.figures_from = FiguresFrom::kWholeGpu;
      } else {
        config.capacity = -1;
        r = replay(list, device, config, options.timeline, slot_of_buffer, slot_modules.size(),
                   at_bound);
        e.figures_from = FiguresFrom::kUnlimited;
      }
    }
  }
  e.peak_allocated_bytes = r.peak_allocated;
  e.peak_reserved_bytes = r.peak_reserved;
  e.peak = moment_of(names, list.events[r.peak_event]);
  e.breakdown = r.breakdown;
  e.workspace_bytes_at_peak = r.workspace_sources;
  std::vector<size_t> slot_order(slot_modules.size());
  for (size_t s = 0; s < slot_order.size(); ++s) slot_order[s] = s;
  std::sort(slot_order.begin(), slot_order.end(), [&](size_t a, size_t b) {
    // Model order: modules as they were entered; ops outside any module last.
    const auto key = [&](size_t s) {
      return slot_modules[s] == kNone ? INT32_MAX : slot_modules[s];
    };
    return key(a) < key(b);
  });
  for (size_t s : slot_order) {
    if (r.activations[s] == 0) continue;
    const ModuleId m = slot_modules[s];
    std::string name = m == kNone ? "(outside modules)" : names.module(m);
    e.activations_by_module.push_back({std::move(name), r.activations[s]});
  }
  e.allocator_cache_bytes = r.peak_reserved - r.peak_allocated;
  for (const Buffer& b : list.buffers) {
    if (b.paged) e.paged_bytes += b.bytes;
  }
  e.num_alloc_retries = r.retries;
  e.device_used_bytes = r.peak_reserved + e.cuda_context_bytes;
  if (e.total_bytes >= 0) {
    e.headroom_bytes = e.total_bytes - e.margin_bytes - e.device_used_bytes;
    e.fits = e.fits && e.headroom_bytes >= 0;
  }
  e.peak_allocated_upper_bytes = e.peak_allocated_bytes;
  e.peak_reserved_upper_bytes = e.peak_reserved_bytes;
  e.device_used_upper_bytes = e.device_used_bytes;
  e.fits_upper = e.fits;
  e.timeline = std::move(r.timeline);
  if (options.explain) {
    const size_t peak_event = r.peak_event;
    const Replay at_peak = replay(list, device, config, false, slot_of_buffer, slot_modules.size(),
                                  at_bound, peak_event);
    IdVector<int> first_phase(list.buffers.size(), 0);
    for (const Event& ev : list.events) {
      if (ev.alloc && !ev.empty_cache) first_phase[ev.buffer] = static_cast<int>(ev.phase);
    }
    for (size_t b = 0; b < at_peak.live_sizes.size(); ++b) {
      if (at_peak.live_sizes[b] == 0) continue;
      const Buffer& buf = list.buffers[b];
      LiveTensor t;
      t.bytes = at_peak.live_sizes[b];
      t.category = buf.category;
      t.phase = static_cast<Phase>(first_phase[b]);
      if (buf.node != kNone) t.op = names.op(buf.node);
      if (buf.param >= 0) {
        t.module = names.param(buf.param);
      } else if (buf.module != kNone) {
        t.module = names.module(buf.module);
      }
      e.live_at_peak.push_back(std::move(t));
    }
    std::stable_sort(e.live_at_peak.begin(), e.live_at_peak.end(),
                     [](const LiveTensor& a, const LiveTensor& b) { return a.bytes > b.bytes; });
  }
  return e;
}

bool has_unmeasured_workspaces(const EventList& list) {
  return list.workspace_sources[static_cast<size_t>(FigureSource::kScaled)] +
             list.workspace_sources[static_cast<size_t>(FigureSource::kRule)] >
         0;
}

Status add_workspace_bound(Estimate& e, const EventList& list, const EventNames& names,
                           const EstimateOptions& options) {
  if (!has_unmeasured_workspaces(list)) return Status();
  if (!e.fits && !options.peak_after_oom) {
    e.fits_upper = false;  // a search's probe that ran out: it only needs to say so
    return Status();
  }
  EstimateOptions o = options;
  o.timeline = false;
  o.explain = false;
  o.step_time = false;
  TF_ASSIGN_OR_RETURN(const Estimate upper,
                      estimate_events(list, names, Estimate{}, o, /*at_bound=*/true));
  // A bound is never below the central figure: reserved memory is not monotone in one
  // allocation's size (where blocks land changes), so a larger workspace can come out lower.
  e.peak_allocated_upper_bytes = std::max(e.peak_allocated_bytes, upper.peak_allocated_bytes);
  e.peak_reserved_upper_bytes = std::max(e.peak_reserved_bytes, upper.peak_reserved_bytes);
  e.device_used_upper_bytes = std::max(e.device_used_bytes, upper.device_used_bytes);
  e.fits_upper = e.fits && upper.fits;
  return Status();
}

}  // namespace trainfit
