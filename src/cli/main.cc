#include <iostream>

#include "cli/cli.h"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv, argv + argc);
  return trainfit::run_cli(args, std::cout, std::cerr);
}
