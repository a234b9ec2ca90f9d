#pragma once
/** A message head as the bytes that go on the wire, written into one contiguous string, and
    the chunked framing of a body (RFC 9112 sections 3, 4, 5 and 7.1).

    Beast's serializer hands a head to the socket as a buffer sequence with a piece per field
    name, separator, value and line end, walked through nested `buffers_cat_view` iterators:
    profiled under load, that walk and the composed write operations around it were the
    largest user-space cost of a forwarded request. One string per head, written together
    with the first body bytes in a single gather write, costs one copy of a few hundred bytes
    instead. The parsed message stays Beast's; only the writing is done here. */
#include "proxy/wire/bounded_parser.hpp"
#include "proxy/wire/head_fields.hpp"

#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/message.hpp>

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

namespace rebound::http {

/// Appends the request line, the fields and the blank line of `h` to `out`.
void append_head(std::string& out, const request_head& h);

/// Appends an upstream response's head as rebound relays it: an HTTP/1.1 status line (the
/// reason phrase as received, else the standard one), its fields and the blank line.
void append_head(std::string& out, const response_parser& p);

/// The size line that opens a chunk of `n` bytes ("1a2b\r\n"), written into `buf`.
std::string_view chunk_size_line(std::array<char, 20>& buf, std::size_t n);

/// The end of a chunked body without trailers.
inline constexpr std::string_view last_chunk = "0\r\n\r\n";

/** The last chunk with the trailer fields that may travel on (RFC 9112 section 7.1.2).
    Fields that frame, route, authenticate or control the message are dropped: RFC 9110
    section 6.5.1 forbids them in trailers, and a next hop that merged them would trust
    them as headers. */
std::string last_chunk_with(const head_fields& trailers);

}  // namespace rebound::http
