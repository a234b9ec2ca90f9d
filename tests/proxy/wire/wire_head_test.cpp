#include "proxy/wire/wire_head.hpp"

#include "tests/proxy/wire/parse_head.hpp"

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/write.hpp>

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <sstream>

namespace bhttp = boost::beast::http;
using namespace rebound::http;

namespace wire_head_test {
namespace {

/// What Beast's own serializer writes for the same head: the bytes rebound used to send.
template <bool isRequest>
std::string beast_head(const bhttp::message<isRequest, bhttp::empty_body, rebound::http::head_fields>& m) {
  std::ostringstream os;
  os << m.base();
  return os.str();
}

}  // namespace

TEST(WireHead, ARequestHeadIsWhatBeastWouldWriteFieldsInOrder) {
  rebound::http::request_message<bhttp::empty_body> req{bhttp::verb::post, "/orders?id=7", 11};
  req.set(bhttp::field::host, "payments.internal:8080");
  req.insert("X-Custom", "one");
  req.insert("x-custom", "two");  // repeated, another case: both kept, as received
  req.set(bhttp::field::content_length, "5");
  req.set("Idempotency-Key", "0f8fad5b-d9cb-469f-a165-70867728950e");
  std::string out;
  append_head(out, req.base());
  EXPECT_EQ(out, beast_head(req));
  EXPECT_EQ(out.substr(0, out.find("\r\n")), "POST /orders?id=7 HTTP/1.1");
  EXPECT_TRUE(out.ends_with("\r\n\r\n"));
}

TEST(WireHead, AnExtensionMethodKeepsItsName) {
  rebound::http::request_message<bhttp::empty_body> req;
  req.method_string("PURGE");
  req.target("/cache");
  req.version(10);
  std::string out;
  append_head(out, req.base());
  EXPECT_EQ(out, "PURGE /cache HTTP/1.0\r\n\r\n");
}

using rebound::http::testing::parse_head;

TEST(WireHead, AResponseKeepsTheUpstreamsReasonPhraseAndItsFieldsAsReceived) {
  rebound::http::field_list fields;
  rebound::http::response_parser p(fields);
  parse_head(p, "HTTP/1.1 503 Try Later\r\nRetry-After: 3\r\nx-odd-CASE: a b \r\n\r\n");
  std::string out;
  append_head(out, p);
  EXPECT_EQ(out, "HTTP/1.1 503 Try Later\r\nRetry-After: 3\r\nx-odd-CASE: a b\r\n\r\n");
}

TEST(WireHead, AResponseWithoutAReasonGetsTheStandardOneAndAnUnknownCodeStaysItsNumber) {
  rebound::http::field_list fields;
  rebound::http::response_parser ok(fields);
  parse_head(ok, "HTTP/1.0 200 \r\n\r\n");
  std::string out;
  append_head(out, ok);
  EXPECT_EQ(out, "HTTP/1.1 200 OK\r\n\r\n");  // rebound speaks HTTP/1.1 to its client

  rebound::http::response_parser hints(fields);
  parse_head(hints, "HTTP/1.1 103 \r\nLink: </s.css>; rel=preload\r\n\r\n");
  out.clear();
  append_head(out, hints);
  EXPECT_EQ(out, "HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n");

  rebound::http::response_parser odd(fields);
  parse_head(odd, "HTTP/1.1 599 \r\n\r\n");
  out.clear();
  append_head(out, odd);
  EXPECT_TRUE(out.starts_with("HTTP/1.1 599 ")) << out;
}

TEST(WireHead, ChunkSizeLinesAreLowercaseHexWithCrlf) {
  std::array<char, 20> buf{};
  EXPECT_EQ(chunk_size_line(buf, 1), "1\r\n");
  EXPECT_EQ(chunk_size_line(buf, 16384), "4000\r\n");
  EXPECT_EQ(chunk_size_line(buf, 0xabcdef), "abcdef\r\n");
  EXPECT_EQ(chunk_size_line(buf, SIZE_MAX), "ffffffffffffffff\r\n");
}

TEST(WireHead, TheLastChunkCarriesOnlyTrailersThatMayTravel) {
  rebound::http::head_fields trailers;
  trailers.insert("Server-Timing", "db;dur=53");
  trailers.insert(bhttp::field::content_length, "10");  // framing: never a trailer
  trailers.insert(bhttp::field::authorization, "Bearer x");
  EXPECT_EQ(last_chunk_with(trailers), "0\r\nServer-Timing: db;dur=53\r\n\r\n");
  EXPECT_EQ(last_chunk_with(rebound::http::head_fields{}), std::string(last_chunk));
}

}  // namespace wire_head_test
