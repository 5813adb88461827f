// Shape ops: views that share storage (view, permute, transpose, expand, select, slice,
// unsqueeze, squeeze, unflatten, chunk, split, unbind), ops that copy only when they must (reshape,
// flatten, contiguous), ops that always allocate (cat, stack), and creation (arange, full).
//
// autograd keeps nothing for any of them (derivatives.yaml: views save sizes only; cat and
// stack save sizes and dtypes). A reshape that cannot be a view clones (reshape =
// clone + _unsafe_view), and that clone is often what the next op keeps.
#include <fmt/format.h>

#include <limits>
#include <numeric>

#include "base/size_math.h"
#include "graph/op_registry.h"

namespace trainfit {
namespace {

// cat and stack take Python lists: ACT stacks one tensor per encoder token.
constexpr int kMaxListInputs = 1 << 20;

int64_t rank_of(const Value& v) {
  return static_cast<int64_t>(v.shape.size());
}

OpSchema shape_schema(std::string_view name, std::string_view doc, InferFn infer) {
  OpSchema s;
  s.name = name;
  s.family = "shape";
  s.doc = doc;
  s.data_movement = true;
  s.infer = std::move(infer);
  s.saved = [](const OpCall&) { return SavedList{}; };
  s.workspace = no_workspace;
  // Views, copies that keep the shape, cat, stack and pad hand back views of the incoming
  // gradient; select, slice, split, chunk and expand override this below.
  s.backward = alias_backward;
  return s;
}

// Gradients' layouts through views (Note [Gradient layouts]): view's backward is
// grad.reshape(self's sizes), transpose's and permute's put the dims back, stack's selects
// along its dim, cat's and pad's narrow (the same strides).
std::optional<Dims> reshape_grad(const Attrs&, const Dims& in, const Dims& out, const Dims& g) {
  return view_strides(out, g, in);
}
std::optional<Dims> same_grad(const Attrs&, const Dims&, const Dims&, const Dims& g) {
  return g;
}
std::optional<Dims> transpose_grad(const Attrs& a, const Dims& in, const Dims&, const Dims& g) {
  const auto rank = static_cast<int64_t>(in.size());
  const Result<int64_t> d0 = wrap_dim(a.get_int("dim0"), rank);
  const Result<int64_t> d1 = wrap_dim(a.get_int("dim1"), rank);
  if (!d0.ok() || !d1.ok()) return contiguous_strides(in);
  Dims s = g;
  std::swap(s[static_cast<size_t>(*d0)], s[static_cast<size_t>(*d1)]);
  return s;
}
std::optional<Dims> permute_grad(const Attrs& a, const Dims& in, const Dims&, const Dims& g) {
  const Dims& dims = a.get_ints("dims");
  Dims s(in.size(), 0);
  for (size_t i = 0; i < dims.size() && i < g.size(); ++i) {
    const Result<int64_t> d = wrap_dim(dims[i], static_cast<int64_t>(in.size()));
    if (!d.ok()) return contiguous_strides(in);
    s[static_cast<size_t>(*d)] = g[i];
  }
  return s;
}
std::optional<Dims> stack_grad(const Attrs& a, const Dims& in, const Dims&, const Dims& g) {
  const Result<int64_t> d = wrap_dim(a.get_int("dim"), static_cast<int64_t>(in.size()) + 1);
  if (!d.ok()) return contiguous_strides(in);
  Dims s = g;
  s.erase(s.begin() + *d);
  return s;
}
void view_grad(OpSchema& s, GradLayoutFn layout) {
  s.grad_layout = std::move(layout);
  s.grad_is_view = true;
}

// select/slice backward scatter into zeros of the input's shape; split/chunk backward cat the
// pieces' gradients: both are new tensors (the default rule).
void new_grad_backward(OpSchema& s) {
  s.backward = nullptr;
}

// A view when the strides allow it, otherwise a contiguous copy.
void view_or_copy(const Value& x, const Dims& shape, std::vector<OutputSpec>& out) {
  if (auto strides = view_strides(x.shape, x.strides, shape)) {
    out.push_back(OutputSpec::alias(0, shape, *strides, x.dtype));
  } else {
    out.push_back(OutputSpec::fresh(shape, x.dtype));
  }
}

Status view_infer(const OpCall& call, std::vector<OutputSpec>& out) {
  const Value& x = call.in(0);
  TF_ASSIGN_OR_RETURN(Dims shape,
                      infer_size(call.attrs.get_ints("shape"), checked_numel(x.shape).value_or(0)));
  auto strides = view_strides(x.shape, x.strides, shape);
  if (!strides) {
    return invalid_argument(fmt::format("view {} of a non-contiguous {} needs a copy",
                                        shape_string(shape), shape_string(x.shape)),
                            "use reshape");
  }
  out.push_back(OutputSpec::alias(0, shape, *strides, x.dtype));
  return {};
}

Status reshape_infer(const OpCall& call, std::vector<OutputSpec>& out) {
  const Value& x = call.in(0);
  TF_ASSIGN_OR_RETURN(Dims shape,
                      infer_size(call.attrs.get_ints("shape"), checked_numel(x.shape).value_or(0)));
  view_or_copy(x, shape, out);
  return {};
}

Status flatten_infer(const OpCall& call, std::vector<OutputSpec>& out) {
  const Value& x = call.in(0);
  if (x.shape.empty()) {
    out.push_back(OutputSpec::alias(0, {1}, {1}, x.dtype));
    return {};
  }
  TF_ASSIGN_OR_RETURN(int64_t start, wrap_dim(call.attrs.get_int("start_dim"), rank_of(x)));
  TF_ASSIGN_OR_RETURN(int64_t end, wrap_dim(call.attrs.get_int("end_dim"), rank_of(x)));
  if (start > end) return invalid_argument("flatten start_dim is after end_dim");
  if (start == end) {
    out.push_back(OutputSpec::alias(0, x.shape, x.strides, x.dtype));
    return {};
  }
  Dims shape(x.shape.begin(), x.shape.begin() + start);
  int64_t merged = 1;
  for (int64_t d = start; d <= end; ++d) merged *= x.shape[static_cast<size_t>(d)];
  shape.push_back(merged);
  shape.insert(shape.end(), x.shape.begin() + end + 1, x.shape.end());
  view_or_copy(x, shape, out);
  return {};
}

Status unflatten_infer(const OpCall& call, std::vector<OutputSpec>& out) {
  const Value& x = call.in(0);
  TF_ASSIGN_OR_RETURN(int64_t dim, wrap_dim(call.attrs.get_int("dim"), rank_of(x)));
  TF_ASSIGN_OR_RETURN(Dims sizes,
                      infer_size(call.attrs.get_ints("sizes"), x.shape[static_cast<size_t>(dim)]));
  Dims shape(x.shape.begin(), x.shape.begin() + dim);
  shape.insert(shape.end(), sizes.begin(), sizes.end());
  shape.insert(shape.end(), x.shape.begin() + dim + 1, x.shape.end());
  auto strides = view_strides(x.shape, x.strides, shape);
  TF_CHECK(strides.has_value()) << "splitting one dim is always a view";
  out.push_back(OutputSpec::alias(0, shape, *strides, x.dtype));
  return {};
}

Status permute_infer(const OpCall& call, std::vector<OutputSpec>& out) {
  const Value& x = call.in(0);
  const Dims& dims = call.attrs.get_ints("dims");
  if (static_cast<int64_t>(dims.size()) != rank_of(x)) {
    return invalid_argument(fmt::format("permute needs {} dims, got {}", rank_of(x), dims.size()));
  }
  Dims shape, strides;
  std::vector<bool> seen(dims.size(), false);
  for (int64_t d : dims) {
    TF_ASSIGN_OR_RETURN(int64_t w, wrap_dim(d, rank_of(x)));
    if (seen[static_cast<size_t>(w)]) return invalid_argument("permute repeats a dim");
    seen[static_cast<size_t>(w)] = true;
    shape.push_back(x.shape[static_cast<size_t>(w)]);
    strides.push_back(x.strides[static_cast<size_t>(w)]);
  }
  out.push_back(OutputSpec::alias(0, shape, strides, x.dtype));
  return {};
}

Status transpose_infer(const OpCall& call, std::vector<OutputSpec>& out) {
  const Value& x = call.in(0);
  TF_ASSIGN_OR_RETURN(int64_t a, wrap_dim(call.attrs.get_int("dim0"), rank_of(x)));
  TF_ASSIGN_OR_RETURN(int64_t b, wrap_dim(call.attrs.get_int("dim1"), rank_of(x)));
  Dims shape = x.shape;
  Dims strides = x.strides;
  if (!shape.empty()) {
    std::swap(shape[static_cast<size_t>(a)], shape[static_cast<size_t>(b)]);
    std::swap(strides[static_cast<size_t>(a)], strides[static_cast<size_t>(b)]);
  }
  out.push_back(OutputSpec::alias(0, shape, strides, x.dtype));
  return {};
}

Status contiguous_infer(const OpCall& call, std::vector<OutputSpec>& out) {
  const Value& x = call.in(0);
  if (is_contiguous(x.shape, x.strides)) {
    out.push_back(OutputSpec::alias(0, x.shape, x.strides, x.dtype));
  } else {
    out.push_back(OutputSpec::fresh(x.shape, x.dtype));
  }
  return {};
}

Status expand_infer(const OpCall& call, std::vector<OutputSpec>& out) {
  const Value& x = call.in(0);
  const Dims& sizes = call.attrs.get_ints("sizes");
  if (sizes.size() < x.shape.size()) return invalid_argument("expand cannot drop dims");
  Dims shape(sizes.size()), strides(sizes.size(), 0);
  const size_t offset = sizes.size() - x.shape.size();
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (i < offset) {
      if (sizes[i] < 0) return invalid_argument("expand: -1 is not allowed for a new dim");
      shape[i] = sizes[i];
      continue;
    }
    const int64_t have = x.shape[i - offset];
    const int64_t want = sizes[i] == -1 ? have : sizes[i];
    if (have != want && have != 1) {
      return invalid_argument(
          fmt::format("cannot expand {} to {}", shape_string(x.shape), shape_string(sizes)));
    }
    shape[i] = want;
    strides[i] = have == want ? x.strides[i - offset] : 0;
  }
  out.push_back(OutputSpec::alias(0, shape, strides, x.dtype));
  return {};
}

Status select_infer(const OpCall& call, std::vector<OutputSpec>& out) {
  const Value& x = call.in(0);
  TF_ASSIGN_OR_RETURN(int64_t dim, wrap_dim(call.attrs.get_int("dim"), rank_of(x)));
  const int64_t size = x.shape[static_cast<size_t>(dim)];
  const int64_t index = call.attrs.get_int("index");
  if (index < -size || index >= size) {
    return invalid_argument(fmt::format("index {} is out of range for size {}", index, size));
  }
  Dims shape = x.shape;
  Dims strides = x.strides;
  shape.erase(shape.begin() + dim);
  strides.erase(strides.begin() + dim);
  out.push_back(OutputSpec::alias(0, shape, strides, x.dtype));
  return {};
}

Status slice_infer(const OpCall& call, std::vector<OutputSpec>& out) {
  const Value& x = call.in(0);
  TF_ASSIGN_OR_RETURN(int64_t dim, wrap_dim(call.attrs.get_int("dim"), rank_of(x)));
  const int64_t size = x.shape[static_cast<size_t>(dim)];
  int64_t start = call.attrs.get_int("start");
  int64_t end = call.attrs.get_int("end");
  const int64_t step = call.attrs.get_int("step");
  if (step < 1) return invalid_argument("slice step must be positive");
  if (start < 0) start += size;
  if (end < 0) end += size;
  start = std::clamp<int64_t>(start, 0, size);
  end = std::clamp<int64_t>(end, start, size);
  Dims shape = x.shape;
  Dims strides = x.strides;
  shape[static_cast<size_t>(dim)] = ceil_div(end - start, step);
  strides[static_cast<size_t>(dim)] *= step;
  out.push_back(OutputSpec::alias(0, shape, strides, x.dtype));
  return {};
}

Status unsqueeze_infer(const OpCall& call, std::vector<OutputSpec>& out) {
  const Value& x = call.in(0);
  TF_ASSIGN_OR_RETURN(int64_t dim, wrap_dim(call.attrs.get_int("dim"), rank_of(x) + 1));
  Dims shape = x.shape;
  Dims strides = x.strides;
  const auto d = static_cast<size_t>(dim);
  const int64_t stride = d < shape.size() ? shape[d] * strides[d] : 1;
  shape.insert(shape.begin() + dim, 1);
  strides.insert(strides.begin() + dim, stride);
  out.push_back(OutputSpec::alias(0, shape, strides, x.dtype));
  return {};
}

Status squeeze_infer(const OpCall& call, std::vector<OutputSpec>& out) {
  const Value& x = call.in(0);
  TF_ASSIGN_OR_RETURN(int64_t dim, wrap_dim(call.attrs.get_int("dim"), rank_of(x)));
  Dims shape = x.shape;
  Dims strides = x.strides;
  if (!shape.empty() && shape[static_cast<size_t>(dim)] == 1) {
    shape.erase(shape.begin() + dim);
    strides.erase(strides.begin() + dim);
  }
  out.push_back(OutputSpec::alias(0, shape, strides, x.dtype));
  return {};
}

// Views of consecutive pieces of `dim`, of the given sizes.
Status pieces(const Value& x, int64_t dim, const Dims& sizes, std::vector<OutputSpec>& out) {
  int64_t offset = 0;
  for (int64_t s : sizes) {
    Dims shape = x.shape;
    shape[static_cast<size_t>(dim)] = s;
    out.push_back(OutputSpec::alias(0, shape, x.strides, x.dtype));
    offset += s;
  }
  if (offset != x.shape[static_cast<size_t>(dim)]) {
    return invalid_argument(fmt::format("split sizes {} do not add up to {}", shape_string(sizes),
                                        x.shape[static_cast<size_t>(dim)]));
  }
  return {};
}

Status chunk_infer(const OpCall& call, std::vector<OutputSpec>& out) {
  const Value& x = call.in(0);
  TF_ASSIGN_OR_RETURN(int64_t dim, wrap_dim(call.attrs.get_int("dim"), rank_of(x)));
  const int64_t chunks = call.attrs.get_int("chunks");
  if (chunks < 1) return invalid_argument("chunks must be at least 1");
  const int64_t size = x.shape[static_cast<size_t>(dim)];
  const int64_t piece = ceil_div(size, chunks);
  Dims sizes;
  for (int64_t left = size; left > 0; left -= piece) sizes.push_back(std::min(piece, left));
  return pieces(x, dim, sizes, out);
}

Status split_infer(const OpCall& call, std::vector<OutputSpec>& out) {
  const Value& x = call.in(0);
  TF_ASSIGN_OR_RETURN(int64_t dim, wrap_dim(call.attrs.get_int("dim"), rank_of(x)));
  return pieces(x, dim, call.attrs.get_ints("sizes"), out);
}

// list(x) or x.unbind(dim): one view per index along dim.
Status unbind_infer(const OpCall& call, std::vector<OutputSpec>& out) {
  const Value& x = call.in(0);
  if (x.shape.empty()) return invalid_argument("unbind needs a tensor with at least one dim");
  TF_ASSIGN_OR_RETURN(int64_t dim, wrap_dim(call.attrs.get_int("dim"), rank_of(x)));
  Dims shape = x.shape;
  Dims strides = x.strides;
  shape.erase(shape.begin() + dim);
  strides.erase(strides.begin() + dim);
  for (int64_t i = 0; i < x.shape[static_cast<size_t>(dim)]; ++i) {
    out.push_back(OutputSpec::alias(0, shape, strides, x.dtype));
  }
  return {};
}

Status cat_infer(const OpCall& call, std::vector<OutputSpec>& out, bool stack) {
  const Value& first = call.in(0);
  const int64_t rank = rank_of(first) + (stack ? 1 : 0);
  TF_ASSIGN_OR_RETURN(int64_t dim, wrap_dim(call.attrs.get_int("dim"), rank));
  Dims shape = first.shape;
  if (stack) shape.insert(shape.begin() + dim, 0);
  DType dtype = first.dtype;
  for (size_t i = 0; i < call.inputs.size(); ++i) {
    const Value& v = call.in(i);
    dtype = promote_types(dtype, v.dtype);
    bool ok = v.shape.size() == first.shape.size();
    for (size_t d = 0; ok && d < v.shape.size(); ++d) {
      ok = stack ? v.shape[d] == first.shape[d]
                 : (static_cast<int64_t>(d) == dim || v.shape[d] == first.shape[d]);
    }
    if (!ok) {
      return invalid_argument(fmt::format("cannot {} {} with {}", stack ? "stack" : "cat",
                                          shape_string(v.shape), shape_string(first.shape)));
    }
    shape[static_cast<size_t>(dim)] += stack ? 1 : (i == 0 ? 0 : v.shape[static_cast<size_t>(dim)]);
  }
  out.push_back(OutputSpec::fresh(shape, dtype));
  return {};
}

Status pad_infer(const OpCall& call, std::vector<OutputSpec>& out) {
  const Value& x = call.in(0);
  const Dims& pads = call.attrs.get_ints("pads");
  if (pads.size() % 2 != 0 || pads.size() / 2 > x.shape.size()) {
    return invalid_argument("pad needs (left, right) pairs, at most one per dim");
  }
  Dims shape = x.shape;
  for (size_t i = 0; i < pads.size() / 2; ++i) {
    int64_t& d = shape[shape.size() - 1 - i];
    d += pads[2 * i] + pads[2 * i + 1];
    if (d < 0) return invalid_argument("pad makes a dim negative");
  }
  out.push_back(OutputSpec::fresh(shape, x.dtype));
  return {};
}

Result<DType> creation_dtype(const OpCall& call) {
  const auto dtype = parse_dtype(call.attrs.get_string("dtype"));
  if (!dtype)
    return invalid_argument(fmt::format("unknown dtype '{}'", call.attrs.get_string("dtype")));
  return *dtype;
}

}  // namespace

void add_shape_ops(std::vector<OpSchema>& ops) {
  const AttrSpec shape_attr{"shape", AttrKind::kInts, std::nullopt,
                            "target shape (one -1 allowed)"};
  OpSchema view =
      shape_schema("view", "a view with another shape; errors when a copy is needed", view_infer);
  view.attrs = {shape_attr};
  view_grad(view, reshape_grad);
  ops.push_back(std::move(view));
  OpSchema reshape =
      shape_schema("reshape", "a view if the strides allow it, else a copy", reshape_infer);
  reshape.attrs = {shape_attr};
  view_grad(reshape, reshape_grad);
  ops.push_back(std::move(reshape));
  OpSchema flatten =
      shape_schema("flatten", "merge dims start_dim..end_dim (a view or a copy)", flatten_infer);
  flatten.attrs = {{"start_dim", AttrKind::kInt, AttrValue{int64_t{0}}, "first dim merged"},
                   {"end_dim", AttrKind::kInt, AttrValue{int64_t{-1}}, "last dim merged"}};
  view_grad(flatten, reshape_grad);
  ops.push_back(std::move(flatten));
  OpSchema unflatten =
      shape_schema("unflatten", "split one dim into several (a view)", unflatten_infer);
  unflatten.attrs = {{"dim", AttrKind::kInt, std::nullopt, "dim to split"},
                     {"sizes", AttrKind::kInts, std::nullopt, "new sizes (one -1 allowed)"}};
  view_grad(unflatten, reshape_grad);
  ops.push_back(std::move(unflatten));
  OpSchema permute = shape_schema("permute", "reorder dims (a view)", permute_infer);
  permute.attrs = {{"dims", AttrKind::kInts, std::nullopt, "the new order"}};
  view_grad(permute, permute_grad);
  ops.push_back(std::move(permute));
  OpSchema transpose = shape_schema("transpose", "swap two dims (a view)", transpose_infer);
  transpose.attrs = {{"dim0", AttrKind::kInt, std::nullopt, "first dim"},
                     {"dim1", AttrKind::kInt, std::nullopt, "second dim"}};
  view_grad(transpose, transpose_grad);
  ops.push_back(std::move(transpose));
  ops.push_back(shape_schema("contiguous", "the input if contiguous, else a contiguous copy",
                             contiguous_infer));
  ops.push_back(shape_schema("clone", "a contiguous copy (x.clone())",
                             [](const OpCall& call, std::vector<OutputSpec>& out) {
                               const Value& x = call.in(0);
                               out.push_back(OutputSpec::fresh(x.shape, x.dtype));
                               return Status();
                             }));
  OpSchema expand =
      shape_schema("expand", "broadcast size-1 dims without copying (a view)", expand_infer);
  expand.attrs = {{"sizes", AttrKind::kInts, std::nullopt, "target sizes (-1 keeps a dim)"}};
  expand.backward = [](const OpCall& call) {
    const Value& x = call.in(0);
    const Dims& sizes = call.attrs.get_ints("sizes");
    bool broadcast = sizes.size() != x.shape.size();
    for (size_t i = 0; !broadcast && i < sizes.size(); ++i) {
      broadcast = sizes[i] != -1 && sizes[i] != x.shape[i];
    }
    return broadcast ? backward_of(OpSchema{}, call) : alias_backward(call);
  };
  ops.push_back(std::move(expand));
  OpSchema select = shape_schema("select", "x[..., index, ...] along dim (a view)", select_infer);
  select.attrs = {{"dim", AttrKind::kInt, std::nullopt, "dim"},
                  {"index", AttrKind::kInt, std::nullopt, "index"}};
  new_grad_backward(select);
  ops.push_back(std::move(select));
  OpSchema slice = shape_schema("slice", "x[start:end:step] along dim (a view)", slice_infer);
  slice.attrs = {
      {"dim", AttrKind::kInt, std::nullopt, "dim"},
      {"start", AttrKind::kInt, AttrValue{int64_t{0}}, "first index"},
      {"end", AttrKind::kInt, AttrValue{std::numeric_limits<int64_t>::max()}, "end index"},
      {"step", AttrKind::kInt, AttrValue{int64_t{1}}, "step"}};
  new_grad_backward(slice);
  ops.push_back(std::move(slice));
  OpSchema unsqueeze = shape_schema("unsqueeze", "insert a size-1 dim (a view)", unsqueeze_infer);
  unsqueeze.attrs = {{"dim", AttrKind::kInt, std::nullopt, "where"}};
  view_grad(unsqueeze, reshape_grad);
  ops.push_back(std::move(unsqueeze));
  OpSchema squeeze = shape_schema("squeeze", "drop a size-1 dim (a view)", squeeze_infer);
  squeeze.attrs = {{"dim", AttrKind::kInt, std::nullopt, "which"}};
  view_grad(squeeze, reshape_grad);
  ops.push_back(std::move(squeeze));
  OpSchema chunk = shape_schema("chunk", "split into equal pieces along dim (views)", chunk_infer);
  chunk.attrs = {{"chunks", AttrKind::kInt, std::nullopt, "number of pieces"},
                 {"dim", AttrKind::kInt, AttrValue{int64_t{0}}, "dim"}};
  new_grad_backward(chunk);
  ops.push_back(std::move(chunk));
  OpSchema split =
      shape_schema("split", "split into pieces of given sizes along dim (views)", split_infer);
  split.attrs = {{"sizes", AttrKind::kInts, std::nullopt, "piece sizes"},
                 {"dim", AttrKind::kInt, AttrValue{int64_t{0}}, "dim"}};
  new_grad_backward(split);
  ops.push_back(std::move(split));

  OpSchema unbind = shape_schema(
      "unbind", "one view per index along dim (list(x) iterates this way)", unbind_infer);
  unbind.attrs = {{"dim", AttrKind::kInt, AttrValue{int64_t{0}}, "dim"}};
  new_grad_backward(unbind);  // the pieces' gradients are stacked into one new tensor
  ops.push_back(std::move(unbind));

  OpSchema pad =
      shape_schema("pad", "constant padding (F.pad); a new tensor, keeps nothing", pad_infer);
  pad.attrs = {{"pads", AttrKind::kInts, std::nullopt, "(left, right) pairs from the last dim"},
               {"value", AttrKind::kFloat, AttrValue{0.0}, "fill value"}};
  pad.grad_layout = same_grad;
  ops.push_back(std::move(pad));

  OpSchema cat = shape_schema(
      "cat", "concatenate along dim (a new tensor); keeps nothing",
      [](const OpCall& c, std::vector<OutputSpec>& o) { return cat_infer(c, o, false); });
  cat.attrs = {{"dim", AttrKind::kInt, AttrValue{int64_t{0}}, "dim"}};
  cat.max_inputs = kMaxListInputs;
  cat.autocast = Autocast::kPromote;
  view_grad(cat, same_grad);
  ops.push_back(std::move(cat));
  OpSchema stack = shape_schema(
      "stack", "stack along a new dim (a new tensor); keeps nothing",
      [](const OpCall& c, std::vector<OutputSpec>& o) { return cat_infer(c, o, true); });
  stack.attrs = {{"dim", AttrKind::kInt, AttrValue{int64_t{0}}, "dim"}};
  stack.max_inputs = kMaxListInputs;
  stack.autocast = Autocast::kPromote;
  view_grad(stack, stack_grad);
  ops.push_back(std::move(stack));

  OpSchema arange = shape_schema("arange", "0, 1, ..., end-1 (torch.arange); needs no gradient",
                                 [](const OpCall& c, std::vector<OutputSpec>& o) {
                                   const int64_t end = c.attrs.get_int("end");
                                   if (end < 0) return invalid_argument("arange end must be >= 0");
                                   TF_ASSIGN_OR_RETURN(DType dtype, creation_dtype(c));
                                   o.push_back(OutputSpec::aux({end}, dtype));
                                   return Status();
                                 });
  arange.attrs = {{"end", AttrKind::kInt, std::nullopt, "one past the last value"},
                  {"dtype", AttrKind::kString, AttrValue{std::string("int64")}, "dtype"}};
  arange.min_inputs = 0;
  arange.max_inputs = 0;
  arange.differentiable = false;
  ops.push_back(std::move(arange));

  OpSchema full = shape_schema(
      "full", "a tensor filled with value (torch.full/zeros, or *_like of an input); no gradient",
      [](const OpCall& c, std::vector<OutputSpec>& o) {
        Dims shape = c.attrs.get_ints("shape");
        if (!c.inputs.empty()) shape = c.in(0).shape;
        for (int64_t d : shape) {
          if (d < 0) return invalid_argument("full needs non-negative sizes");
        }
        TF_ASSIGN_OR_RETURN(DType dtype, creation_dtype(c));
        o.push_back(OutputSpec::aux(shape, dtype));
        o.back().host = c.attrs.get_bool("host");
        return Status();
      });
  full.attrs = {{"shape", AttrKind::kInts, AttrValue{Dims{}}, "shape (ignored with an input)"},
                {"value", AttrKind::kFloat, AttrValue{0.0}, "fill value"},
                {"dtype", AttrKind::kString, AttrValue{std::string("float32")}, "dtype"},
                {"host", AttrKind::kBool, AttrValue{false},
                 "made on the CPU (torch.tensor(x) with no device), used as a scalar"}};
  full.min_inputs = 0;
  full.max_inputs = 1;
  full.differentiable = false;
  ops.push_back(std::move(full));
}

}  // namespace trainfit
