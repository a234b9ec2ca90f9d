#pragma once
/** Request framing checks beyond Beast's parser (RFC 9112 section 6): the cases where two
    hops could disagree about where a request ends, which is how requests are smuggled.

    Beast already rejects Content-Length with a chunked Transfer-Encoding that came first,
    bad and differing Content-Lengths, and a repeated chunked coding. It does not reject a
    Transfer-Encoding that does not end in chunked, or one that precedes a Content-Length
    without naming chunked; this check does. */
#include "proxy/http/wire/head_fields.hpp"

#include <boost/beast/http/fields.hpp>

#include <optional>
#include <string>

namespace rebound::http {

struct framing_problem {
  unsigned status;  ///< 400, or 501 for a transfer coding rebound does not implement
  std::string message;
};

std::optional<framing_problem> check_request_framing(const head_fields& f, unsigned version);

}  // namespace rebound::http
