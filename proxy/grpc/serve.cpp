#include "proxy/grpc/serve.hpp"

#include "config/config.hpp"
#include "proxy/grpc/call_plan.hpp"
#include "proxy/grpc/status.hpp"
#include "proxy/grpc/streaming_call.hpp"
#include "proxy/grpc/unary_call.hpp"
#include "proxy/h2/server_connection.hpp"
#include "proxy/runtime/session_registry.hpp"

#include <algorithm>

namespace rebound::grpc {
namespace {

/** Whether the client opened with HTTP/2's preface, reading on by `due` while what arrived
    is a strict prefix of it. */
net::awaitable<bool> opens_http2(beast::tcp_stream& client, beast::flat_buffer& buffer, std::chrono::milliseconds idle,
                                 std::chrono::steady_clock::time_point due) {
  for (;;) {
    auto const data = buffer.cdata();
    auto const m = h2::match_preface(std::string_view(static_cast<const char*>(data.data()), data.size()));
    if (m != h2::preface_match::maybe) co_return m == h2::preface_match::yes;
    client.expires_at(std::min(std::chrono::steady_clock::now() + idle, due));
    auto [ec, n] = co_await client.async_read_some(buffer.prepare(h2::client_preface.size()), use_tuple);
    buffer.commit(n);
    if (ec) co_return false;  // what was read is parsed as HTTP/1.1, and fails there
  }
}

/** How a call is answered, decided at its head: it is located and planned once, under the
    routes of the latest reload. A call refused there is answered at once (nothing waits for
    its body); one whose route says it streams is relayed as it arrives; any other is answered
    once whole. */
h2::call_handler handler_for_call(runtime::session_context& ctx, h2::fields& head) {
  if (ctx.latest) ctx.running = *ctx.latest;
  auto plan = std::make_shared<call_plan>();
  plan_call(*plan, ctx, head);
  if (plan->refusal || plan->route.policy->grpc_streaming)
    return {{}, [ctx, plan](h2::streamed_request call) { return relay_call(ctx, plan, std::move(call)); }};
  return {[ctx, plan](h2::message request) { return answer_call(ctx, plan, std::move(request)); }, {}};
}

/// Serves an HTTP/2 connection: each call goes through grpc::answer_call, or grpc::relay_call
/// when its route says it streams.
net::awaitable<void> serve_http2(runtime::session_context ctx, beast::tcp_stream& client, beast::flat_buffer& buffer,
                                 runtime::session_guard& guard) {
  auto const& limits = ctx.cfg().limits;
  h2::server_limits l;
  // A call is held whole (its trailers decide R-4): without a configured bound, gRPC's own
  // default message limit plus room for framing.
  l.max_request_body = limits.max_request_body > 0 ? limits.max_request_body : (4u << 20) + 64 * 1024;
  l.max_header_list = limits.max_request_head;
  l.idle_timeout = limits.idle_timeout;
  l.connection_buffer = std::max<std::uint64_t>(limits.http2_connection_buffer, l.max_request_body);
  // Budget is checked before an answer arrives, so one answer of any allowed size still fits.
  l.answer_buffer = limits.http2_answer_buffer;
  l.body_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(limits.body_timeout);
  l.min_body_rate = limits.min_body_rate;
  h2::handlers handler{[ctx](h2::fields& head) mutable { return handler_for_call(ctx, head); }, refusal};
  // Made first, then awaited: a by-value argument inside a co_await expression is destroyed
  // twice by GCC 12.
  auto serving = h2::serve(client, buffer, l, std::move(handler), {ctx.sessions->draining_flag(), &guard});
  co_await std::move(serving);
}

}  // namespace

net::awaitable<bool> serve_if_http2(runtime::session_context ctx, beast::tcp_stream& client, beast::flat_buffer& buffer,
                                    runtime::session_guard& guard) {
  auto const due = std::chrono::steady_clock::now() + ctx.cfg().limits.head_timeout;
  if (!co_await opens_http2(client, buffer, ctx.cfg().limits.idle_timeout, due)) co_return false;
  // Made first, then awaited: GCC 12 destroys a by-value argument inside a co_await twice.
  auto serving = serve_http2(ctx, client, buffer, guard);
  co_await std::move(serving);
  co_return true;
}

}  // namespace rebound::grpc
