#include "common/process.h"

#include <signal.h>

#include <cerrno>
#include <fstream>
#include <string>

namespace ringcomm {

bool processGone(int pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) != 0) return errno == ESRCH;
  // /proc/<pid>/stat: "<pid> (<command>) <state> ...", where the command may hold spaces and
  // parentheses: the state follows the last ')'.
  std::ifstream file("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(file, line)) return false;  // no /proc here: kill() has answered
  const size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return false;
  const char state = line[close + 2];
  return state == 'Z' || state == 'X';
}

}  // namespace ringcomm
