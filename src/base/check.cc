#include "base/check.h"

#include <cstdio>
#include <cstdlib>

namespace trainfit {

CheckFailure::CheckFailure(const char* condition, const char* file, int line) {
  stream_ << file << ":" << line << ": internal check failed: " << condition << " ";
}

CheckFailure::~CheckFailure() {
  // The one place where the core writes to stderr: a broken invariant is a bug, not a result.
  std::fprintf(stderr, "trainfit: %s\n", stream_.str().c_str());
  std::abort();
}

}  // namespace trainfit
