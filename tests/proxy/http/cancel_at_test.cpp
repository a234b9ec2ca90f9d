#include "proxy/http/cancel_at.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/write.hpp>
#include <gtest/gtest.h>

#include <memory>
#include <optional>

using namespace rebound;
using namespace std::chrono_literals;

namespace cancel_at_test {
namespace {
/// A connected pair on 127.0.0.1; `near` is the side whose reads are bounded.
struct socket_pair {
  net::io_context ioc;
  rebound::tcp_socket near{ioc}, far{ioc};
  socket_pair() {
    rebound::tcp_acceptor a(ioc, {net::ip::make_address("127.0.0.1"), 0});
    near.connect(a.local_endpoint());
    far = a.accept();
  }
  /// Starts waiting for `near` to be readable; the result lands in `done`.
  void wait(std::optional<error_code>& done) {
    near.async_wait(rebound::tcp_socket::wait_read, [&done](error_code ec) { done = ec; });
  }
};
auto soon(std::chrono::milliseconds d) { return std::chrono::steady_clock::now() + d; }
}  // namespace

TEST(ConnectionDeadline, ADeadlineThatPassesCancelsTheWaitAndSaysSo) {
  socket_pair s;
  http::connection_deadline d(s.near);
  d.arm(soon(20ms));
  std::optional<error_code> done;
  s.wait(done);
  s.ioc.run_for(5s);  // ends as soon as the wait and the timer are done
  ASSERT_TRUE(done);
  EXPECT_EQ(*done, net::error::operation_aborted);
  EXPECT_TRUE(d.fired());
  EXPECT_TRUE(s.near.is_open()) << "left open, so an answer (408) can still be written";
}

TEST(ConnectionDeadline, ADeadlineMovedLaterIsNotTakenForTheEarlierOne) {
  socket_pair s;
  http::connection_deadline d(s.near);
  d.arm(soon(10ms));
  d.arm(soon(1h));  // the timer still wakes at 10 ms, finds the new deadline and sleeps on
  std::optional<error_code> done;
  s.wait(done);
  s.ioc.run_for(200ms);
  EXPECT_FALSE(done) << "cancelled at the deadline it was moved away from";
  EXPECT_FALSE(d.fired());
  // Bytes arriving end the wait normally.
  net::write(s.far, net::buffer("x", 1));
  s.ioc.restart();
  while (!done && s.ioc.run_one_for(1s) > 0) {
  }
  ASSERT_TRUE(done);
  EXPECT_FALSE(*done);
}

TEST(ConnectionDeadline, AnEarlierDeadlineReplacesALaterOne) {
  socket_pair s;
  http::connection_deadline d(s.near);
  d.arm(soon(1h));
  d.arm(soon(20ms));
  std::optional<error_code> done;
  s.wait(done);
  s.ioc.run_for(5s);
  ASSERT_TRUE(done);
  EXPECT_EQ(*done, net::error::operation_aborted);
  EXPECT_TRUE(d.fired());
}

TEST(ConnectionDeadline, DisarmedItCancelsNothing) {
  socket_pair s;
  http::connection_deadline d(s.near);
  d.arm(soon(10ms));
  d.disarm();
  std::optional<error_code> done;
  s.wait(done);
  s.ioc.run_for(200ms);
  EXPECT_FALSE(done);
  EXPECT_FALSE(d.fired());
}

TEST(ConnectionDeadline, GoneBeforeItsTimeItTouchesNoSocket) {
  socket_pair s;
  std::optional<error_code> done;
  {
    http::connection_deadline d(s.near);
    d.arm(soon(10ms));
  }
  s.wait(done);
  s.ioc.run_for(200ms);  // the timer's handler runs with the owner gone (ASan: no use after free)
  EXPECT_FALSE(done);
}
TEST(ConnectionDeadline, APendingWakeUpLeftAtShutdownIsReleasedCleanly) {
  // A worker's io_context may be destroyed with the timer still pending (the connection ended
  // at exit): the handler, which holds the timer's state, is then destroyed unrun.
  auto ioc = std::make_unique<net::io_context>();
  {
    rebound::tcp_socket s(*ioc);
    s.open(tcp::v4());
    http::connection_deadline d(s);
    d.arm(soon(1h));
  }
  ioc.reset();  // ASan and UBSan: nothing touched after it was freed
  SUCCEED();
}
}  // namespace cancel_at_test
