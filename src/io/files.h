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
// Reads exactly n bytes at `offset` of fd (retrying short reads); errors read "TAG PATH: ..." and a read past
// the end says the file is shorter than expected.
void pread_exact(int fd, void* dst, size_t n, uint64_t offset, const std::string& path, const char* tag);

}  // namespace aah
