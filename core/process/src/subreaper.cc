#include "subreaper.h"

#include <dirent.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <fstream>
#include <optional>
#include <string>
#include <string_view>

#include "taehv/parse.h"

namespace taehv::process {

std::set<pid_t> childrenOf(pid_t parent) {
  std::set<pid_t> found;
  DIR* dir = ::opendir("/proc");
  if (dir == nullptr) return found;
  while (dirent* e = ::readdir(dir)) {
    const std::optional<pid_t> pid = parseCount<pid_t>(e->d_name, 1);
    if (!pid) continue;  // not a process: ".", "self", "sys", ...
    std::ifstream in(std::string("/proc/") + e->d_name + "/stat");
    std::string stat;
    std::getline(in, stat);
    const std::size_t close = stat.rfind(')');  // the command name may hold spaces and parentheses
    if (close == std::string::npos || close + 2 >= stat.size()) continue;
    // After the name: "STATE PPID ...".
    const std::string_view fields = std::string_view(stat).substr(close + 2);
    const std::size_t ppid_at = fields.find(' ');
    if (ppid_at == std::string_view::npos) continue;
    const std::string_view ppid_text = fields.substr(ppid_at + 1, fields.find(' ', ppid_at + 1) - ppid_at - 1);
    if (parseCount<pid_t>(ppid_text) == parent) found.insert(*pid);
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
