#pragma once
/** R-8's alert: a dead letter raises a notice to `alert.webhook`, delivered as a task of its
    own (durable, retried on R-3's webhook table with one idempotency key) that ends EXHAUSTED
    rather than dead-lettered, so a failing alert cannot raise another. */
#include "config/config.hpp"
#include "proxy/runtime/session_context.hpp"
#include "proxy/retry/step.hpp"
#include "proxy/store/task.hpp"

#include <string_view>

namespace rebound::observe {
class metrics;
}

namespace rebound::delivery {

/// R-3's webhook table, 24 h: how an alert notice is retried, whatever the route of its URL says.
const retry::policy& alert_policy();

/** Raises the notice of a dead letter, stored next to the dead letter's record so both
    usually share one commit (a crash between the two can lose the notice, never the dead
    letter). A notice that cannot be made or stored is never dropped in silence: it is logged
    `alert_failed` and counted lost in `metrics` (when kept). */
void raise_alert(const runtime::session_context& ctx, observe::metrics* metrics, const store::retry_task& dead,
                 std::string_view reason, unsigned attempts);

/** An alert notice's attempts are attempts to its URL's dependency like any other, but its
    end is rebound's own business: counted in alert_notices_total, never in the
    retry_request_attempts that seed 003's dead-letter rate is computed from. */
class notice_observer final : public retry::attempt_observer {
 public:
  explicit notice_observer(retry::attempt_observer& dependency) : dependency_(dependency) {}
  void attempt_done(const retry::attempt_report& r) override { dependency_.attempt_done(r); }
  void retry_scheduled(retry::duration wait) override { dependency_.retry_scheduled(wait); }
  void exhausted() override { dependency_.exhausted(); }
  void declined(std::string_view reason) override { dependency_.declined(reason); }

 private:
  retry::attempt_observer& dependency_;
};

}  // namespace rebound::delivery
