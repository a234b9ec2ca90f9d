#pragma once
/** HTTP/1.1's attempts: the attempt runner over upstream::run_attempt, and the retry loop
    (retry/loop.hpp) run over it, hedged or not. What comes back is the last response head,
    to be streamed to the client, or why there is none. */
#include "proxy/wire/head_fields.hpp"
#include "proxy/net.hpp"
#include "proxy/retry/loop.hpp"
#include "proxy/upstream/attempt.hpp"

#include <memory>
#include <optional>
#include <string_view>

namespace rebound::retry {
struct hedge_plan;
}

namespace rebound::http {

/// An HTTP/1.1 request whose body is at hand (none, or kept for a resend): what each attempt sends.
struct http1_request {
  upstream::pool& pool;
  upstream::destination to;
  request_message<upstream::bhttp::buffer_body>& req;
  std::string_view body;
  bool is_head = false;
};

struct loop_result {
  unsigned attempts = 0;
  std::unique_ptr<upstream::exchange> response;   ///< the last response head, to be streamed to the client
  std::optional<retry::attempt_failure> failure;  ///< set when no response is left to return
  bool client_gone = false;                       ///< the client hung up during a backoff: nobody to answer
  bool gave_up = false;  ///< retried and gave up: the answer says `Rebound-Retried: exhausted` (layers.hpp)
};

/** Runs attempts of `request` until one is final, retries are exhausted, or time is up;
    returns the last response head, or why there is none. With `ctx.facts.deadline` (the
    caller's X-Request-Timeout, the only source of one on HTTP/1.1), every attempt carries the
    time it has left in that header, so the next hop stops when this one stops waiting.
    `hedge`: how the request is hedged (retry/hedge.hpp); null or max 0: one copy at a time. */
net::awaitable<loop_result> run_retry_loop(const retry::step_context& ctx, const http1_request& request,
                                           retry::loop_hooks hooks, const retry::hedge_plan* hedge);

}  // namespace rebound::http
