#pragma once
/** `auth.type: oauth2_client_credentials` (RFC 6749 section 4.4): rebound asks the token
    endpoint for an access token with the client id and the secret read from
    `client_secret_file`, caches it until `expires_in` minus the refresh skew, and adds it
    to every attempt.

    One refresh at a time per dependency, whatever the number of workers and requests: the
    first request that finds the token stale starts it on its own worker, every other one
    waits (up to its attempt's deadline) on a timer that the refresh cancels when it ends. */
#include "config/config.hpp"
#include "proxy/upstream/credential_source.hpp"
#include "proxy/auth/jwt.hpp"
#include "proxy/net.hpp"
#include "proxy/observe/log.hpp"

#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace rebound::upstream {
class tls_client;
}

namespace rebound::auth {

/// What a token endpoint answered, reduced to what rebound keeps.
struct token_answer {
  std::optional<std::string> access_token;
  std::chrono::seconds expires_in{0};
  std::string error;  ///< when !access_token; never holds the secret or a token
};

using steady_clock = std::chrono::steady_clock;
using upstream::credential;

/** When a token that lives `lifetime` and expires at `expires_at` must be replaced: at
    `refresh_skew` before its expiry, but no earlier than half its life, so a token shorter
    than the skew is still used for a while instead of being fetched for every attempt. */
constexpr steady_clock::time_point refresh_at(steady_clock::time_point expires_at, steady_clock::duration lifetime,
                                              steady_clock::duration refresh_skew) {
  return expires_at - std::min(refresh_skew, lifetime / 2);
}

/** Reads a token endpoint's answer (status and JSON body, RFC 6749 section 5.1/5.2).
    Without `expires_in`, the token's own JWT `exp` is used, else `fallback_lifetime`. */
token_answer read_token_answer(unsigned status, std::string_view body, wall_clock::time_point now,
                               std::chrono::seconds fallback_lifetime = std::chrono::seconds(300));

class oauth2_client final : public upstream::credential_source, public std::enable_shared_from_this<oauth2_client> {
 public:
  /// `tls`: for an https token_url (nullptr for http://).
  oauth2_client(config::auth_settings settings, std::string dependency, std::shared_ptr<upstream::tls_client> tls,
                const observe::logger* log);

  net::awaitable<credential> authorization(steady_clock::time_point deadline) override;

 private:
  struct waiter {
    net::executor executor;
    std::shared_ptr<net::steady_timer> timer;
  };

  static net::awaitable<void> refresh(std::shared_ptr<oauth2_client> self);
  net::awaitable<token_answer> fetch(steady_clock::time_point deadline);
  void finish(const token_answer& answer);

  config::auth_settings settings_;
  std::string dependency_;
  std::shared_ptr<upstream::tls_client> tls_;
  const observe::logger* log_;

  std::mutex mutex_;  // guards everything below; never held across a suspension
  std::string token_;
  bool have_token_ = false;
  steady_clock::time_point refresh_at_{};
  steady_clock::time_point expires_at_{};
  bool refreshing_ = false;
  std::uint64_t generation_ = 0;  ///< finished refreshes
  bool last_ok_ = true;
  std::string last_error_;
  std::vector<waiter> waiters_;
};

}  // namespace rebound::auth
