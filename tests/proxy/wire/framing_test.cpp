#include "proxy/wire/framing.hpp"

#include <boost/beast/http/buffer_body.hpp>

#include <gtest/gtest.h>

namespace bhttp = boost::beast::http;
using namespace rebound::http;

namespace framing_test {
namespace {
rebound::http::head_fields with(std::initializer_list<std::pair<const char*, const char*>> fs) {
  rebound::http::head_fields f;
  for (auto [k, v] : fs) f.insert(k, v);
  return f;
}
}  // namespace

TEST(Framing, PlainChunkedAndContentLengthPass) {
  EXPECT_FALSE(check_request_framing(with({{"Transfer-Encoding", "chunked"}}), 11));
  EXPECT_FALSE(check_request_framing(with({{"Content-Length", "5"}}), 11));
  EXPECT_FALSE(check_request_framing(with({}), 10));
}

TEST(Framing, Smuggling_TransferEncodingWithContentLengthIsRejected) {
  auto p = check_request_framing(with({{"Transfer-Encoding", "gzip"}, {"Content-Length", "5"}}), 11);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->status, 400u);
}

TEST(Framing, Smuggling_FinalCodingNotChunkedIsRejected) {
  ASSERT_TRUE(check_request_framing(with({{"Transfer-Encoding", "chunked, gzip"}}), 11));
  ASSERT_TRUE(check_request_framing(with({{"Transfer-Encoding", "identity"}}), 11));
  ASSERT_TRUE(check_request_framing(with({{"Transfer-Encoding", ""}}), 11));
  EXPECT_EQ(check_request_framing(with({{"Transfer-Encoding", "xchunked"}}), 11)->status, 400u);
}

TEST(Framing, Smuggling_TransferEncodingInHttp10IsRejected) {
  EXPECT_TRUE(check_request_framing(with({{"Transfer-Encoding", "chunked"}}), 10));
}

TEST(Framing, OtherCodingsBeforeChunkedAreNotImplemented) {
  auto p = check_request_framing(with({{"Transfer-Encoding", "gzip"}, {"Transfer-Encoding", "chunked"}}), 11);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->status, 501u);
}

TEST(Framing, ARebuiltRequestIsFramedByItsBodyAndItsMethod) {
  struct row {
    const char* method;
    std::size_t size;
    std::optional<std::string> content_length;
  };
  for (auto const& r : {row{"POST", 0, "0"}, row{"PUT", 0, "0"}, row{"PATCH", 0, "0"}, row{"POST", 5, "5"},
                        row{"GET", 0, std::nullopt}, row{"DELETE", 0, std::nullopt}, row{"OPTIONS", 0, std::nullopt},
                        row{"PURGE", 0, std::nullopt}, row{"DELETE", 3, "3"}}) {
    rebound::http::request_message<boost::beast::http::buffer_body> req;
    req.method_string(r.method);
    req.set(boost::beast::http::field::content_length, "99");  // whatever the stored head said
    req.set(boost::beast::http::field::transfer_encoding, "chunked");
    rebound::http::frame_whole_body(req, r.size);
    auto const cl = req.find(boost::beast::http::field::content_length);
    if (r.content_length)
      EXPECT_EQ(cl != req.end() ? std::string(cl->value()) : "none", *r.content_length) << r.method << " " << r.size;
    else
      EXPECT_EQ(cl, req.end()) << r.method;
    EXPECT_EQ(req.find(boost::beast::http::field::transfer_encoding), req.end()) << r.method;
  }
}

}  // namespace framing_test
