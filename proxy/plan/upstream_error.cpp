#include "proxy/plan/upstream_error.hpp"

#include "proxy/observe/log.hpp"
#include "proxy/retry/error_type.hpp"

namespace rebound::plan {

void log_upstream_error(const runtime::session_context& ctx, const retry::request_facts& facts,
                        const upstream_error_event& e) {
  auto const error_type = e.error_type;
  // a certificate rebound refuses is a security event, not a flaky upstream.
  auto const level =
      error_type == to_string(retry::error_type::tls_certificate) ? spdlog::level::err : spdlog::level::warn;
  ctx.log->event(level, "upstream_error", facts.summary(),
                 {{"error_type", error_type}, {"status", e.status}, {"attempts", e.attempts}, {"message", e.message}});
}

}  // namespace rebound::plan
