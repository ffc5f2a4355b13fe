#include "taehv/files/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

namespace taehv::files {
namespace {

/// The inputs of this command, by (device, inode); the first name each was read as.
class InputRegistry {
 public:
  void add(const struct stat& st, std::string_view what, const std::string& path) {
    std::lock_guard<std::mutex> lock(mutex_);
    inputs_.emplace(std::make_pair(st.st_dev, st.st_ino), InputRecord{std::string(what), path});
  }
  /// The input that is the file `st` describes. A record whose path no longer names that file (deleted, replaced)
  /// is forgotten: its inode number may have been given to a new file since.
  std::optional<InputRecord> find(const struct stat& st) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = inputs_.find(std::make_pair(st.st_dev, st.st_ino));
    if (it == inputs_.end()) return std::nullopt;
    struct stat now {};
    if (::stat(it->second.path.c_str(), &now) != 0 || now.st_dev != st.st_dev || now.st_ino != st.st_ino) {
      inputs_.erase(it);
      return std::nullopt;
    }
    return it->second;
  }

 private:
  std::mutex mutex_;
  std::map<std::pair<dev_t, ino_t>, InputRecord> inputs_;
};

InputRegistry& registry() {
  static InputRegistry* inputs = new InputRegistry;  // never destroyed: readers may run during static teardown
  return *inputs;
}

Status notRegular(std::string_view what, const std::string& path, mode_t mode) {
  std::string why = fileLabel(what, path) + ": " + fileKind(mode) + ", not a regular file";
  if (S_ISFIFO(mode)) why += " (it is not opened: reading one waits for a writer)";
  return {why + "; give the path of a regular file"};
}

Status cannotRead(std::string_view what, const std::string& path, int err) {
  return {fileLabel(what, path) + ": cannot read it (" + std::strerror(err) + ")" +
          (err == ENOENT ? "; check the path" : err == EACCES ? "; check its permissions" : "")};
}

Status tooLarge(std::string_view what, const std::string& path, std::uint64_t max_bytes) {
  return {fileLabel(what, path) + ": larger than " + byteCountText(max_bytes) + ", the most taken for it; give the " +
          "right file"};
}

}  // namespace

std::string fileLabel(std::string_view what, const std::string& path) {
  return what.empty() ? path : std::string(what) + " " + path;
}

std::string fileKind(unsigned mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISREG(mode)) return "a regular file";
  return "not a regular file";
}

std::string byteCountText(std::uint64_t bytes) {
  if (bytes < (1u << 10)) return std::to_string(bytes) + " bytes";
  const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes) / 1024.0;
  int unit = 0;
  while (value >= 1024.0 && unit < 3) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  const bool whole = value == static_cast<double>(static_cast<std::uint64_t>(value));
  std::snprintf(text, sizeof text, whole ? "%.0f %s" : "%.1f %s", value, units[unit]);
  return text;
}

Status checkInputFile(const std::string& path, std::string_view what, Role role) {
  if (path.empty()) return {(what.empty() ? std::string("a file name") : std::string(what)) + " is empty; give a file"};
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return cannotRead(what, path, errno);
  if (!S_ISREG(st.st_mode)) return notRegular(what, path, st.st_mode);
  if (role == Role::kInput) registry().add(st, what, path);
  return {};
}

Checked<OpenedFile> openInputFile(const std::string& path, std::string_view what, Role role) {
  if (Status checked = checkInputFile(path, what, role); !checked.ok()) return {checked.error};
  // O_NONBLOCK: should the path have become a FIFO since the check, the open returns at once (and the fstat
  // below refuses it); O_NOCTTY: a terminal never becomes ours.
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (fd.get() < 0) return {cannotRead(what, path, errno).error};
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return {cannotRead(what, path, errno).error};
  if (!S_ISREG(st.st_mode)) return {notRegular(what, path, st.st_mode).error};
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0) return {cannotRead(what, path, errno).error};
  if (role == Role::kInput) registry().add(st, what, path);
  Checked<OpenedFile> opened;
  opened.value.fd = std::move(fd);
  opened.value.size = static_cast<std::uint64_t>(st.st_size);
  return opened;
}

Checked<std::string> readInputFile(const std::string& path, std::string_view what, Role role,
                                   std::uint64_t max_bytes) {
  Checked<OpenedFile> file = openInputFile(path, what, role);
  if (!file.ok()) return {file.error};
  if (file.value.size > max_bytes) return {tooLarge(what, path, max_bytes).error};
  Checked<std::string> text;
  text.value.reserve(static_cast<std::size_t>(file.value.size));
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = ::read(file.value.fd.get(), buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return {cannotRead(what, path, errno).error};
    if (n == 0) break;
    if (text.value.size() + static_cast<std::uint64_t>(n) > max_bytes) return {tooLarge(what, path, max_bytes).error};
    text.value.append(buffer, static_cast<std::size_t>(n));
  }
  return text;
}

std::optional<InputRecord> inputAt(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return registry().find(st);
}

}  // namespace taehv::files
