#include "proxy/plan/locate.hpp"

#include "proxy/plan/loop_guard.hpp"

namespace rebound::plan {

void locate(located& out, const target_in& in, listener where, const config::config& cfg) {
  using http::error_reply;
  using http::error_type;
  bool const to_app = where == listener::inbound;
  out.is_connect = in.method == "CONNECT";
  if (out.is_connect && to_app) {
    out.refusal =
        error_reply{405, error_type::bad_request, "CONNECT is for the outbound proxy, not the app's listener", {}, 0};
    return;
  }
  auto& t = out.target;
  if (out.is_connect) {
    auto parsed = parse_connect_target(in.target);
    if (!parsed.value) {
      out.refusal = error_reply{400, error_type::bad_request, std::move(parsed.error), {}, 0};
      return;
    }
    t = std::move(*parsed.value);
  } else if (auto error = parse_request_target(t, in.method, in.target, in.authority, in.authority_count, in.version)) {
    out.refusal = error_reply{400, error_type::bad_request, std::move(*error), {}, 0};
    return;
  }
  if (to_app) {
    t.scheme = "http";
    t.connect_host = cfg.inbound.app.host;
    t.port = cfg.inbound.app.port;
  } else if (t.scheme == "https") {
    out.refusal = error_reply{400,
                              error_type::bad_request,
                              "https:// targets travel in a CONNECT tunnel; to have rebound retry them, call http:// "
                              "and configure the dependency's origin: https://...",
                              {},
                              0};
    out.refusal_keeps_connection = true;
    return;
  }
  if (auto loop = refuse_loop(t, in.passed_here, to_app ? cfg.inbound.listen : cfg.listen)) {
    out.refusal = std::move(loop);
    return;
  }
  if (to_app) {
    out.route = dependency_route{"inbound", &cfg.inbound.forward, nullptr, nullptr, nullptr, nullptr};
    return;
  }
  out.route = route_request(cfg, t, in.method, out.is_connect);
  if (auto unknown = refuse_unknown_host(cfg, out.route, t)) {
    out.refusal = std::move(unknown);
    out.refusal_keeps_connection = true;
  }
}

}  // namespace rebound::plan
