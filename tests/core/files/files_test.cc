// taehv::files, the one way in and the one way out, on real files: FIFOs (mkfifo), /dev/zero, /dev/full, folders,
// sparse files, chmod'ed and chown'ed files, the umask set in a child process, and inputs spelled another way.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "infra/fifo_guard.h"
#include "taehv/files/input_file.h"
#include "taehv/files/output_file.h"

namespace taehv::files {
namespace {

namespace fs = std::filesystem;
using test::FifoGuard;

class TempFolder {
 public:
  TempFolder() {
    std::string pattern = (fs::temp_directory_path() / "taehv-files-test.XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempFolder() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void writeText(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

std::string readText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

mode_t modeOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

/// The names in `folder`, so that a test sees a temporary left behind.
std::vector<std::string> namesIn(const std::string& folder) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(folder)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(HostileFilesIn, AFifoIsRefusedByEveryReaderWithoutBeingOpened) {
  TempFolder dir;
  FifoGuard fifo(dir.file("config.yaml"), std::chrono::seconds(5));
  const Status checked = checkInputFile(fifo.path(), "--config", Role::kInput);
  const Checked<OpenedFile> opened = openInputFile(fifo.path(), "--config", Role::kInput);
  const Checked<std::string> read = readInputFile(fifo.path(), "--config", Role::kInput);
  for (const std::string& error : {checked.error, opened.error, read.error}) {
    EXPECT_NE(error.find("--config " + fifo.path() + ": a FIFO (named pipe), not a regular file"), std::string::npos)
        << error;
    EXPECT_NE(error.find("give the path of a regular file"), std::string::npos) << error;
  }
  EXPECT_FALSE(fifo.fired()) << "a reader opened the FIFO";
}

TEST(HostileFilesIn, DevZeroAFolderAndAMissingFileAreOneLineEach) {
  TempFolder dir;
  EXPECT_EQ(readInputFile("/dev/zero", "--hostfile", Role::kInput).error,
            "--hostfile /dev/zero: a character device, not a regular file; give the path of a regular file");
  EXPECT_EQ(readInputFile(dir.path(), "--job-token-file", Role::kInput).error,
            "--job-token-file " + dir.path() + ": a folder, not a regular file; give the path of a regular file");
  EXPECT_EQ(readInputFile(dir.file("nope"), "--config", Role::kInput).error,
            "--config " + dir.file("nope") + ": cannot read it (No such file or directory); check the path");
}

TEST(HostileFilesIn, AFileLargerThanTheBoundIsRefusedWithoutReadingIt) {
  TempFolder dir;
  const std::string big = dir.file("big.yaml");
  writeText(big, "");
  fs::resize_file(big, (4u << 20) + 1);  // sparse: nothing on disk
  const Checked<std::string> read = readInputFile(big, "--config", Role::kInput, 4u << 20);
  EXPECT_EQ(read.error, "--config " + big + ": larger than 4 MiB, the most taken for it; give the right file");
  fs::resize_file(big, 4u << 20);
  const Checked<std::string> exact = readInputFile(big, "--config", Role::kInput, 4u << 20);
  ASSERT_TRUE(exact.ok()) << exact.error;
  EXPECT_EQ(exact.value.size(), 4u << 20);
}

TEST(HostileFilesIn, AProcFileThatSaysItIsEmptyIsBoundedWhileRead) {
  // /proc files report size 0 but have content: the bound is counted while reading.
  const Checked<std::string> read = readInputFile("/proc/self/maps", "maps", Role::kOther, 16);
  EXPECT_EQ(read.error, "maps /proc/self/maps: larger than 16 bytes, the most taken for it; give the right file");
}

TEST(HostileFilesOut, ANewFileGetsTheUmasksModeAsAnyProgramsWould) {
  TempFolder dir;
  for (const mode_t umask : {mode_t{077}, mode_t{027}, mode_t{022}}) {
    const std::string path = dir.file("new-" + std::to_string(umask));
    const pid_t child = ::fork();  // the umask is the process's: set it in a child
    if (child == 0) {
      ::umask(umask);
      _exit(writeFileAtomically(path, std::string_view("data")).ok() ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    EXPECT_EQ(modeOf(path), 0666 & ~umask) << "umask " << std::oct << umask;
  }
}

TEST(HostileFilesOut, AReplacedFileKeepsItsModeAndAsRootItsOwner) {
  TempFolder dir;
  const std::string secret = dir.file("secret.safetensors");
  writeText(secret, "old");
  ASSERT_EQ(::chmod(secret.c_str(), 0600), 0);
  const bool root = ::geteuid() == 0;
  if (root) {
    ASSERT_EQ(::chown(secret.c_str(), 4242, 4343), 0);
  }
  ASSERT_TRUE(writeFileAtomically(secret, std::string_view("new")).ok());
  EXPECT_EQ(readText(secret), "new");
  EXPECT_EQ(modeOf(secret), 0600u);
  if (root) {
    struct stat st {};
    ASSERT_EQ(::stat(secret.c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 4242u);
    EXPECT_EQ(st.st_gid, 4343u);
  }
  // Through a symbolic link: the link stays, its target keeps its mode.
  ASSERT_EQ(::chmod(secret.c_str(), 0640), 0);
  fs::create_symlink(secret, dir.file("link"));
  ASSERT_TRUE(writeFileAtomically(dir.file("link"), std::string_view("newer")).ok());
  EXPECT_TRUE(fs::is_symlink(dir.file("link")));
  EXPECT_EQ(readText(secret), "newer");
  EXPECT_EQ(modeOf(secret), 0640u);
}

TEST(HostileFilesOut, AnInputOfTheCommandIsRefusedUnderEverySpelling) {
  TempFolder dir;
  const std::string weights = dir.file("w.safetensors");
  writeText(weights, "weights");
  fs::create_directory(dir.file("sub"));
  fs::create_symlink(weights, dir.file("alias.safetensors"));
  fs::create_hard_link(weights, dir.file("hard.safetensors"));
  ASSERT_TRUE(readInputFile(weights, "--weights", Role::kInput).ok());
  for (const std::string& spelling : {weights, dir.file("sub/../w.safetensors"), dir.file("alias.safetensors"),
                                      dir.file("hard.safetensors")}) {
    const Status written = writeFileAtomically(spelling, std::string_view("latents"));
    EXPECT_EQ(written.error, "cannot write '" + spelling + "': it is the file this command reads as --weights " +
                                 weights + "; writing it would replace that input: give another output path");
    EXPECT_EQ(checkOutputFile(spelling).error, written.error);
    EXPECT_FALSE(openForAppend(spelling).ok());
  }
  EXPECT_EQ(readText(weights), "weights");
  // A file read as the program's own (Role::kOther) may be rewritten: metrics.jsonl on resume.
  const std::string metrics = dir.file("metrics.jsonl");
  writeText(metrics, "{}\n");
  ASSERT_TRUE(readInputFile(metrics, "metrics file", Role::kOther).ok());
  EXPECT_TRUE(writeFileAtomically(metrics, std::string_view("")).ok());
}

TEST(HostileFilesOut, DevicesFoldersAFifoAndMissingFoldersAreRefusedBeforeAnyWrite) {
  TempFolder dir;
  FifoGuard fifo(dir.file("trace.json"), std::chrono::seconds(5));
  EXPECT_EQ(checkOutputFile("/dev/full").error,
            "cannot write '/dev/full': it is a character device; outputs are written to a temporary file and renamed "
            "into place, which would replace it: give the path of a regular file (or of one to create)");
  EXPECT_NE(checkOutputFile(dir.path()).error.find("it is a folder"), std::string::npos);
  EXPECT_NE(checkOutputFile(fifo.path()).error.find("it is a FIFO (named pipe)"), std::string::npos);
  EXPECT_NE(openForAppend(fifo.path()).error.find("it is a FIFO (named pipe)"), std::string::npos);
  EXPECT_EQ(checkOutputFile(dir.file("missing/trace.json")).error,
            "cannot write '" + dir.file("missing/trace.json") + "': its folder " + dir.file("missing") +
                ": No such file or directory; create the folder first");
  EXPECT_FALSE(writeFileAtomically(dir.file("missing/trace.json"), std::string_view("{}")).ok());
  EXPECT_FALSE(writeFileAtomically("/dev/full", std::string_view("{}")).ok());
  EXPECT_TRUE(fs::is_character_file("/dev/full"));
  EXPECT_FALSE(fifo.fired());
}

TEST(HostileFilesOut, AFailedWriteReplacesNothingAndLeavesNoTemporary) {
  TempFolder dir;
  const std::string out = dir.file("out.mp4");
  writeText(out, "the user's video");
  const Status failed = writeFileAtomically(out, [](int) {
    errno = ENOSPC;
    return false;
  });
  EXPECT_NE(failed.error.find("cannot write '" + out + "': No space left on device"), std::string::npos);
  EXPECT_NE(failed.error.find("nothing was replaced"), std::string::npos);
  EXPECT_EQ(readText(out), "the user's video");
  EXPECT_EQ(namesIn(dir.path()), std::vector<std::string>{"out.mp4"});
  EXPECT_THROW(writeFileAtomically(out, [](int) -> bool { throw std::runtime_error("encoder"); }),
               std::runtime_error);
  EXPECT_EQ(namesIn(dir.path()), std::vector<std::string>{"out.mp4"});
}

TEST(HostileFilesOut, AppendingCreatesWithTheUmaskAndKeepsWhatIsThere) {
  TempFolder dir;
  const std::string log = dir.file("metrics.jsonl");
  writeText(log, "a\n");
  {
    Checked<FileDescriptor> fd = openForAppend(log);
    ASSERT_TRUE(fd.ok()) << fd.error;
    ASSERT_TRUE(writeAllBytes(fd.value.get(), "b\n", 2));
  }
  EXPECT_EQ(readText(log), "a\nb\n");
  const pid_t child = ::fork();
  if (child == 0) {
    ::umask(077);
    _exit(openForAppend(dir.file("new.log")).ok() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(modeOf(dir.file("new.log")), 0600u);
}

TEST(HostileFilesOut, TemporariesAreRecognisedByTheirName) {
  EXPECT_TRUE(isAtomicWriteTemporary("weights.safetensors.tmp.Ab3x9Z"));
  EXPECT_FALSE(isAtomicWriteTemporary("weights.safetensors.tmp.Ab3x9"));
  EXPECT_FALSE(isAtomicWriteTemporary(".tmp.Ab3x9Z"));
  EXPECT_FALSE(isAtomicWriteTemporary("weights.tmp.Ab3x9!"));
}

}  // namespace
}  // namespace taehv::files
