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

namespace rebound {

namespace net = boost::asio;
namespace beast = boost::beast;
using tcp = net::ip::tcp;
using error_code = boost::system::error_code;

inline constexpr auto use_tuple = net::as_tuple(net::use_awaitable);

}  // namespace rebound
