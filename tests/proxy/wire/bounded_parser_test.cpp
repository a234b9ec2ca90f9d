#include "proxy/wire/bounded_parser.hpp"

#include <gtest/gtest.h>

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
