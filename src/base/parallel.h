// Work spread over the machine's cores: the planner's independent searches (one per device
// class in `fit --gpu all`, one per what-if row, per launch candidate), the batches a walk
// down tries (Note [The edge]) and the step times of `estimate`'s suggested changes.
//
//   parallel_for(rows.size(), [&](size_t worker, size_t i) { ... row i ... });
//
// The calling thread runs tasks itself and the process's pool of worker_limit() - 1 threads
// helps with whatever is left: a pool thread takes the next task as it finishes one, and work
// started inside a task is shared the same way, so nesting never runs more threads than the
// limit. The caller waits only for tasks already started elsewhere, never for a thread to wake.
// Tasks must not share mutable state unless they guard it, and what a task computes must not
// depend on which worker ran it, so that the output is the same on any machine.
#pragma once

#include <cstddef>
#include <functional>

namespace trainfit {

// The hardware threads; TRAINFIT_THREADS=N caps them (1: everything on the calling thread).
size_t worker_limit();

// The pool's threads waiting for work now: how many more tasks could start at once besides
// the caller's.
size_t idle_workers();

// Calls work(worker, task) once for every task in [0, tasks) and returns when all have
// finished. Worker 0 is the calling thread; each pool thread that joins gets the next number,
// below the hardware threads.
void parallel_for(size_t tasks, const std::function<void(size_t worker, size_t task)>& work);

}  // namespace trainfit
