#include "core/process.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>

#include "core/check.h"

extern char** environ;

namespace aah {

namespace {

volatile pid_t g_child = 0;  // the child that forward_signal passes signals on to (0: none)
void forward_signal(int sig) {
  if (g_child > 0) ::kill(g_child, sig);
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

}  // namespace

int process_run(const std::vector<std::string>& argv, const ProcessOptions& opt) {
  AAH_CHECK(!argv.empty());
  const bool lines = bool(opt.on_stderr_line);
  int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
  if ((opt.output && ::pipe2(out_pipe, O_CLOEXEC) != 0) || (lines && ::pipe2(err_pipe, O_CLOEXEC) != 0))
    fail("[process] pipe failed: ", std::strerror(errno));
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  if (opt.output) posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 1);
  if (lines)
    posix_spawn_file_actions_adddup2(&fa, err_pipe[1], 2);
  else if (opt.output)
    posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 2);
  if (!opt.cwd.empty()) posix_spawn_file_actions_addchdir_np(&fa, opt.cwd.c_str());
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::fflush(nullptr);  // what we printed so far comes before what the child prints
  pid_t pid = -1;
  const int err = posix_spawnp(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close_fd(out_pipe[1]);
  close_fd(err_pipe[1]);
  if (opt.output) opt.output->clear();
  if (err != 0) {
    close_fd(out_pipe[0]);
    close_fd(err_pipe[0]);
    const std::string why = str_cat("cannot run ", argv[0], ": ", std::strerror(err));
    if (lines)
      opt.on_stderr_line(why);
    else if (opt.output)
      *opt.output = why;
    else
      std::fprintf(stderr, "%s\n", why.c_str());
    return 127;
  }
  void (*old_int)(int) = nullptr, (*old_term)(int) = nullptr;
  if (opt.forward_signals) {
    g_child = pid;
    old_int = std::signal(SIGINT, forward_signal);
    old_term = std::signal(SIGTERM, forward_signal);
  }

  // Read both pipes until the child closes them: stdout into *output, stderr split into lines.
  std::vector<pollfd> fds;
  if (opt.output) fds.push_back({out_pipe[0], POLLIN, 0});
  if (lines) fds.push_back({err_pipe[0], POLLIN, 0});
  std::string err_buf;
  char buf[8192];
  for (size_t open_fds = fds.size(); open_fds > 0;) {
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (auto& p : fds) {
      if (p.fd < 0 || !(p.revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t n = ::read(p.fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        close_fd(p.fd);
        open_fds--;
        continue;
      }
      if (p.fd == out_pipe[0]) {
        opt.output->append(buf, size_t(n));
        continue;
      }
      err_buf.append(buf, size_t(n));
      for (size_t nl; (nl = err_buf.find('\n')) != std::string::npos;) {
        opt.on_stderr_line(err_buf.substr(0, nl));
        err_buf.erase(0, nl + 1);
      }
    }
  }
  for (auto& p : fds) close_fd(p.fd);
  if (!err_buf.empty()) opt.on_stderr_line(err_buf);

  int status = 0, rc = 127;
  pid_t waited;
  while ((waited = ::waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
  }
  if (waited == pid && WIFEXITED(status)) rc = WEXITSTATUS(status);
  if (waited == pid && WIFSIGNALED(status)) rc = 128 + WTERMSIG(status);
  if (opt.forward_signals) {
    g_child = 0;
    std::signal(SIGINT, old_int);
    std::signal(SIGTERM, old_term);
  }
  return rc;
}

}  // namespace aah
