#include "subreaper.h"

#include <dirent.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace taehv::process {

std::set<pid_t> childrenOf(pid_t parent) {
  std::set<pid_t> found;
  DIR* dir = ::opendir("/proc");
  if (dir == nullptr) return found;
  while (dirent* e = ::readdir(dir)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
    if (pid <= 0) continue;
    std::ifstream in(std::string("/proc/") + e->d_name + "/stat");
    std::string stat;
    std::getline(in, stat);
    const std::size_t close = stat.rfind(')');  // the command name may hold spaces and parentheses
    if (close == std::string::npos || close + 2 >= stat.size()) continue;
    long ppid = 0;
    if (std::sscanf(stat.c_str() + close + 2, "%*c %ld", &ppid) == 1 && ppid == parent) found.insert(pid);
  }
  ::closedir(dir);
  return found;
}

SubreaperScope::SubreaperScope() {
  int was = 0;
  ::prctl(PR_GET_CHILD_SUBREAPER, &was);
  was_subreaper_ = was != 0;
  if (!was_subreaper_) active_ = ::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0;
  earlier_children_ = childrenOf(::getpid());
}

SubreaperScope::~SubreaperScope() {
  if (active_) ::prctl(PR_SET_CHILD_SUBREAPER, 0);
}

bool SubreaperScope::adopts() const { return active_ || was_subreaper_ || ::getpid() == 1; }

}  // namespace taehv::process
