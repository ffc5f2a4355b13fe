#include "taehv/model/output_file.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>

namespace taehv {
namespace {

// Linux's own limit on symbolic links followed while resolving one path (MAXSYMLINKS).
constexpr int kMaxLinkHops = 40;

std::string errnoText(int err) { return std::strerror(err); }

std::string kindOf(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

std::string folderOf(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

}  // namespace

std::string writableTarget(const std::string& path) {
  std::string target = path;
  for (int hop = 0;; ++hop) {
    struct stat st{};
    if (::lstat(target.c_str(), &st) != 0) {
      if (errno == ENOENT) return target;  // nothing to replace: the rename creates it
      throw OutputFileError("cannot write '" + path + "': " + errnoText(errno));
    }
    if (S_ISREG(st.st_mode)) return target;
    if (!S_ISLNK(st.st_mode)) {
      throw OutputFileError("cannot write '" + path + "': " + (target == path ? "it" : "'" + target + "' (its link target)") +
                            " is " + kindOf(st.st_mode) +
                            "; outputs are written to a temporary file and renamed into place, which would replace "
                            "it: give the path of a regular file (or of one to create)");
    }
    if (hop == kMaxLinkHops) {
      throw OutputFileError("cannot write '" + path + "': more than " + std::to_string(kMaxLinkHops) +
                            " symbolic links (a loop?)");
    }
    char buf[PATH_MAX];
    const ssize_t n = ::readlink(target.c_str(), buf, sizeof buf - 1);
    if (n < 0) throw OutputFileError("cannot write '" + path + "': reading link '" + target + "': " + errnoText(errno));
    const std::filesystem::path link(std::string(buf, static_cast<size_t>(n)));
    target = link.is_absolute() ? link.string() : (std::filesystem::path(folderOf(target)) / link).string();
  }
}

std::string freeSpaceNote(const std::string& folder) {
  struct statvfs vfs{};
  if (::statvfs(folder.c_str(), &vfs) != 0) return "the free space of " + folder + " is unknown";
  const uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  return folder + " has " + std::to_string(free_bytes >> 20) + " MiB free";
}

bool writeAllBytes(int fd, const void* data, size_t size) {
  const auto* in = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, in, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) {
      errno = ENOSPC;  // write(2) returning 0 for a non-zero size: no room
      return false;
    }
    in += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

void writeFileAtomically(const std::string& path, const std::function<bool(int fd)>& fill, mode_t mode) {
  const std::string target = writableTarget(path);
  const std::string folder = folderOf(target);
  std::string tmp = target + ".tmp.XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) {
    const int err = errno;
    throw OutputFileError("cannot create a temporary file in " + folder + " to write '" + path + "': " +
                          errnoText(err) + " (" + freeSpaceNote(folder) + ")");
  }
  errno = 0;
  bool ok = false;
  try {
    ok = ::fchmod(fd, mode) == 0 && fill(fd) && ::fsync(fd) == 0;
  } catch (...) {  // a producer's own error (an encoder's, say): no temporary is left behind either
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  int err = ok ? 0 : errno;
  if (::close(fd) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (ok && ::rename(tmp.c_str(), target.c_str()) != 0) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    ::unlink(tmp.c_str());
    throw OutputFileError("cannot write '" + path + "': " + (err != 0 ? errnoText(err) : std::string("write failed")) +
                          " (" + freeSpaceNote(folder) + "); nothing was replaced");
  }
}

}  // namespace taehv
