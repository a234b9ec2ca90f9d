#include "proxy/wire/upgrade.hpp"

#include <boost/beast/http/empty_body.hpp>
#include <gtest/gtest.h>

namespace upgrade_test {

namespace bhttp = boost::beast::http;
using namespace rebound::http;

/// A handshake as RFC 6455 section 1.3's example writes it.
rebound::http::request_message<bhttp::empty_body> handshake() {
  rebound::http::request_message<bhttp::empty_body> req{bhttp::verb::get, "/chat", 11};
  req.set(bhttp::field::host, "server.example.com");
  req.set(bhttp::field::upgrade, "websocket");
  req.set(bhttp::field::connection, "Upgrade");
  req.set(bhttp::field::sec_websocket_key, "dGhlIHNhbXBsZSBub25jZQ==");
  req.set(bhttp::field::sec_websocket_version, "13");
  return req;
}

TEST(Upgrade, RFC6455HandshakeIsAWebSocketUpgrade) {
  auto req = handshake();
  EXPECT_EQ(read_upgrade(req.base()).what, upgrade_ask::kind::websocket);
  // Tokens are case-insensitive, and the option may share Connection with others.
  req.set(bhttp::field::upgrade, "WebSocket");
  req.set(bhttp::field::connection, "keep-alive, upgrade");
  EXPECT_EQ(read_upgrade(req.base()).what, upgrade_ask::kind::websocket);
  // One offer among several, with a version after a slash.
  req.set(bhttp::field::upgrade, "foo/2, websocket");
  EXPECT_EQ(read_upgrade(req.base()).what, upgrade_ask::kind::websocket);
}

TEST(Upgrade, RFC9110_IgnoredUpgradesAreNone) {
  auto no_option = handshake();
  no_option.set(bhttp::field::connection, "keep-alive");
  EXPECT_EQ(read_upgrade(no_option.base()).what, upgrade_ask::kind::none) << "Connection must name upgrade";
  auto http10 = handshake();
  http10.version(10);
  EXPECT_EQ(read_upgrade(http10.base()).what, upgrade_ask::kind::none) << "HTTP/1.0's Upgrade is ignored";
  auto h2c = handshake();
  h2c.set(bhttp::field::upgrade, "h2c");
  EXPECT_EQ(read_upgrade(h2c.base()).what, upgrade_ask::kind::none) << "h2c is not relayed";
  rebound::http::request_message<bhttp::empty_body> plain{bhttp::verb::get, "/", 11};
  EXPECT_EQ(read_upgrade(plain.base()).what, upgrade_ask::kind::none);
}

TEST(Upgrade, RFC6455_MalformedHandshakesAreRefusedWithAReason) {
  auto expect_malformed = [](const rebound::http::request_message<bhttp::empty_body>& req, std::string_view mentions) {
    auto const ask = read_upgrade(req.base());
    EXPECT_EQ(ask.what, upgrade_ask::kind::malformed) << mentions;
    EXPECT_NE(ask.why.find(mentions), std::string::npos) << ask.why;
  };
  auto post = handshake();
  post.method(bhttp::verb::post);
  expect_malformed(post, "GET");
  auto with_length = handshake();
  with_length.set(bhttp::field::content_length, "5");
  expect_malformed(with_length, "Content-Length");
  auto chunked = handshake();
  chunked.set(bhttp::field::transfer_encoding, "chunked");
  expect_malformed(chunked, "Transfer-Encoding");
  for (auto key : {"", "short==", "dGhlIHNhbXBsZSBub25jZQ", "dGhlIHNhbXBsZSBub25jZQ=!", "dGhlIHNhbXBsZSBub2*jZQ=="}) {
    auto bad_key = handshake();
    bad_key.set(bhttp::field::sec_websocket_key, key);
    expect_malformed(bad_key, "Sec-WebSocket-Key");
  }
  auto no_key = handshake();
  no_key.erase(bhttp::field::sec_websocket_key);
  expect_malformed(no_key, "Sec-WebSocket-Key");
  auto two_keys = handshake();
  two_keys.insert(bhttp::field::sec_websocket_key, "dGhlIHNhbXBsZSBub25jZQ==");
  expect_malformed(two_keys, "Sec-WebSocket-Key");
  auto bad_version = handshake();
  bad_version.set(bhttp::field::sec_websocket_version, "thirteen");
  expect_malformed(bad_version, "Sec-WebSocket-Version");
  auto no_version = handshake();
  no_version.erase(bhttp::field::sec_websocket_version);
  expect_malformed(no_version, "Sec-WebSocket-Version");
}

TEST(Upgrade, AnEmptyContentLengthIsNoBody) {
  auto req = handshake();
  req.set(bhttp::field::content_length, "0");
  EXPECT_EQ(read_upgrade(req.base()).what, upgrade_ask::kind::websocket);
}

TEST(Upgrade, CarriedFieldsAreTheSwitchItself) {
  rebound::http::head_fields f;
  carry_websocket_upgrade(f);
  EXPECT_EQ(f[bhttp::field::connection], "Upgrade");
  EXPECT_EQ(f[bhttp::field::upgrade], "websocket");
}

TEST(Upgrade, ASwitchMustBeToWebSocketWithConnectionUpgrade) {
  rebound::http::field_list res;
  EXPECT_NE(switch_mismatch(res).find("without an Upgrade"), std::string::npos);
  res.set(bhttp::field::upgrade, "h2c");
  res.set(bhttp::field::connection, "Upgrade");
  EXPECT_NE(switch_mismatch(res).find("\"h2c\""), std::string::npos) << switch_mismatch(res);
  res.set(bhttp::field::upgrade, "websocket");
  EXPECT_EQ(switch_mismatch(res), "");
  res.erase(bhttp::field::connection);
  EXPECT_NE(switch_mismatch(res).find("Connection"), std::string::npos);
}

}  // namespace upgrade_test
