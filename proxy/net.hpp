#pragma once
/** Namespace aliases and the completion token used on the data path.

    `use_tuple` makes every asynchronous result a tuple with its error_code: on the data path
    errors are values, never exceptions (and the operands of awaitable `||` must not throw,
    asio#900). */
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/tcp_stream.hpp>

#include <cstddef>
#include <memory>

namespace rebound {

namespace net = boost::asio;
namespace beast = boost::beast;
using tcp = net::ip::tcp;
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
inline bool has_unread_bytes(tcp::socket& socket) {
  error_code ec;
  auto const n = socket.available(ec);
  return !ec && n > 0;
}

}  // namespace rebound
