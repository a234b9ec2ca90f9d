#pragma once
/** One attempt at a request whose body is fully known (none, or buffered for retries):
    take a pooled connection or connect, send head and body, and read the final response
    head. The loop in retry/ decides whether there is another. */
#include "proxy/wire/bounded_parser.hpp"
#include "proxy/wire/error_response.hpp"
#include "proxy/net.hpp"
#include "proxy/retry/attempt_failure.hpp"
#include "proxy/retry/address_health.hpp"
#include "proxy/upstream/pool.hpp"

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/system/result.hpp>

#include <array>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rebound::upstream {

namespace bhttp = boost::beast::http;
using response_parser = http::response_parser;
using clock = std::chrono::steady_clock;

/// An upstream's response head may be this large; its fields are bounded by bounded_parser.
inline constexpr std::uint32_t max_response_head = 64 * 1024;
/// What an upstream read buffer may hold: a head, one read and a trailer section. Bounds
/// chunk-size lines and trailers, which Beast buffers until their end is found.
inline constexpr std::size_t response_buffer_limit = max_response_head + 64 * 1024 + 16 * 1024;

/// Room a response read starts with: a head and a body of up to 16 KiB in one read, so such
/// an answer also goes to the client in one write. With 16 KiB, a 16 KiB answer took two of
/// each (bench/README.md, issue 47's sixth round). The body relay (http/relay.hpp) reads on
/// through the same buffer.
inline constexpr std::size_t first_read_size = 20 * 1024;

/** A final response head on the connection it came from, its body still to be read: what
    a successful attempt hands back, to be streamed on or dropped. Beast's parser cannot
    move, so it lives on the heap and travels as a pointer. */
struct exchange {
  std::optional<connection> stream;
  beast::flat_buffer buffer{response_buffer_limit};  ///< bytes read past the response head
  /// The head's fields (response_parser keeps them here): kept with their memory when the
  /// exchange is recycled, so a warm exchange reads a head without allocating.
  http::field_list fields;
  std::optional<response_parser> response;  ///< the final head
  /// A head serialized for the wire: the request's while attempts send it (a resend sends the
  /// same bytes), then the final response's on its way to the client. Here rather than in a
  /// coroutine frame: its room is kept with the exchange, so neither head is an allocation
  /// (bench/README.md).
  std::string head_text;
  std::array<char, 20> chunk_size_line{};  ///< a chunked body's size line, while it is sent
};

/// An attempt's outcome as a value: the response head, or why there is none.
using attempt_result = boost::system::result<std::unique_ptr<exchange>, retry::attempt_failure>;

class credential_source;
class tls_client;

/** Who hears of an exchange's interim (1xx) answers. upstream/ reports them as events and
    never writes to the client itself: the HTTP/1.1 side passes them on (http/relay.hpp's
    `interim_to_client`); gRPC and delivery have nobody to tell. */
class interim_listener {
 public:
  virtual ~interim_listener() = default;
  /// Passes `head` on; an error: the listener cannot take it, and hears of no more.
  virtual net::awaitable<error_code> interim(http::response_parser& head) = 0;
};

/// Where the upstream is and which pool slot its connections use.
struct destination {
  const std::string& pool_key;
  const std::string& host;  ///< for the resolver
  std::uint16_t port;
  tls_client* tls = nullptr;  ///< set for an https origin
  /// rebound's credential for the dependency (`auth`), unless the request carries its own.
  credential_source* auth = nullptr;
  /** The request may go on a pooled connection: it is safe to send twice and all of
      it is at hand to send again. A pooled connection can turn out dead only once the
      request is on it, and then whether the upstream processed it is unknown; such a
      request goes again, whole, on a fresh connection. Any other request only ever goes
      on a fresh connection (RFC 9110 section 9.2.2). */
  bool may_reuse = true;
  /// Who hears of interim (1xx) answers: the client, when it speaks HTTP/1.1; null: dropped.
  interim_listener* interim_to = nullptr;
  /// The client sent Expect: 100-continue and waits for a 100: the upstream's goes on to it.
  bool pass_100 = false;
  /// The request asks to switch to WebSocket (wire/upgrade.hpp): a 101 that does is its
  /// final answer, and the connection then belongs to the tunnel, never to the pool.
  bool upgrade = false;
  /** Envoy's previous_hosts: the addresses this request's earlier attempts went to. When the
      host's name has another, the attempt takes a pooled connection to another address or
      connects to one; a name with one address (or an IP literal) is not affected. */
  const std::vector<net::ip::address>* avoid = nullptr;
  /// Where the attempt's connection went (left as it was when none was made).
  net::ip::address* used = nullptr;
  /** The dependency's outlier ejection (retry/address_health.hpp): told how each address did, and
      asked which are ejected, to be passed over like those in `avoid`. Null: not tracked. */
  retry::address_observer* health = nullptr;
};

/** The addresses of `to.host` an attempt passes over: those ejected now (`to.health`), and on
    a retry those its request tried (`to.avoid`), as long as the name offers another; else
    only those tried, if that leaves one; else none: a request that finds every address
    ejected or tried goes to them anyway. Points at `to.avoid` or `scratch`, or is null (the
    common case, which asks no resolver). The HTTP/1.1 exchange and the HTTP/2 pool both ask. */
const std::vector<net::ip::address>* addresses_to_avoid(const net::executor& ex, const destination& to,
                                                        std::vector<net::ip::address>& scratch);

/// Adds `a` to the addresses a request tried (`destination::avoid`), once; an unspecified
/// address (no connection was made) is not one.
void remember_tried(std::vector<net::ip::address>& tried, const net::ip::address& a);

/// Tells `to.health` how `a` did: `failed` (a connect failure, a reset or timeout before the
/// answer, retry::fails_address) or answered. An IP literal's one address is never ejected.
void report_address(const net::executor& ex, const destination& to, const net::ip::address& a, bool failed);

struct interim_route;

/** How a request whose body is not at hand goes out on the open connection: the streaming
    path relays the client's body as it arrives (forward_once.cpp), after the Expect:
    100-continue exchange when the client asked for one. It may read the final head itself
    into `ex.response` (an upstream that answers before taking the body), and moves
    `deadline` on by the time it waited for the client: the attempt timeout measures the
    upstream, not the client's upload. */
using request_sender = std::function<net::awaitable<std::optional<retry::attempt_failure>>(
    connection& up, exchange& ex, interim_route& route, clock::time_point& deadline)>;

/// A request as it goes upstream: its head, and its body when that is at hand (none, or kept
/// for a resend; empty when a request_sender streams it).
struct outgoing_request {
  http::request_message<bhttp::buffer_body>& req;
  std::string_view body;
  bool is_head = false;  ///< a HEAD: the answer's head may promise a body that never comes
};

/// Where a connection goes back after a clean exchange: a pool, under an origin's key.
struct pool_slot {
  pool& p;
  const std::string& key;
};

/** The one exchange with an upstream for a request whose body is at hand (none, or kept for
    retries): every attempt of the retry loop is one call. With `to.auth`, the credential is
    made sure of first: without a valid one the attempt fails with auth_refresh_failed
    and nothing is sent. With `to.may_reuse`, a pooled connection that turns out to be
    closed before any response byte is replaced by a fresh one once, within the same
    attempt, and the whole request goes again. */
net::awaitable<attempt_result> run_attempt(pool& p, destination to, outgoing_request r, clock::time_point deadline);

/** The same exchange for a request whose body streams through once: `send` puts it on the
    connection in place of the single write. Such a request can never be sent again, so it
    never takes a pooled connection, whatever `to.may_reuse` says. */
net::awaitable<attempt_result> run_attempt(pool& p, destination to, outgoing_request r, const request_sender& send,
                                           clock::time_point deadline);

/** Reads the rest of a response nobody reads on (an async delivery's answer), at most
    `limit` body bytes by `deadline`, and puts the connection `back` when the exchange ended
    cleanly and the upstream keeps it open; else the connection closes with `ex`. Without it
    every delivery would open a fresh connection. */
net::awaitable<void> settle(pool_slot back, exchange& ex, std::size_t limit, clock::time_point deadline);

/// The same, keeping the body in `out`: false when it could not be read whole within `limit`.
net::awaitable<bool> read_response_body(pool_slot back, exchange& ex, std::string& out, std::size_t limit,
                                        clock::time_point deadline);

/** sets the Authorization of `req` from `source`, made sure of first; without a valid
    credential, the auth_refresh_failed failure (and `req` is not to be sent). Every path
    that sends a request to a dependency with `auth` goes through here. */
net::awaitable<std::optional<retry::attempt_failure>> apply_credential(credential_source& source,
                                                                       http::request_message<bhttp::buffer_body>& req,
                                                                       clock::time_point deadline);

/// The failure type of a response head that could not be read.
retry::attempt_failure read_failure(const error_code& ec);

/// Where interim (1xx) answers go while the final head is awaited.
struct interim_route {
  interim_listener* client = nullptr;   ///< null: dropped (an HTTP/1.0 client, or none to tell)
  bool pass_100 = false;                ///< the client sent Expect: 100-continue and has had no 100 yet
  bool stop_at_100 = false;             ///< return once a 100 went to the client: its body goes next
  bool sent_100 = false;                ///< out: a 100 went to the client
  bool upgrade = false;                 ///< a 101 to WebSocket is the final answer (destination::upgrade)
};

/** Reads response heads from `ex`'s connection until a final one, into `ex.response` (bounded by
    max_response_head and bounded_parser's field limits). 1xx answers go to `route.client`
    (RFC 9110 section 15.2: a proxy forwards 1xx it did not ask for); a 100 only when the
    client asked for one, since any other 100 answers an Expect rebound handled itself.
    A client that cannot take an interim answer does not fail the exchange: its trouble
    shows when the final answer goes out. A 101 is the final answer when `route.upgrade` asked
    for it and it switched to WebSocket; any other 101 is a protocol error, as nothing else
    was asked. With `route.stop_at_100`, returns once a 100 went to the client (`rp` then
    holds it), or could not (`route.client` is then null). On failure `ex.response` still holds
    what was parsed, for the caller to judge. */
net::awaitable<std::optional<retry::attempt_failure>> read_final_head(exchange& ex, bool is_head,
                                                                      clock::time_point deadline, interim_route& route);

}  // namespace rebound::upstream
