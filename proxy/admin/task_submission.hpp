#pragma once
/** What POST /retry-tasks asks for, read and checked before anything is stored: the JSON body
    (seed 001's task) against the same limits the proxy port keeps on a request. Kept apart
    from the API's coroutine so that it is a pure function of the text, which the task-JSON
    fuzz target drives (fuzz/fuzz_task_json.cpp). */
#include "proxy/plan/request_target.hpp"

#include <boost/beast/http/status.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace rebound::admin {

struct task_submission {
  std::string method = "POST";
  std::string url;              ///< the absolute http:// URL as given
  plan::request_target target;  ///< `url` parsed as the proxy port would
  /// The caller's fields as given (valid names and values), none dropped yet: the route's
  /// idempotency header and the framing fields are dropped once the route is known.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::optional<std::string> policy_id;
  std::optional<std::string> idempotency_key;  ///< checked (idempotency::key_problem)
};

/// Why a submission is refused: the status and SPEC 6's error type and message.
struct submission_error {
  boost::beast::http::status status = boost::beast::http::status::bad_request;
  std::string type = "bad_request";
  std::string message;
};

/** Reads `text`, a body at most `max_body` (async.max_body) in its `body` field, with headers
    that fit `max_head` (limits.max_request_head) and one field each. */
std::variant<task_submission, submission_error> read_task_submission(std::string_view text, std::uint64_t max_body,
                                                                     std::size_t max_head);

/// The field names a submitted task may not set: framing and hop-by-hop fields, which rebound writes.
bool reserved_field(std::string_view name);

}  // namespace rebound::admin
