#pragma once
/** A streaming RPC (client, server or bidirectional streaming; its route says
    `grpc_streaming: true`, since the wire does not say): relayed message by message in both
    directions as they arrive, with HTTP/2 flow control carried end to end (h2/body_pipe).

    It goes through the same retry loop and decision as a unary call while nothing of the
    upstream's answer has reached the client: a connect failure, a refused stream, or a
    trailers-only failure (UNAVAILABLE, ...) is retried when R-6 allows it and every
    request byte sent so far is still kept (`max_retry_body`). Once the upstream answers with
    a head of its own, that head goes to the client and the call is never sent again: the
    messages that follow are the server's, not rebound's to repeat. */
#include "proxy/h2/server_connection.hpp"
#include "proxy/runtime/session_context.hpp"

#include <memory>

namespace rebound::grpc {

struct call_plan;

/** Relays `call`, planned at its head (`planned`, plan_call), until it ends: the upstream's
    answer ends, the client resets its stream, or the caller's grpc-timeout passes (the stream
    is then cancelled). A call refused at its head is answered here at once, whatever its route. */
net::awaitable<void> relay_call(runtime::session_context ctx, std::shared_ptr<call_plan> planned,
                                h2::streamed_request call);

}  // namespace rebound::grpc
