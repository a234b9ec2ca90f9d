#pragma once
/** The admin API of async delivery (seed 001): a task's state and attempts, cancelling a
    pending task, the dead letters and their replay. Answers are JSON; errors have SPEC 6's
    shape. Headers and bodies of tasks are never shown: they may carry the app's credentials
    and personal data. */
#include "proxy/net.hpp"

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>

namespace rebound::store {
class task_store;
}

namespace rebound::admin {

namespace bhttp = boost::beast::http;

/// Whether the request is for this API: /retry-tasks/{id} or /dlq...
bool is_task_api(const bhttp::request<bhttp::string_body>& req);

/** Answers it. A write (cancel, replay) needs `Authorization: Bearer` with the content of
    `token_file` when one is configured (read at each write, so a rotated token takes effect
    at once); a read needs nothing, like the rest of the admin API. */
net::awaitable<bhttp::response<bhttp::string_body>> task_api_answer(const bhttp::request<bhttp::string_body>& req,
                                                                    store::task_store& store,
                                                                    const std::string& token_file);

}  // namespace rebound::admin
