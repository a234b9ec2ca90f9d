#include "proxy/inbound/serve.hpp"

#include "config/config.hpp"
#include "proxy/http/client_request.hpp"
#include "proxy/http/forward.hpp"
#include "proxy/http/message_rewrite.hpp"
#include "proxy/inbound/idempotency_gate.hpp"
#include "proxy/retry/dependency_guard.hpp"

namespace rebound::inbound {

net::awaitable<bool> serve_request(const http::client_request& request, runtime::session_guard& guard) {
  auto const& req = request.parser.get();
  std::string_view const method(req.method_string().data(), req.method_string().size());
  auto const* ir = request.ctx.cfg().inbound.route_for(method, plan::path_of(request.target.origin_form));
  auto const use = ir ? gate_for(*ir, request.parser) : gate_use::none;
  if (use == gate_use::gate) co_return co_await answer_through_gate(request, *ir);
  if (use == gate_use::unkeyed) request.route.guard->idempotent("unkeyed");
  co_return co_await http::forward(request, guard);
}

}  // namespace rebound::inbound
