#include "taehv/files/output_file.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <random>

#include "taehv/files/input_file.h"

namespace taehv::files {
namespace {

// Linux's own limit on symbolic links followed while resolving one path (MAXSYMLINKS).
constexpr int kMaxLinkHops = 40;
// The temporary's name: TARGET + ".tmp." + six letters or digits (mkstemp's shape, which isAtomicWriteTemporary
// recognises); a name taken already is retried this often.
constexpr const char* kTemporaryInfix = ".tmp.";
constexpr int kTemporaryNameChars = 6;
constexpr int kTemporaryNameTries = 100;
// A new file's mode before the umask: what open(2) and every other program create files with.
constexpr mode_t kNewFileMode = 0666;

std::string errnoText(int err) { return std::strerror(err); }

std::string folderOf(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

std::string cannotWrite(const std::string& path, const std::string& why) { return "cannot write '" + path + "': " + why; }

/// Refuses a target that is an input of this command (by device and inode).
Status refuseInput(const std::string& path, const std::string& target) {
  const std::optional<InputRecord> input = inputAt(target);
  if (!input) return {};
  return {cannotWrite(path, "it is the file this command reads as " + fileLabel(input->what, input->path) +
                                "; writing it would replace that input: give another output path")};
}

/// Creates TARGET.tmp.XXXXXX exclusively with kNewFileMode, so that the kernel applies the umask (and a default
/// ACL of the folder) as for any new file; mkstemp's fixed 0600 would not.
Checked<std::pair<FileDescriptor, std::string>> createTemporary(const std::string& target) {
  static constexpr char kNameChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::random_device random;
  std::uniform_int_distribution<std::size_t> pick(0, sizeof kNameChars - 2);
  int err = 0;
  for (int attempt = 0; attempt < kTemporaryNameTries; ++attempt) {
    std::string name = target + kTemporaryInfix;
    for (int i = 0; i < kTemporaryNameChars; ++i) name += kNameChars[pick(random)];
    const int fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, kNewFileMode);
    if (fd >= 0) return {"", {FileDescriptor(fd), name}};
    err = errno;
    if (err != EEXIST) break;
  }
  const std::string folder = folderOf(target);
  return {"cannot create a temporary file in " + folder + " (" + errnoText(err) + "; " + freeSpaceNote(folder) + ")"};
}

/// Gives the temporary the replaced file's mode and, where this process may (root; or a group it is in), its
/// owner and group: replacing a file never widens who may read it. Owner first: chown clears set-id bits.
bool keepOwnerAndMode(int fd, const struct stat& old) {
  struct stat now {};
  if (::fstat(fd, &now) != 0) return false;
  if (now.st_uid != old.st_uid || now.st_gid != old.st_gid) {
    // Best effort (NFS with root squash refuses even root): the mode below is kept in any case.
    if (::geteuid() == 0) {
      (void)::fchown(fd, old.st_uid, old.st_gid);
    } else if (now.st_gid != old.st_gid) {
      (void)::fchown(fd, static_cast<uid_t>(-1), old.st_gid);
    }
  }
  return ::fchmod(fd, old.st_mode & 07777) == 0;
}

}  // namespace

Checked<std::string> writableTarget(const std::string& path) {
  if (path.empty()) return {"an output file name is empty; give a file"};
  std::string target = path;
  for (int hop = 0;; ++hop) {
    struct stat st {};
    if (::lstat(target.c_str(), &st) != 0) {
      if (errno == ENOENT) return {"", target};  // nothing to replace: the rename creates it
      return {cannotWrite(path, errnoText(errno))};
    }
    if (S_ISREG(st.st_mode)) return {"", target};
    if (!S_ISLNK(st.st_mode)) {
      return {cannotWrite(path, (target == path ? "it" : "'" + target + "' (its link target)") + " is " +
                                    fileKind(st.st_mode) +
                                    "; outputs are written to a temporary file and renamed into place, which would "
                                    "replace it: give the path of a regular file (or of one to create)")};
    }
    if (hop == kMaxLinkHops) {
      return {cannotWrite(path, "more than " + std::to_string(kMaxLinkHops) + " symbolic links (a loop?)")};
    }
    char buf[PATH_MAX];
    const ssize_t n = ::readlink(target.c_str(), buf, sizeof buf - 1);
    if (n < 0) return {cannotWrite(path, "reading link '" + target + "': " + errnoText(errno))};
    const std::string link(buf, static_cast<std::size_t>(n));
    target = link.front() == '/' ? link : folderOf(target) + "/" + link;
  }
}

Status checkOutputFile(const std::string& path) {
  const Checked<std::string> target = writableTarget(path);
  if (!target.ok()) return {target.error};
  if (Status input = refuseInput(path, target.value); !input.ok()) return input;
  const std::string folder = folderOf(target.value);
  struct stat st {};
  if (::stat(folder.c_str(), &st) != 0) {
    return {cannotWrite(path, "its folder " + folder + ": " + errnoText(errno) + "; create the folder first")};
  }
  if (!S_ISDIR(st.st_mode)) return {cannotWrite(path, folder + " is " + fileKind(st.st_mode) + ", not a folder")};
  if (::access(folder.c_str(), W_OK) != 0) {
    return {cannotWrite(path, "its folder " + folder + " is not writable (" + errnoText(errno) + ")")};
  }
  return {};
}

std::string freeSpaceNote(const std::string& folder) {
  struct statvfs vfs {};
  if (::statvfs(folder.c_str(), &vfs) != 0) return "the free space of " + folder + " is unknown";
  const std::uint64_t free_bytes = static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  return folder + " has " + std::to_string(free_bytes >> 20) + " MiB free";
}

bool writeAllBytes(int fd, const void* data, std::size_t size) {
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
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

Status writeFileAtomically(const std::string& path, const std::function<bool(int fd)>& fill) {
  const Checked<std::string> resolved = writableTarget(path);
  if (!resolved.ok()) return {resolved.error};
  const std::string& target = resolved.value;
  if (Status input = refuseInput(path, target); !input.ok()) return input;
  const std::string folder = folderOf(target);
  struct stat old {};
  const bool replacing = ::stat(target.c_str(), &old) == 0;
  Checked<std::pair<FileDescriptor, std::string>> temporary = createTemporary(target);
  if (!temporary.ok()) return {cannotWrite(path, temporary.error)};
  FileDescriptor& fd = temporary.value.first;
  const std::string& tmp = temporary.value.second;
  errno = 0;
  bool ok = false;
  try {
    ok = (!replacing || keepOwnerAndMode(fd.get(), old)) && fill(fd.get()) && ::fsync(fd.get()) == 0;
  } catch (...) {  // a producer's own error (an encoder's, say): no temporary is left behind either
    fd.reset();
    ::unlink(tmp.c_str());
    throw;
  }
  int err = ok ? 0 : errno;
  if (::close(fd.release()) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (ok && ::rename(tmp.c_str(), target.c_str()) != 0) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    ::unlink(tmp.c_str());
    return {cannotWrite(path, (err != 0 ? errnoText(err) : std::string("write failed")) + " (" +
                                  freeSpaceNote(folder) + "); nothing was replaced")};
  }
  return {};
}

Status writeFileAtomically(const std::string& path, std::string_view content) {
  return writeFileAtomically(path, [&](int fd) { return writeAllBytes(fd, content.data(), content.size()); });
}

Checked<FileDescriptor> openForAppend(const std::string& path) {
  const Checked<std::string> target = writableTarget(path);
  if (!target.ok()) return {target.error};
  if (Status input = refuseInput(path, target.value); !input.ok()) return {input.error};
  // O_NONBLOCK: a FIFO put in its place since the check is not waited for (and refused below).
  FileDescriptor fd(
      ::open(target.value.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NONBLOCK | O_NOCTTY, kNewFileMode));
  if (fd.get() < 0) {
    const int err = errno;
    return {cannotWrite(path, errnoText(err) + " (" + freeSpaceNote(folderOf(target.value)) + ")")};
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return {cannotWrite(path, errnoText(errno))};
  if (!S_ISREG(st.st_mode)) return {cannotWrite(path, "it is " + fileKind(st.st_mode) + "; give a regular file")};
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0) return {cannotWrite(path, errnoText(errno))};
  return {"", std::move(fd)};
}

bool isAtomicWriteTemporary(const std::string& name) {
  const std::size_t at = name.rfind(kTemporaryInfix);
  const std::size_t infix = std::strlen(kTemporaryInfix);
  if (at == std::string::npos || at == 0 || name.size() - at != infix + kTemporaryNameChars) return false;
  return std::all_of(name.begin() + static_cast<std::ptrdiff_t>(at + infix), name.end(),
                     [](unsigned char c) { return std::isalnum(c) != 0; });
}

}  // namespace taehv::files
