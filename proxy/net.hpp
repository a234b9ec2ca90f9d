#pragma once
/** Asio and Beast as rebound uses them (every coroutine, socket, timer and stream on the
    io_context's own executor type), and the completion token used on the data path.

    `use_tuple` makes every asynchronous result a tuple with its error_code: on the data path
    errors are values, never exceptions (and the operands of awaitable `||` must not throw,
    asio#900). */
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/tcp_stream.hpp>

#include <chrono>
#include <cstddef>
#include <memory>

namespace rebound {

/** Asio, with one change: coroutines and timers carry the io_context's own executor type,
    not the type-erased `any_io_executor`. Every thread runs one io_context, so the erasure
    bought nothing and cost copies through function pointers at each suspension and
    completion (~6% of a proxied GET's instructions, bench/README.md). Names declared here
    hide Asio's of the same name (qualified lookup looks into a using-directive only for names
    the namespace does not declare); the rest are Asio's. Tests alias `net` to this one. */
namespace net {
using namespace boost::asio;
using executor = io_context::executor_type;
template <typename T = void>
using awaitable = boost::asio::awaitable<T, executor>;
inline constexpr use_awaitable_t<executor> use_awaitable;
using steady_timer = basic_waitable_timer<std::chrono::steady_clock, wait_traits<std::chrono::steady_clock>, executor>;
}  // namespace net
using tcp = net::ip::tcp;
/// TCP's I/O objects on the io_context's own executor (see `net`).
using tcp_socket = net::basic_stream_socket<tcp, net::executor>;
using tcp_acceptor = net::basic_socket_acceptor<tcp, net::executor>;
/// As `net` does for Asio: Beast, with its TCP stream on the io_context's own executor.
namespace beast {
using namespace boost::beast;
using tcp_stream = basic_stream<tcp, net::executor>;
}  // namespace beast
using error_code = boost::system::error_code;

inline constexpr auto use_tuple = net::as_tuple(net::use_awaitable);

/** For an operation that stays pending while a connection sits idle (its wait for bytes, its
    deadline): the operation takes its own size from malloc. Without it, Asio's recycling
    cache hands it the first cached block big enough, often one a larger operation or frame
    left, and an idle connection holds that block for as long as it waits. A type of its
    own: Asio treats std::allocator<void> as "none given". Bind it with net::bind_allocator. */
template <typename T>
struct exact_allocator {
  using value_type = T;
  exact_allocator() = default;
  template <typename U>
  exact_allocator(const exact_allocator<U>&) noexcept {}
  T* allocate(std::size_t n) { return std::allocator<T>().allocate(n); }
  void deallocate(T* p, std::size_t n) noexcept { std::allocator<T>().deallocate(p, n); }
  template <typename U>
  bool operator==(const exact_allocator<U>&) const noexcept {
    return true;
  }
};

/** Whether bytes wait unread in the kernel's buffer of this socket: a request that arrived
    and must not be lost when its connection is about to be closed (a drain, a park). */
inline bool has_unread_bytes(tcp_socket& socket) {
  error_code ec;
  auto const n = socket.available(ec);
  return !ec && n > 0;
}

}  // namespace rebound
