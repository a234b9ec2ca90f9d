#include "proxy/upstream/connection.hpp"

#include <boost/asio/ssl/error.hpp>

namespace rebound::upstream {

bool ends_stream(const error_code& ec) { return ec == net::error::eof || ec == net::ssl::error::stream_truncated; }

}  // namespace rebound::upstream
