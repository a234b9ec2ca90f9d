#pragma once
/** Beast's HTTP parser with the limits Beast 1.81 leaves open, for every message rebound
    reads (client requests, upstream responses, the admin port, token answers).

    Why it exists: Beast stores each field in `basic_fields`, whose offsets are 16-bit; a
    field name or value of 65,534 bytes or more makes `insert` throw `std::length_error`
    from inside an asynchronous read, where nothing can catch it before `io_context::run`,
    and the process aborts. Beast's `header_limit` bounds only the header section, not the
    trailer section of a chunked message, and a configured head limit may exceed 64 KiB. So
    every field is checked here before Beast stores it, and parsing fails with an error
    value instead.

    Trailers are kept apart from the header fields (RFC 9110 section 6.5.1: a recipient must
    not merge them unless the field's definition allows it): Beast would add them to the
    message's header, where an `Authorization` or `Idempotency-Key` trailer would become a
    header the next hop trusts. `trailers()` holds them for the relay to forward as trailers.

    Beast's `header_limit` bounds only the part of the head not yet parsed when a read ends
    mid-field, so how large a head may grow depended on how the reads happened to fall (an
    80 KB head passed a 64 KiB limit once reads were 16 KiB). The fields are counted here,
    so the limit holds for the whole head whatever the read sizes.

    An upstream's response keeps its header fields in a `field_list` the exchange owns
    (`response_parser`), not in the message: the client's head is written from that list. */
#include "proxy/wire/field_list.hpp"
#include "proxy/wire/head_fields.hpp"

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/parser.hpp>

#include <cstddef>
#include <cstdint>

namespace rebound::http {

/// Limits on fields beyond Beast's header_limit and body_limit.
struct field_limits {
  /// Name plus value of one field (header or trailer); Beast cannot store 65,534 or more.
  std::size_t max_field = 65'000;
  /// The whole trailer section of a chunked message, and the number of trailer fields.
  std::size_t max_trailer_bytes = 16 * 1024;
  std::size_t max_trailer_fields = 64;
};

/// Why a bounded parser refused a field: checked by the answer code (431 vs 400).
enum class field_refusal { none, header_field, trailer_section };

template <bool isRequest, class Body>
class bounded_parser : public boost::beast::http::parser<isRequest, Body, head_allocator<char>> {
 public:
  explicit bounded_parser(field_limits limits = {}) : limits_(limits) {}

  /// The head's limit, for the whole head (Beast's own check is kept as well).
  void header_limit(std::uint32_t v) {
    head_limit_ = v;
    boost::beast::http::parser<isRequest, Body, head_allocator<char>>::header_limit(v);
  }

  /// The trailer fields of a chunked message, once it is done.
  const head_fields& trailers() const { return trailers_; }
  field_refusal refusal() const { return refusal_; }

 protected:
  /// Header fields go to `into` instead of the message.
  bounded_parser(field_limits limits, field_list& into) : limits_(limits), into_(&into) { into.clear(); }

 private:
  void on_field_impl(boost::beast::http::field name, boost::beast::string_view name_string,
                     boost::beast::string_view value, boost::system::error_code& ec) override {
    auto const size = name_string.size() + value.size();
    if (!this->is_header_done()) {
      head_bytes_ += size + 4;  // ": " and CRLF
      if (size > limits_.max_field || head_bytes_ > head_limit_) return refuse(field_refusal::header_field, ec);
      if (into_)
        into_->insert(name, name_string, value);
      else
        this->get().insert(name, name_string, value);
      return;
    }
    trailer_bytes_ += size + 4;  // ": " and CRLF
    if (size > limits_.max_field || trailer_bytes_ > limits_.max_trailer_bytes ||
        ++trailer_fields_ > limits_.max_trailer_fields)
      return refuse(field_refusal::trailer_section, ec);
    trailers_.insert(name, name_string, value);
  }

  void refuse(field_refusal why, boost::system::error_code& ec) {
    refusal_ = why;
    ec = boost::beast::http::error::header_limit;
  }

  field_limits limits_;
  field_list* into_ = nullptr;
  std::size_t head_limit_ = 8192;  ///< Beast's default
  std::size_t head_bytes_ = 0;
  head_fields trailers_;
  std::size_t trailer_bytes_ = 0;
  std::size_t trailer_fields_ = 0;
  field_refusal refusal_ = field_refusal::none;
};

/// A request whose body is relayed (or kept) through a caller's buffer.
using request_parser = bounded_parser<true, boost::beast::http::buffer_body>;
/** An upstream's response, relayed the same way. Its header fields are in `fields()`, a list
    that outlives the parser (the exchange keeps it for its next head); `get()` holds the
    status line and the body's buffer, and no fields. */
class response_parser : public bounded_parser<false, boost::beast::http::buffer_body> {
 public:
  explicit response_parser(field_list& fields, field_limits limits = {})
      : bounded_parser(limits, fields), fields_(fields) {}
  field_list& fields() { return fields_; }
  const field_list& fields() const { return fields_; }

 private:
  field_list& fields_;
};

/** Parses what `buffer` already holds into `p`, as Beast's reads do before they read, and
    consumes what was used. need_more: nothing was there, or too little, so a read must
    follow. Beast's reads parse such bytes the same way but then post their completion, a
    trip through the scheduler and an allocation for bytes already in hand: a request head
    that came with the session's first read, a small body that came with its head. */
template <class Parser>
boost::system::error_code parse_buffered(boost::beast::flat_buffer& buffer, Parser& p) {
  boost::system::error_code ec = boost::beast::http::error::need_more;
  if (buffer.size() > 0) buffer.consume(p.put(buffer.data(), ec));
  return ec;
}

}  // namespace rebound::http
