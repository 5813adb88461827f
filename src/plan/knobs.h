// Memory knobs: the changes to a training request that trade something (speed, precision, the
// recipe, the model) for memory, each a function on the request with its cost.
//
//   Result<std::vector<Knob>> knobs = memory_knobs(request, device);
//   TrainingRequest amp = with_knobs(request, {&knobs->front()});   // e.g. AMP bf16 turned on
//   knobs->front().change.args   // {"--precision", "amp-bf16"}: the same change on the command
//   line
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "estimate/estimate.h"
#include "pipeline/request.h"

namespace trainfit {

// How intrusive a knob is; a target-batch plan prefers the least intrusive combination.
enum class KnobKind : uint8_t {
  kFree,       // same math, same speed or faster (allocator setting, fused optimizer)
  kPrecision,  // same model in lower precision (AMP, 8-bit optimizer state)
  kRecompute,  // same math, more compute (activation checkpointing)
  kRecipe,     // a different training recipe (SGD instead of Adam, a frozen backbone)
  kModel,      // a different model (architecture or input size): only when allowed
};
inline constexpr auto kKnobKindNames = enum_names<KnobKind>({
    {KnobKind::kFree, "free"},
    {KnobKind::kPrecision, "precision"},
    {KnobKind::kRecompute, "recompute"},
    {KnobKind::kRecipe, "recipe"},
    {KnobKind::kModel, "model"},
});
inline std::string_view knob_kind_name(KnobKind kind) {
  return kKnobKindNames.name(kind);
}

// A change to a request, and the same change as `trainfit estimate` arguments (which, added
// after a request's own, build the changed request: a later value wins, lists add up). The
// constructors below make both from one value.
struct Change {
  std::function<void(TrainingRequest&)> apply;
  std::vector<std::string> args;
};
Change set_precision(Precision precision);
Change set_optimizer_impl(OptimizerImpl impl);
Change set_optimizer(OptimizerKind kind);  // with the implementation PyTorch picks
Change use_expandable_segments();
Change add_checkpoints(std::vector<std::string> patterns);
Change use_fsdp(std::vector<std::string> wrap);  // --strategy fsdp --fsdp-wrap ...
Change add_frozen(std::vector<std::string> prefixes);
Change set_input(Dims input);
Change set_seq_len(int64_t seq_len);
Change add_sets(std::vector<std::pair<std::string, std::string>> sets);
Change both(Change first, Change second);  // `first`, then `second`, as one change
Change set_lora(const LoraConfig& lora);   // --lora
Change use_gradient_as_bucket_view();
Change set_strategy(Strategy strategy);

struct Knob {
  std::string name;  // "checkpoint encoder layers"
  KnobKind kind = KnobKind::kFree;
  std::string group;  // knobs of one non-empty group exclude each other
  Change change;
  double recompute = 0;  // checkpointing: recomputed share of the step's FLOPs
  std::string cost;      // "none", "+9.1% FLOPs" (of the step), "changes the model"
};

// How a plan orders what it offers: by memory (the largest batch, then the least device use;
// a target batch: the least recompute) or by time (the fastest step first).
enum class Rank : uint8_t { kMemory, kTime };
inline constexpr auto kRankNames =
    enum_names<Rank>({{Rank::kMemory, "memory"}, {Rank::kTime, "time"}});
inline std::string_view rank_name(Rank rank) {
  return kRankNames.name(rank);
}

// The predicted time per sample with a change over the time without it, less 1 (-0.25: a
// quarter faster); at one batch, the step time's change. nullopt where either estimate has no
// step time (no timing constants for the device, a trace).
std::optional<double> step_change(const Estimate& with, const Estimate& without);

// The memory knobs that apply to a request on a device (bf16 needs sm80 or later).
Result<std::vector<Knob>> memory_knobs(const TrainingRequest& request, const DeviceProfile& device);

// The units FSDP wraps in a zoo model: the request's --fsdp-wrap, else the model's repeated
// blocks (those checkpointing offers), as module patterns, and their classes for
// ModuleWrapPolicy. Empty for a trace: the whole model is then one unit.
struct FsdpBlocks {
  std::vector<std::string> patterns;
  std::vector<std::string> classes;
};
Result<FsdpBlocks> fsdp_blocks(const ResolvedRequest& r);
// The request with the knobs turned on, in order.
TrainingRequest with_knobs(TrainingRequest request, const std::vector<const Knob*>& on);

}  // namespace trainfit
