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
std::string read_file(const std::string& path, size_t max_bytes = size_t(1) << 30);
// Parses a JSON file; errors say "[json] FILE: <what and where>".
nlohmann::json read_json_file(const std::string& path);
bool file_exists(const std::string& path);
bool dir_exists(const std::string& path);
void make_dirs(const std::string& path);  // mkdir -p
void fsync_dir(const std::string& dir);
// Removes a file, link or directory tree (no error if it is absent); errors name the path.
void remove_tree(const std::string& path);
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

}  // namespace aah
