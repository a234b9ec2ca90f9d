#include "proxy/auth/secret_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace rebound::auth {

secret_read read_secret_file(const std::string& path) {
  constexpr std::size_t max_size = 64 * 1024;
  int const fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return {std::nullopt, path + " cannot be read: " + std::strerror(errno)};
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return {std::nullopt, path + " is not a regular file"};
  }
  std::string text;
  char chunk[4096];
  for (;;) {
    auto const n = ::read(fd, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int const err = errno;
      ::close(fd);
      return {std::nullopt, path + " cannot be read: " + std::strerror(err)};
    }
    if (n == 0) break;
    text.append(chunk, static_cast<std::size_t>(n));
    if (text.size() > max_size) {
      ::close(fd);
      return {std::nullopt, path + " is larger than a secret may be (64 KiB)"};
    }
  }
  ::close(fd);
  auto const end = text.find_last_not_of(" \t\r\n");
  text.erase(end == std::string::npos ? 0 : end + 1);
  text.erase(0, text.find_first_not_of(" \t\r\n"));
  return {std::move(text), {}};
}

}  // namespace rebound::auth
