// sush-sim ARGS...: the same as `sush sim ARGS...` (components/sim/cli.h).
#include <iostream>

#include "once/sim/cli.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return once::sim::SimCommand(args, std::cout, std::cerr);
}
