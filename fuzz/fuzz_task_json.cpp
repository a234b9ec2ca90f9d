// The body of POST /retry-tasks (seed 001's task): any bytes read as a task fit to store and
// send, or as a refusal that says why. What is accepted keeps the limits the proxy port
// keeps on a request, so a stored task can always be sent.
#include "proxy/admin/task_submission.hpp"
#include "proxy/wire/bounded_parser.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view const text(reinterpret_cast<const char*>(data), size);
  constexpr std::uint64_t max_body = 4096;
  constexpr std::size_t max_head = 8192;
  auto const read = rebound::admin::read_task_submission(text, max_body, max_head);
  if (auto const* refused = std::get_if<rebound::admin::submission_error>(&read)) {
    // A refusal is a 4xx that says why.
    auto const status = static_cast<unsigned>(refused->status);
    if (status < 400 || status > 499 || refused->message.empty() || refused->type.empty()) std::abort();
    return 0;
  }
  auto const& s = std::get<rebound::admin::task_submission>(read);
  if (s.body.size() > max_body) std::abort();
  if (s.method.empty() || s.method == "CONNECT") std::abort();
  if (s.target.authority.empty() || s.target.origin_form.empty()) std::abort();
  std::size_t head = 0;
  for (auto const& [name, value] : s.headers) {
    if (name.empty() || value.find_first_of(std::string_view("\r\n\0", 3)) != std::string_view::npos) std::abort();
    if (name.size() + value.size() > rebound::http::field_limits{}.max_field) std::abort();
    head += name.size() + value.size() + 4;
  }
  if (head > max_head) std::abort();
  return 0;
}
