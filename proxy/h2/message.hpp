#pragma once
/** An HTTP/2 message as rebound's gRPC path handles it: a head, a body held whole, and
    trailers. Unary gRPC calls are small and must be held whole anyway: R-4 classifies a call
    by the `grpc-status` of its trailers, which come after the body, and a retry sends the
    request again. */
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace rebound::h2 {

class answer_budget;
class budget_share;

/// One header field; names are lower-case, as HTTP/2 requires (RFC 9113 section 8.2.1).
struct field {
  std::string name;
  std::string value;
};
using fields = std::vector<field>;

struct message {
  fields head;  ///< pseudo-header fields first (:method :scheme :authority :path, or :status)
  std::string body;
  fields trailers;  ///< empty: none (a trailers-only gRPC answer carries grpc-status in `head`)
  /// A request served whole: what its connection may hold of answers (answer_budget.hpp); the
  /// upstream exchange holds the answer against it.
  std::shared_ptr<answer_budget> budget;
  /// An answer held against a budget: its bytes, given back when the last copy is let go.
  std::shared_ptr<const budget_share> share;

  /// The value of the first field named `name` in `head`, or null.
  const std::string* find(std::string_view name) const { return find_in(head, name); }
  /// The same in `trailers`.
  const std::string* find_trailer(std::string_view name) const { return find_in(trailers, name); }

  static const std::string* find_in(const fields& fs, std::string_view name) {
    for (auto const& f : fs)
      if (f.name == name) return &f.value;
    return nullptr;
  }
};

/** Why a server connection answered a stream itself, before any handler saw it: its request
    broke one of the connection's limits (server_limits). */
enum class stream_refusal {
  too_slow,        ///< 408: the body did not arrive within body_timeout and min_body_rate
  head_too_large,  ///< 431: more than max_header_list of fields
  body_too_large,  ///< 413: more than max_request_body
};

}  // namespace rebound::h2
