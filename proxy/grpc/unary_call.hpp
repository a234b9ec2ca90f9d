#pragma once
/** A gRPC call (or any HTTP/2 request) that arrived on rebound's listener, answered through
    the same retry loop, decision and dependency state as an HTTP/1.1 request
    from the route's policy (`context: grpc`), R-4 by `grpc-status` from the trailers or a
    trailers-only answer, R-5 by `grpc-retry-pushback-ms`, R-6 by an idempotency key that
    travels as metadata, R-7 through the dependency's budget and breaker, R-9 through its
    credential source, each attempt to the upstream over HTTP/2 (h2/client_connection). */
#include "proxy/h2/message.hpp"
#include "proxy/net.hpp"
#include "proxy/runtime/session_context.hpp"

#include <memory>

namespace rebound::grpc {

struct call_plan;

/** Answers `request`, planned at its head (`planned`, plan_call). rebound's own failures are
    trailers-only answers (grpc/status.hpp). Runs on the worker of the connection it came on;
    a reset stream cancels it. */
net::awaitable<h2::message> answer_call(runtime::session_context ctx, std::shared_ptr<call_plan> planned,
                                        h2::message request);

}  // namespace rebound::grpc
