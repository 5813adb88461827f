#include <malloc.h>

#include <iostream>

#include "cli/cli.h"

namespace {

// A command lives milliseconds and builds and drops graphs and event lists of megabytes, one
// per estimate. glibc's defaults map each large block afresh and give the heap back as soon as
// it shrinks, so every estimate paid the kernel to map and zero its memory again (half of an
// `estimate`'s time on this machine). Keeping the heap for the process's short life does not.
void keep_the_heap() {
  constexpr int kMiB = 1 << 20;
  mallopt(M_MMAP_THRESHOLD, 256 * kMiB);   // large blocks from the heap, not their own mapping
  mallopt(M_TRIM_THRESHOLD, 1024 * kMiB);  // the heap's free top stays
  mallopt(M_TOP_PAD, 64 * kMiB);           // and grows in large steps
}

}  // namespace

int main(int argc, char** argv) {
  keep_the_heap();
  const std::vector<std::string> args(argv, argv + argc);
  return trainfit::run_cli(args, std::cout, std::cerr);
}
