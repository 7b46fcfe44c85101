#include "core/files.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/check.h"

namespace aah {

namespace {

std::string parent_dir(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Owns a file descriptor; closes it on scope exit.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// "a FIFO", "a character device", ... for a mode that is not a regular file.
const char* kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO (named pipe)";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

// " (a link to /dev/zero)" when `path` is a symbolic link, else "".
std::string via_link(const std::string& path) {
  std::vector<char> buf(4096);
  const ssize_t n = ::readlink(path.c_str(), buf.data(), buf.size() - 1);
  return n > 0 ? str_cat(" (a link to ", std::string(buf.data(), size_t(n)), ")") : "";
}

// Opens `path` for reading only if it is a regular file: a FIFO, device or socket is refused at once (opened
// without blocking, then checked), never waited on or read from. Errors read "TAG PATH: ...".
int open_regular(const std::string& path, const char* tag) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) fail(tag, " ", path, ": cannot open: ", std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail(tag, " ", path, ": cannot stat: ", std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(tag, " ", path, ": is ", kind_of(st.st_mode), via_link(path), ", not a regular file");
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

}  // namespace

void check_output_path(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return;  // absent (or a dangling link): a new file
  if (!S_ISREG(st.st_mode))
    fail("[file] ", path, ": is ", kind_of(st.st_mode), via_link(path), "; aah writes only regular files");
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  write_file_atomic_parts(path, {{bytes.data(), bytes.size()}});
}

void write_file_atomic_parts(const std::string& path, const std::vector<ByteSpan>& parts) {
  check_output_path(path);  // the rename would replace a device, FIFO or socket with a regular file
  std::string tmp = str_cat(path, ".tmp.", ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("[file] ", path, ": cannot create temporary file ", tmp, ": ", std::strerror(errno));

  // On any failure: close, remove the temp file, and leave any previous `path` untouched.
  auto abandon = [&](const char* what, int err) {
    ::close(fd);
    ::unlink(tmp.c_str());
    const char* hint = (err == ENOSPC || err == EDQUOT) ? " (the disk may be full)"
                       : err == EFBIG                  ? " (a file-size limit: ulimit -f)"
                                                       : "";
    fail("[file] ", path, ": ", what, ": ", std::strerror(err), hint);
  };

  for (const ByteSpan& part : parts) {
    const char* p = static_cast<const char*>(part.data);
    size_t left = part.size;
    while (left > 0) {
      ssize_t n = ::write(fd, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) abandon("write failed", errno);
      if (n == 0) abandon("write failed", ENOSPC);  // write() made no progress
      p += n;
      left -= size_t(n);
    }
  }
  if (::fsync(fd) != 0) abandon("fsync failed", errno);
  if (::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    fail("[file] ", path, ": close failed: ", std::strerror(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    fail("[file] ", path, ": cannot rename ", tmp, " over it: ", std::strerror(err));
  }
  fsync_dir(parent_dir(path));
}

std::string read_file(const std::string& path, size_t max_bytes) {
  Fd f;
  f.fd = open_regular(path, "[file]");
  struct stat st;
  if (::fstat(f.fd, &st) != 0) fail("[file] ", path, ": cannot stat: ", std::strerror(errno));
  if (uint64_t(st.st_size) > max_bytes)
    fail("[file] ", path, ": is ", st.st_size, " bytes, more than the limit of ", max_bytes);

  // Read to EOF rather than trusting st_size (files that change while being read).
  std::string out;
  out.reserve(size_t(st.st_size));
  std::vector<char> buf(1 << 16);
  for (;;) {
    ssize_t n = ::read(f.fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("[file] ", path, ": read failed: ", std::strerror(errno));
    if (n == 0) break;
    out.append(buf.data(), size_t(n));
    if (out.size() > max_bytes) fail("[file] ", path, ": is more than the limit of ", max_bytes, " bytes");
  }
  return out;
}

nlohmann::json read_json_file(const std::string& path) { return parse_json(read_file(path), path); }

nlohmann::json parse_json(const std::string& text, const std::string& name, const char* tag, const char* context) {
  const std::string where = str_cat(tag, " ", name, ": ", context, *context ? " " : "");
  // Nesting depth first, counting brackets outside strings: cheap, and it keeps hostile input from recursing.
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); i++) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') i++;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) fail(where, "nested deeper than ", kMaxJsonDepth, " levels at byte ", i + 1);
    } else if (c == ']' || c == '}') {
      depth--;
    }
  }
  // e.what() is "[json.exception.parse_error.101] parse error at line 1, column 2: <detail>"; keep the detail.
  auto detail = [](const std::string& what) {
    size_t at = what.find("] ");
    return at == std::string::npos ? what : what.substr(at + 2);
  };
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte counts from 1 (the offending character).
    std::string d = detail(e.what());
    size_t at = d.find(": ");
    fail(where, "parse error at byte ", e.byte, ": ", at == std::string::npos ? d : d.substr(at + 2));
  } catch (const nlohmann::json::exception& e) {  // e.g. out_of_range 406: a number like 1e400 overflows a double
    fail(where, detail(e.what()));
  }
}

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool path_exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

bool dir_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void make_dirs(const std::string& path) {
  if (path.empty()) return;
  // Create each prefix ending before a '/', then the path itself.
  for (size_t i = 1; i <= path.size(); i++) {
    if (i < path.size() && path[i] != '/') continue;
    std::string prefix = path.substr(0, i);
    if (::mkdir(prefix.c_str(), 0755) == 0) continue;
    int err = errno;
    if (err == EEXIST && dir_exists(prefix)) continue;
    if (err == EEXIST) fail("[file] ", path, ": cannot create directory: ", prefix, " exists and is not a directory");
    fail("[file] ", path, ": cannot create directory ", prefix, ": ", std::strerror(err));
  }
}

void fsync_dir(const std::string& dir) {
  Fd f;
  f.fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (f.fd < 0) fail("[file] ", dir, ": cannot open directory: ", std::strerror(errno));
  // Some file systems cannot fsync a directory (EINVAL); the rename is then as durable as they allow.
  if (::fsync(f.fd) != 0 && errno != EINVAL)
    fail("[file] ", dir, ": fsync of directory failed: ", std::strerror(errno));
}

void remove_tree(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) fail("[file] ", path, ": cannot remove: ", ec.message());
}

void rename_to_new(const std::string& from, const std::string& to) {
  if (path_exists(to)) fail("[file] ", to, ": exists: ", from, " is not renamed over it");
  if (::rename(from.c_str(), to.c_str()) != 0) fail("[file] ", from, ": cannot rename to ", to, ": ", std::strerror(errno));
  fsync_dir(parent_dir(to));
}

std::string read_link(const std::string& path) {
  std::vector<char> buf(4096);
  ssize_t n = ::readlink(path.c_str(), buf.data(), buf.size());
  if (n < 0 && (errno == ENOENT || errno == EINVAL)) return "";  // absent, or not a link
  if (n < 0) fail("[file] ", path, ": cannot read link: ", std::strerror(errno));
  if (size_t(n) == buf.size()) fail("[file] ", path, ": link target is too long");
  return std::string(buf.data(), size_t(n));
}

void symlink_atomic(const std::string& target, const std::string& path) {
  std::string tmp = str_cat(path, ".tmp.", ::getpid());
  ::unlink(tmp.c_str());  // a leftover of a killed process with our pid
  if (::symlink(target.c_str(), tmp.c_str()) != 0)
    fail("[file] ", path, ": cannot create link ", tmp, " -> ", target, ": ", std::strerror(errno));
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    fail("[file] ", path, ": cannot rename link ", tmp, " over it: ", std::strerror(err));
  }
  fsync_dir(parent_dir(path));
}

std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    names.push_back(it->path().filename().string());
  if (ec) fail("[file] ", dir, ": cannot list directory: ", ec.message());
  std::sort(names.begin(), names.end());
  return names;
}

DirKind dir_kind(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return DirKind::missing;
  if (!S_ISDIR(st.st_mode)) return DirKind::not_dir;
  auto has = [&](const char* name) {
    struct stat f;
    return ::lstat((path + "/" + name).c_str(), &f) == 0;
  };
  if (has("suite.json")) return DirKind::suite;
  if (has("train.bin") || has("val.bin") || has("meta.json")) return DirKind::corpus;
  // config.json with model.safetensors alone is a Hugging Face model directory (other), not an aah run.
  if (has("config.json") && (has("metrics.jsonl") || has("checkpoint"))) return DirKind::run;
  // Empty but for aah's own lock files (a run's .lock, a suite's .suite.lock: one that is starting, or left by a
  // refused start).
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(path, ec))
    if (e.path().filename() != ".lock" && e.path().filename() != ".suite.lock") return DirKind::other;
  return ec ? DirKind::other : DirKind::empty;
}

const char* dir_kind_name(DirKind k) {
  switch (k) {
    case DirKind::missing: return "missing";
    case DirKind::not_dir: return "a file, not a directory";
    case DirKind::empty: return "an empty directory";
    case DirKind::suite: return "a suite directory (suite.json)";
    case DirKind::corpus: return "a corpus directory (train.bin, val.bin, meta.json)";
    case DirKind::run: return "a run directory (config.json, metrics.jsonl, checkpoint)";
    case DirKind::other: return "a directory of other files";
  }
  return "?";
}

void dir_check_kind(const std::string& path, DirKind want, const char* tag, const char* flag, bool force,
                    const std::vector<std::string>& writes) {
  if (path.empty()) fail(tag, " ", flag, " is empty: name the directory to write");
  std::error_code ec;
  const std::filesystem::path abs = std::filesystem::absolute(path, ec).lexically_normal();
  for (std::filesystem::path up = abs.parent_path(); !ec && !up.empty(); up = up.parent_path()) {
    if (dir_kind(up.string()) == DirKind::run)
      fail(tag, " ", flag, " ", path, " lies inside the run directory ", up.string(), ", whose --resume removes what ",
           "the run did not write: choose a directory outside it");
    if (up == up.parent_path()) break;
  }
  const DirKind k = dir_kind(path);
  if (k == DirKind::missing || k == DirKind::empty || k == want) return;
  if (k != DirKind::other)
    fail(tag, " ", flag, " ", path, " is ", dir_kind_name(k), "; it cannot become ", dir_kind_name(want),
         ": choose another ", flag);
  if (!force)
    fail(tag, " ", flag, " ", path, " is ", dir_kind_name(k), " that aah did not make: choose a new or empty ",
         "directory, or --force to write beside those files (never over them)");
  for (const std::string& name : writes) {
    struct stat st;
    if (::lstat((path + "/" + name).c_str(), &st) == 0)
      fail(tag, " ", flag, " ", path, " holds ", name, ", which aah did not write and would replace: move it, or ",
           "choose another ", flag);
  }
}

int lock_file_exclusive(const std::string& path, const char* tag, const std::string& busy) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) fail(tag, " ", path, ": cannot open: ", std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK) fail(tag, " ", busy);
    fail(tag, " ", path, ": cannot lock: ", std::strerror(err));
  }
  return fd;
}

ByteSource ByteSource::file(const std::string& path, const char* tag) {
  ByteSource s;
  s.name_ = path;
  s.tag_ = tag;
  s.fd_ = open_regular(path, tag);
  struct stat st;
  if (::fstat(s.fd_, &st) != 0) fail(tag, " ", path, ": cannot stat: ", std::strerror(errno));
  s.size_ = uint64_t(st.st_size);
  return s;
}

ByteSource ByteSource::memory(std::string bytes, const std::string& name, const char* tag) {
  ByteSource s;
  s.name_ = name;
  s.tag_ = tag;
  s.bytes_ = std::move(bytes);
  s.size_ = s.bytes_.size();
  return s;
}

ByteSource::ByteSource(ByteSource&& o) noexcept
    : name_(std::move(o.name_)), tag_(o.tag_), fd_(o.fd_), bytes_(std::move(o.bytes_)), size_(o.size_) {
  o.fd_ = -1;
}

ByteSource::~ByteSource() {
  if (fd_ >= 0) ::close(fd_);
}

void ByteSource::read(void* dst, size_t n, uint64_t offset) const {
  if (offset > size_ || n > size_ - offset)
    fail(tag_, " ", name_, ": reading ", n, " bytes at byte ", offset, " goes past the end (", size_, " bytes)");
  if (fd_ >= 0)
    pread_exact(fd_, dst, n, offset, name_, tag_);
  else if (n > 0)
    std::memcpy(dst, bytes_.data() + offset, n);
}

void pread_exact(int fd, void* dst, size_t n, uint64_t offset, const std::string& path, const char* tag) {
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    ssize_t got = ::pread(fd, p, n, off_t(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail(tag, " ", path, ": read failed at byte ", offset, ": ", std::strerror(errno));
    if (got == 0) fail(tag, " ", path, ": file ends at byte ", offset, ", ", n, " bytes short (changed while read?)");
    p += got;
    n -= size_t(got);
    offset += uint64_t(got);
  }
}

}  // namespace aah
