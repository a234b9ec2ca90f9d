#pragma once
/** The retry loop (SPEC 4.2): the one coroutine that runs attempts and asks the pure
    decisions of this folder whether and when to run another. */
#include "config/config.hpp"
#include "proxy/observe/log.hpp"
#include "proxy/retry/loop_hooks.hpp"
#include "proxy/upstream/attempt.hpp"

#include <boost/asio/cancellation_signal.hpp>

#include <memory>
#include <random>

namespace rebound::retry {

/// What the loop needs to know about the request, beyond its policy.
struct request_facts {
  bool may_retry = false;    ///< R-6 allows it and the body is buffered
  std::string_view why_not;  ///< for the log, when !may_retry
  std::string_view dependency;
  std::string_view method;
  std::string_view path;  ///< without the query (R-9)
  std::string_view correlation_id;
  std::string_view idempotency_key;
  /// The `exp` of the request's own bearer JWT: no retry is sent once it has passed.
  std::optional<std::chrono::system_clock::time_point> credential_expires;
};

/// What the loop shares with the session and the dependency. Null members are not used.
struct loop_hooks {
  const bool* draining = nullptr;        ///< a drain sends no further retry
  net::cancellation_slot drain;          ///< a drain emits here, ending a pending backoff wait
  tcp::socket* client = nullptr;         ///< watched during a backoff: a client that hangs up cancels the loop
  dependency_gate* gate = nullptr;       ///< budget and breaker (R-7)
  attempt_observer* observer = nullptr;  ///< metrics
};

struct loop_result {
  unsigned attempts = 0;
  std::unique_ptr<upstream::exchange> response;      ///< the last response head, to be streamed to the client
  std::optional<upstream::attempt_failure> failure;  ///< set when no response is left to return
  bool client_gone = false;                          ///< the client hung up during a backoff: nobody to answer
};

/** Runs attempts until one is final, retries are exhausted, or time is up; returns the last
    response head, or why there is none. */
net::awaitable<loop_result> run_retry_loop(const config::policy& policy, const request_facts& facts,
                                           upstream::pool& pool, upstream::destination to,
                                           upstream::bhttp::request<upstream::bhttp::buffer_body>& req,
                                           std::string_view body, bool is_head, std::mt19937_64& rng,
                                           const observe::logger& log, loop_hooks hooks);

}  // namespace rebound::retry
