// What every fallible call of the runner returns: an exit code and a message naming the stage.
#pragma once
#include <string>

namespace deployc {

struct Failure {
  int exit_code = 0;  // 0: ok; 1: runtime failure; 2: bad bundle or bad input
  std::string message;
  explicit operator bool() const { return exit_code != 0; }
};

}  // namespace deployc
