// Work spread over the machine's cores: the planner's independent searches (one per catalog GPU
// in `fit --gpu all`, one per what-if row) run side by side.
//
//   const size_t workers = worker_count(rows.size());
//   parallel_for(workers, rows.size(), [&](size_t worker, size_t i) { ... row i ... });
//
// Each task runs once, on the calling thread (worker 0) or one of workers - 1 others, which take
// the next task as they finish one; tasks must not share mutable state unless they guard it.
// What a task computes must not depend on which worker ran it, so that the output is the same
// on any machine.
#pragma once

#include <cstddef>
#include <functional>

namespace trainfit {

// How many threads `tasks` independent tasks are worth: the hardware threads, at most one per
// task, at least one. TRAINFIT_THREADS=N caps it (1: everything on the calling thread).
size_t worker_count(size_t tasks);

void parallel_for(size_t workers, size_t tasks,
                  const std::function<void(size_t worker, size_t task)>& work);

}  // namespace trainfit
