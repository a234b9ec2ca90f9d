#pragma once
/** The admin API of async delivery (seed 001): submitting a task, a task's state and
    attempts, cancelling a pending task, registered policies, the dead letters, their replay
    and deletion. Answers are JSON; errors have SPEC 6's
    shape. Headers and bodies of tasks are never shown: they may carry the app's credentials
    and personal data. */
#include "proxy/wire/head_fields.hpp"
#include "proxy/net.hpp"

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

#include <optional>
#include <string_view>

namespace rebound::store {
class task_queue;
class policy_registry;
}
namespace rebound::config {
struct config;
}
namespace rebound::observe {
class logger;
}

namespace rebound::admin {

namespace bhttp = boost::beast::http;

/// What the API works with; all of it outlives the answer.
struct task_api_context {
  store::task_queue& tasks;           ///< the roles of the store it uses, and only those
  store::policy_registry& policies;
  const config::config& cfg;  ///< routes tasks to dependencies; admin.token_file, async.max_body
  const observe::logger& log;
  std::string_view admin_base;  ///< http://ADMIN: the base of a task's Location
};

/// Whether the request is for this API: /retry-tasks..., /retry-policies... or /dlq...
bool is_task_api(const http::request_message<bhttp::string_body>& req);

/** The answer to a write without the admin token (401), or to any write while
    admin.token_file cannot be read (503); nullopt for a read or an authorized write. Reads the
    head only: the admin port asks before it reads a body, so an unauthorized client cannot make
    rebound hold one. Host and Origin are host_guard.hpp's, checked before. */
std::optional<bhttp::response<bhttp::string_body>> refuse_unauthorized(const http::request_message<bhttp::string_body>& req,
                                                                       const config::config& cfg);

/** Answers it. A write (submit, register, cancel, replay, delete) needs `Authorization:
    Bearer` with the content of admin.token_file when one is configured (read at each
    write, so a rotated token takes effect at once); a read needs nothing, like the rest of
    the admin API. */
net::awaitable<bhttp::response<bhttp::string_body>> task_api_answer(const http::request_message<bhttp::string_body>& req,
                                                                    const task_api_context& ctx);

}  // namespace rebound::admin
