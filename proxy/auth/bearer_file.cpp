#include "proxy/auth/bearer_file.hpp"
#include "proxy/auth/secret_file.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace rebound::auth {

net::awaitable<credential> bearer_file::authorization(steady_clock::time_point) {
  co_return current(wall_clock::now());
}

credential bearer_file::current(wall_clock::time_point now) {
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0)
    return {std::nullopt, "cannot read the token file " + path_ + ": " + std::strerror(errno)};
  stamp const seen{st.st_ino, st.st_size,
                   static_cast<long long>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec};
  std::lock_guard lock(mutex_);
  if (!(seen == stamp_)) {
    auto read = read_secret_file(path_);
    if (!read.value) return {std::nullopt, "the token file " + read.error};
    stamp_ = seen;
    token_ = std::move(*read.value);
    expires_ = jwt_expiry(token_);
  }
  if (token_.empty()) return {std::nullopt, "the token file " + path_ + " is empty"};
  if (token_.find_first_of("\r\n") != std::string::npos)
    return {std::nullopt, "the token file " + path_ + " holds more than one line"};
  if (expires_ && *expires_ <= now)
    return {std::nullopt, "the token in " + path_ + " has expired (its exp has passed) and the file was not renewed"};
  return {"Bearer " + token_, {}};
}

}  // namespace rebound::auth
