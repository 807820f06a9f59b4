// attnserve_client: the sample command-line client; see its --help.
#include <unistd.h>

#include <iostream>
#include <string>
#include <vector>

#include "client/commands.h"

int main(int argc, char** argv) {
  attnserve::client::Io io;
  io.in = &std::cin;
  io.in_is_terminal = isatty(STDIN_FILENO) == 1;
  io.out_is_terminal = isatty(STDOUT_FILENO) == 1;
  const std::vector<std::string> args(argv + 1, argv + argc);
  return attnserve::client::RunClient(args, io);
}
