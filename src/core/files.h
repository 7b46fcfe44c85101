// Small file helpers: atomic writes (temp file in the same directory, fsync, rename, fsync the directory) and
// whole-file reads with errors that name the file.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace aah {

void write_file_atomic(const std::string& path, const std::string& bytes);
// Same, for a file given as pieces written in order, so a large file needs no joined copy in memory.
struct ByteSpan {
  const void* data;
  size_t size;
};
void write_file_atomic_parts(const std::string& path, const std::vector<ByteSpan>& parts);
// Reads a whole regular file (at most max_bytes). A FIFO, device or socket is refused at once, never waited on; the
// error names what the path is (and the link it goes through).
std::string read_file(const std::string& path, size_t max_bytes = size_t(1) << 30);
// Refuses (aah::Error) an output path that exists and is not a regular file (a device, FIFO, socket or directory,
// directly or through a link): the atomic rename would replace it. Called by every write_file_atomic*.
void check_output_path(const std::string& path);
// Parses a JSON file; errors say "[json] FILE: <what and where>".
nlohmann::json read_json_file(const std::string& path);
// Same for text already in memory; `name` stands for the file in errors, which read "TAG NAME: CONTEXT what".
// Nesting deeper than kMaxJsonDepth is an error (it would overflow the stack of recursive code: dump(), copies).
constexpr int kMaxJsonDepth = 512;
nlohmann::json parse_json(const std::string& text, const std::string& name, const char* tag = "[json]",
                          const char* context = "");
bool file_exists(const std::string& path);  // a regular file (through links) is there
// Anything is at `path` (a file, a FIFO, a dangling link...). "Is it missing?" asks this, so that a file that is
// there but cannot be read is reported by its reader as unreadable, not as missing.
bool path_exists(const std::string& path);
bool dir_exists(const std::string& path);
void make_dirs(const std::string& path);  // mkdir -p
void fsync_dir(const std::string& dir);
// Removes a file, link or directory tree (no error if it is absent); errors name the path.
void remove_tree(const std::string& path);
// Renames `from` (a file or directory) to `to`, which must not exist (never replaced); fsyncs the directory.
void rename_to_new(const std::string& from, const std::string& to);
// The target of symlink `path`, or "" when `path` is not a symlink.
std::string read_link(const std::string& path);
// Points symlink `path` at `target`, atomically: a new link under a temporary name is renamed over `path` (which may
// be absent, a link or a file), then the directory is fsynced. Readers see the old target or the new one.
void symlink_atomic(const std::string& target, const std::string& path);
// Names in a directory, without "." and "..", sorted.
std::vector<std::string> list_dir(const std::string& dir);
// Reads exactly n bytes at `offset` of fd (retrying short reads); errors read "TAG PATH: ..." and a read past
// the end says the file is shorter than expected.
void pread_exact(int fd, void* dst, size_t n, uint64_t offset, const std::string& path, const char* tag);

// What a directory is to aah, from the files that mark each kind: a suite (suite.json), a corpus (train.bin,
// val.bin or meta.json), a run (config.json with metrics.jsonl or a checkpoint; a Hugging Face model directory is
// "other").
enum class DirKind { missing, not_dir, empty, suite, corpus, run, other };
DirKind dir_kind(const std::string& path);
const char* dir_kind_name(DirKind k);  // "a corpus directory (train.bin, val.bin)", ...
// Where aah may write a directory of kind `want` (suite, corpus or run), refused with an aah::Error "TAG FLAG PATH
// ..." otherwise: an empty path; a file; another kind of aah directory (a run never becomes a corpus, and so on); a
// directory inside a run directory (a run's --resume cleans what it did not write); a directory of other files
// unless `force`, and even then not when it holds one of the names in `writes` (aah never replaces a file it did not
// write). A missing or empty directory, or one of kind `want`, is fine.
void dir_check_kind(const std::string& path, DirKind want, const char* tag, const char* flag, bool force = false,
                    const std::vector<std::string>& writes = {});

// Opens (creating) `path` and takes an exclusive flock on it without waiting; returns the descriptor, which holds the
// lock until closed (the kernel drops it when the process dies). Held elsewhere: aah::Error "TAG `busy`".
int lock_file_exclusive(const std::string& path, const char* tag, const std::string& busy);

// The bytes of a file or of a buffer in memory, read by offset. Binary readers (safetensors, token shards) read
// through one, so the same validating code serves files and in-memory bytes (fuzzing, tests).
class ByteSource {
 public:
  // Opens a regular file; errors read "TAG PATH: cannot open: ...".
  static ByteSource file(const std::string& path, const char* tag);
  // Bytes in memory; `name` stands for the file in errors.
  static ByteSource memory(std::string bytes, const std::string& name, const char* tag);
  ByteSource(ByteSource&& o) noexcept;
  ByteSource& operator=(ByteSource&&) = delete;
  ByteSource(const ByteSource&) = delete;
  ~ByteSource();

  const std::string& name() const { return name_; }
  uint64_t size() const { return size_; }
  // Exactly n bytes at `offset`; a read past the end is an error naming the source.
  void read(void* dst, size_t n, uint64_t offset) const;

 private:
  ByteSource() = default;
  std::string name_;
  const char* tag_ = "";
  int fd_ = -1;
  std::string bytes_;
  uint64_t size_ = 0;
};

}  // namespace aah
