// Gradient layouts: the strides of the gradients backward hands on, where they decide whether
// PyTorch copies a gradient.
//
//   Dims s = view_grad_strides(g, node, 0, incoming);   // nullopt: the view's backward copies
//   GradCopy c = grad_copy(g, node, incoming);           // does the node need it dense first?
//
// Note [Gradient layouts]
// A view's backward hands on a view of the gradient that arrived (derivatives.yaml:
// transpose -> grad.transpose, permute -> grad.permute back, view -> grad.reshape(self's
// sizes)), so a gradient keeps the layout the kernel that made it gave it, permuted. Kernels
// that make gradients (bmm, mm, the norms' and losses' backward kernels) allocate them
// contiguous, so a gradient is only out of order where it came back through a transpose or a
// permute. Two things then allocate what trainfit did not count before:
//  - reshape() of such a gradient cannot always be a view: nn.MultiheadAttention's q, k and v
//    are (L, B*H, d) views transposed to (B*H, L, d); their gradients come back from bmm as
//    contiguous (B*H, L, d), transposed to (L, B*H, d), and view's backward reshapes them to
//    (L, B, E), which for q and v is a copy (k's gradient, transposed twice, reshapes as a view
//    and is copied by the next linear instead).
//  - kernels that need the incoming gradient dense: layer_norm's CUDA backward (dY.contiguous()
//    once dX, dgamma and dbeta exist), memory-efficient attention's (in the output's own
//    layout, before anything else; Note [Memory-efficient attention's backward]), linear over more
//    than two dims (the input is folded to a matrix and the output's view reshapes the gradient
//    back, 1.13's matmul and 2.x's _flatten_nd_linear alike), and cuDNN's convolution backward,
//    whose backward-data and backward-filter each take a dense copy (grad_output.contiguous(memory
//    format)) while the bias's sum reads the gradient in place, staged as a reduction over strided
//    inputs is (the H100 recording of ACT: its input projection's gradient arrives permuted from
//    the encoder's tokens).
// Gradients made by kernels are taken as contiguous unless the op gives their strides
// (GradRule::strides: memory-efficient attention makes (B, L, H, E) gradients and hands them on
// as (B, H, L, E), so the view that split the heads copies each back); where one is not (an
// elementwise backward following an out-of-order gradient), a copy PyTorch makes later is
// missed, never invented.
// The kernels' copies are the kernels' own temporaries, counted where their workspaces are
// (CUDA). Checked against CPU PyTorch 1.13 on LeRobot's ACT (each copy of a view's backward
// there, counted op by op) and against the H100 recording of ACT at batch 32.
#pragma once

#include <optional>

#include "graph/graph.h"

namespace trainfit {

// The strides of the gradient a view-like backward (an alias rule) hands to `input`, given the
// strides of the gradient that arrived for the node's output (its op's grad_layout); nullopt
// where that backward is a reshape the strides do not allow, and so a contiguous copy.
std::optional<Dims> view_grad_strides(const Graph& g, const Node& node, int input,
                                      const Dims& incoming);

enum class GradCopy : uint8_t {
  kNoCopy,
  kBeforeNode,  // a view's backward copies it first; the copy replaces the incoming gradient
  // The kernel copies it (temporary memory inside it, counted where kernels' workspaces are):
  kPerKernel,   // each cuDNN kernel of a convolution's backward, for itself (ConvShared.cpp)
  kKernelLast,  // after it has allocated the gradients, freed when it returns (layer_norm)
  // before it allocates the gradients, into the output's own layout, freed when it returns
  // (memory-efficient attention)
  kKernelFirst,
};

// Whether the node's backward copies the gradient of its output 0, which arrived with the
// strides `incoming`, before using it (its op's dense_grad).
GradCopy grad_copy(const Graph& g, const Node& node, const Dims& incoming);

}  // namespace trainfit
