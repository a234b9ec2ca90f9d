#pragma once
/** Request framing checks beyond Beast's parser (RFC 9112 section 6): the cases where two
    hops could disagree about where a request ends, which is how requests are smuggled.

    Beast already rejects Content-Length with a chunked Transfer-Encoding that came first,
    bad and differing Content-Lengths, and a repeated chunked coding. It does not reject a
    Transfer-Encoding that does not end in chunked, or one that precedes a Content-Length
    without naming chunked; this check does. */
#include "proxy/wire/head_fields.hpp"

#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/fields.hpp>

#include <optional>
#include <string>

namespace rebound::http {

struct framing_problem {
  unsigned status;  ///< 400, or 501 for a transfer coding rebound does not implement
  std::string message;
};

std::optional<framing_problem> check_request_framing(const head_fields& f, unsigned version);

/** The framing of a request rebuilt around a body held whole (a delivered task, the inbound
    gate's call to the app): Content-Length when there is a body or the method anticipates
    one (POST, PUT, PATCH; RFC 9110 section 8.6), no framing field otherwise. */
void frame_whole_body(request_message<boost::beast::http::buffer_body>& req, std::size_t size);

}  // namespace rebound::http
