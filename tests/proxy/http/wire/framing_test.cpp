#include "proxy/http/wire/framing.hpp"

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

}  // namespace framing_test
