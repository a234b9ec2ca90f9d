#pragma once
// Tests' one way to put a head's bytes through a parser (a request_parser or a
// response_parser) as the session and the relay read one off the wire.
#include <boost/asio/buffer.hpp>
#include <boost/beast/core/error.hpp>

#include <gtest/gtest.h>

#include <string_view>

namespace rebound::http::testing {

template <class Parser>
void parse_head(Parser& p, std::string_view wire) {
  boost::beast::error_code ec;
  p.eager(false);
  p.put(boost::asio::buffer(wire.data(), wire.size()), ec);
  ASSERT_FALSE(ec) << ec.message();
  ASSERT_TRUE(p.is_header_done());
}

}  // namespace rebound::http::testing
