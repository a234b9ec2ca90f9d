#include "proxy/wire/bounded_parser.hpp"

#include <boost/asio/buffer.hpp>
#include <boost/beast/core/buffers_to_string.hpp>

#include <gtest/gtest.h>

#include <array>
#include <string>

namespace bhttp = boost::beast::http;
using namespace rebound::http;

namespace bounded_parser_test {
namespace {
/// Feeds `wire` in pieces of `step` bytes, as reads of that size would, keeping what the
/// parser did not consume (as Beast's read does with its buffer).
boost::system::error_code feed(request_parser& p, const std::string& wire, std::size_t step) {
  std::string pending;
  std::size_t at = 0;
  while (!p.is_header_done()) {
    if (at >= wire.size()) return bhttp::error::partial_message;
    pending.append(wire, at, step);
    at += step;
    boost::system::error_code ec;
    auto const used = p.put(boost::asio::buffer(pending), ec);
    pending.erase(0, used);
    if (ec == bhttp::error::need_more) continue;
    if (ec) return ec;
  }
  return {};
}

std::string head_of(int fields, std::size_t value_size) {
  std::string h = "GET / HTTP/1.1\r\nHost: a.test\r\n";
  for (int i = 0; i < fields; ++i) h += "X-Filler-" + std::to_string(i) + ": " + std::string(value_size, 'f') + "\r\n";
  return h + "\r\n";
}
}  // namespace

// Beast checks header_limit only against what is left unparsed when a read ends mid-field:
// with 16 KiB reads an 80 KB head passed a 64 KiB limit, with 512-byte reads it did not.
TEST(BoundedParser, TheHeadLimitHoldsForTheWholeHeadWhateverTheReadSizes) {
  auto const wire = head_of(20, 4000);
  for (std::size_t step : {512u, 4096u, 16384u, 65536u, 131072u}) {
    request_parser p;
    p.header_limit(64 * 1024);
    EXPECT_EQ(feed(p, wire, step), bhttp::error::header_limit) << "reads of " << step;
  }
}

TEST(BoundedParser, AHeadWithinTheLimitParsesWhateverTheReadSizes) {
  auto const wire = head_of(12, 4000);  // about 48 KB
  for (std::size_t step : {512u, 16384u, 131072u}) {
    request_parser p;
    p.header_limit(64 * 1024);
    EXPECT_FALSE(feed(p, wire, step)) << "reads of " << step;
    EXPECT_EQ(p.get().count("X-Filler-11"), 1u);
  }
}
}  // namespace bounded_parser_test

namespace parse_buffered_test {
namespace {
void fill(boost::beast::flat_buffer& b, std::string_view bytes) {
  auto n = boost::asio::buffer_copy(b.prepare(bytes.size()), boost::asio::buffer(bytes.data(), bytes.size()));
  b.commit(n);
}
}  // namespace

TEST(ParseBuffered, AHeadWholeInTheBufferIsParsedWithoutARead) {
  boost::beast::flat_buffer b;
  fill(b, "GET /x HTTP/1.1\r\nHost: a.test\r\n\r\nGET /y");
  request_parser p;
  EXPECT_FALSE(parse_buffered(b, p));
  ASSERT_TRUE(p.is_header_done());
  EXPECT_EQ(p.get().target(), "/x");
  EXPECT_EQ(boost::beast::buffers_to_string(b.data()), "GET /y")
      << "a pipelined request's bytes must stay for the next parse";
}

TEST(ParseBuffered, AnEmptyOrPartHeadAsksForARead) {
  boost::beast::flat_buffer b;
  request_parser p;
  EXPECT_EQ(parse_buffered(b, p), bhttp::error::need_more);
  fill(b, "GET /x HTTP/1.1\r\nHo");
  EXPECT_EQ(parse_buffered(b, p), bhttp::error::need_more);
  EXPECT_FALSE(p.is_header_done());
  fill(b, "st: a.test\r\n\r\n");
  EXPECT_FALSE(parse_buffered(b, p)) << "the bytes left from the first parse and the read's must make the head";
  EXPECT_TRUE(p.is_header_done());
  EXPECT_EQ(b.size(), 0u);
}

TEST(ParseBuffered, AMalformedHeadIsTheParsersError) {
  boost::beast::flat_buffer b;
  fill(b, "GET /x HTTP/1.1\r\nBad Name: v\r\n\r\n");
  request_parser p;
  auto const ec = parse_buffered(b, p);
  EXPECT_TRUE(ec);
  EXPECT_NE(ec, bhttp::error::need_more);
}

TEST(ParseBuffered, ABodyThatCameWithItsHeadGoesIntoTheCallersBuffer) {
  boost::beast::flat_buffer b;
  fill(b, "POST /x HTTP/1.1\r\nHost: a.test\r\nContent-Length: 5\r\n\r\nhello");
  request_parser p;
  ASSERT_FALSE(parse_buffered(b, p));
  ASSERT_FALSE(p.is_done()) << "a head parse stops at the head";
  std::array<char, 16> room{};
  p.get().body().data = room.data();
  p.get().body().size = room.size();
  auto const ec = parse_buffered(b, p);
  EXPECT_TRUE(!ec || ec == bhttp::error::need_buffer) << ec.message();
  EXPECT_TRUE(p.is_done());
  EXPECT_EQ(std::string_view(room.data(), room.size() - p.get().body().size), "hello");
  EXPECT_EQ(b.size(), 0u);
}
}  // namespace parse_buffered_test
