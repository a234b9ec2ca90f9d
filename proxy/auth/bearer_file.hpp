#pragma once
/** `auth.type: bearer_file`: a token another process keeps fresh in a file (a Kubernetes
    projected service-account token, a Vault agent sink). The file is checked before every
    attempt (one stat) and read again when it changed; a JWT's `exp` is honoured, so an
    expired token is never sent: the attempt fails until the file is renewed. */
#include "proxy/upstream/credential_source.hpp"
#include "proxy/auth/jwt.hpp"

#include <mutex>
#include <string>
#include <sys/types.h>

namespace rebound::auth {

using upstream::credential;
using steady_clock = std::chrono::steady_clock;

class bearer_file final : public upstream::credential_source {
 public:
  explicit bearer_file(std::string path) : path_(std::move(path)) {}
  net::awaitable<credential> authorization(steady_clock::time_point deadline) override;

  /// The same, without the coroutine: what authorization() does, for tests and callers
  /// that are not coroutines. `now` is the wall clock JWT `exp` is compared with.
  credential current(wall_clock::time_point now);

 private:
  struct stamp {
    ino_t inode = 0;
    off_t size = -1;
    long long mtime_ns = 0;
    bool operator==(const stamp&) const = default;
  };
  std::string path_;
  std::mutex mutex_;
  stamp stamp_;
  std::string token_;
  std::optional<wall_clock::time_point> expires_;
};

}  // namespace rebound::auth
