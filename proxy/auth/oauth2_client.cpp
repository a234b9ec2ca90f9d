#include "proxy/auth/oauth2_client.hpp"

#include "proxy/auth/jwt.hpp"
#include "proxy/auth/secret_file.hpp"
#include "proxy/wire/bounded_parser.hpp"
#include "proxy/upstream/service_call.hpp"
#include "proxy/upstream/tls_client.hpp"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>

#include <cctype>
#include <fstream>
#include <sstream>

namespace rebound::auth {
namespace {

namespace bhttp = beast::http;

/// How long one call to the token endpoint may take, connect to last byte.
constexpr std::chrono::seconds token_timeout{10};
constexpr std::uint64_t max_token_answer = 64 * 1024;

/// application/x-www-form-urlencoded, which RFC 6749 2.3.1 also asks for inside Basic.
std::string form_encode(std::string_view s) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~')
      out.push_back(static_cast<char>(c));
    else if (c == ' ')
      out.push_back('+');
    else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  return out;
}

/// An OAuth2 error code is a short token of printable ASCII (RFC 6749 5.2): safe to log.
bool loggable_error_code(std::string_view s) {
  if (s.empty() || s.size() > 64) return false;
  for (unsigned char c : s)
    if (!(std::isalnum(c) || c == '_' || c == '-' || c == '.')) return false;
  return true;
}

std::string read_secret(const std::string& path, std::string& error) {
  auto read = read_secret_file(path);
  if (!read.value) {
    error = "client_secret_file " + read.error;
    return {};
  }
  if (read.value->empty()) error = "client_secret_file " + path + " is empty";
  return std::move(*read.value);
}

}  // namespace

token_answer read_token_answer(unsigned status, std::string_view body, wall_clock::time_point now,
                               std::chrono::seconds fallback_lifetime) {
  token_answer out;
  boost::system::error_code ec;
  auto const json = boost::json::parse(body, ec);
  auto const* obj = !ec && json.is_object() ? &json.as_object() : nullptr;
  if (status != 200) {
    out.error = "the token endpoint answered " + std::to_string(status);
    if (obj) {
      if (auto const* e = obj->if_contains("error"); e && e->is_string() && loggable_error_code(e->as_string()))
        out.error += " (" + std::string(e->as_string()) + ")";
    }
    return out;
  }
  if (!obj) {
    out.error = "the token endpoint's answer is not a JSON object";
    return out;
  }
  auto const* token = obj->if_contains("access_token");
  if (!token || !token->is_string() || token->as_string().empty()) {
    out.error = "the token endpoint's answer has no access_token";
    return out;
  }
  if (auto const* type = obj->if_contains("token_type");
      type && (!type->is_string() || !beast::iequals(std::string_view(type->as_string()), "bearer"))) {
    out.error = "the token endpoint issued a token that is not a Bearer token";
    return out;
  }
  std::string value(token->as_string());
  if (value.find_first_of("\r\n") != std::string::npos) {
    out.error = "the token endpoint issued a token that cannot go in a header";
    return out;
  }
  out.expires_in = fallback_lifetime;
  if (auto const* e = obj->if_contains("expires_in"); e && (e->is_int64() || e->is_uint64() || e->is_double())) {
    double const v = e->is_double()  ? e->as_double()
                     : e->is_int64() ? static_cast<double>(e->as_int64())
                                     : static_cast<double>(e->as_uint64());
    if (v > 0 && v < 1e9) out.expires_in = std::chrono::seconds(static_cast<long long>(v));
  } else if (auto const exp = jwt_expiry(value)) {
    out.expires_in = std::chrono::duration_cast<std::chrono::seconds>(*exp - now);
  }
  if (out.expires_in.count() <= 0) {
    out.error = "the token endpoint issued a token that has already expired";
    return out;
  }
  out.access_token = std::move(value);
  return out;
}

oauth2_client::oauth2_client(config::auth_settings settings, std::string dependency,
                             std::shared_ptr<upstream::tls_client> tls, const observe::logger* log)
    : settings_(std::move(settings)), dependency_(std::move(dependency)), tls_(std::move(tls)), log_(log) {}

net::awaitable<credential> oauth2_client::authorization(steady_clock::time_point deadline) {
  auto ex = co_await net::this_coro::executor;
  std::shared_ptr<net::steady_timer> timer;
  std::uint64_t generation = 0;
  bool start = false;
  {
    std::lock_guard lock(mutex_);
    if (have_token_ && steady_clock::now() < refresh_at_) {
      credential fresh{"Bearer " + token_, {}};
      co_return fresh;
    }
    if (!refreshing_) refreshing_ = start = true;
    timer = std::make_shared<net::steady_timer>(ex);
    timer->expires_at(deadline);
    waiters_.push_back({ex, timer});
    generation = generation_;
  }
  if (start) net::co_spawn(ex, refresh(shared_from_this()), net::detached);
  auto [ec] = co_await timer->async_wait(use_tuple);
  (void)ec;  // cancelled: the refresh ended; expired: it did not end in time
  std::lock_guard lock(mutex_);
  credential out;
  if (generation_ == generation) {
    out.error = "the token endpoint did not answer within the attempt's time";
  } else if (have_token_ && steady_clock::now() < expires_at_) {
    // A failed refresh leaves a token that has not expired yet usable: it is still valid.
    out.authorization = "Bearer " + token_;
  } else {
    out.error = last_ok_ ? "the token expired while it was being refreshed" : last_error_;
  }
  co_return out;
}

net::awaitable<void> oauth2_client::refresh(std::shared_ptr<oauth2_client> self) {
  token_answer answer;
  try {
    answer = co_await self->fetch(steady_clock::now() + token_timeout);
  } catch (const std::exception& e) {  // only allocation can throw here; the waiters must still wake
    answer.error = std::string("token refresh failed: ") + e.what();
  }
  self->finish(answer);
}

void oauth2_client::finish(const token_answer& answer) {
  auto const now = steady_clock::now();
  std::vector<waiter> waiting;
  {
    std::lock_guard lock(mutex_);
    last_ok_ = answer.access_token.has_value();
    if (last_ok_) {
      token_ = *answer.access_token;
      have_token_ = true;
      expires_at_ = now + answer.expires_in;
      refresh_at_ = auth::refresh_at(expires_at_, answer.expires_in, settings_.refresh_skew);
    } else {
      last_error_ = answer.error;
    }
    ++generation_;
    refreshing_ = false;
    waiting.swap(waiters_);
  }
  // Each timer belongs to its request's worker: it is cancelled there, not from here.
  for (auto& w : waiting) net::post(w.executor, [t = w.timer] { t->cancel(); });
  if (!log_) return;
  if (answer.access_token)
    log_->info("auth_refreshed",
               {{"dependency", dependency_}, {"expires_in_s", static_cast<long long>(answer.expires_in.count())}});
  else
    log_->error("auth_refresh_failed", {{"dependency", dependency_}, {"message", answer.error}});
}

net::awaitable<token_answer> oauth2_client::fetch(steady_clock::time_point deadline) {
  token_answer out;
  std::string secret_error;
  auto const secret = read_secret(settings_.client_secret_file, secret_error);
  if (!secret_error.empty()) {
    out.error = secret_error;
    co_return out;
  }
  http::request_message<bhttp::string_body> req{bhttp::verb::post, "/", 11};
  req.set(bhttp::field::content_type, "application/x-www-form-urlencoded");
  req.set(bhttp::field::accept, "application/json");
  req.set(bhttp::field::authorization,
          "Basic " + base64_encode(form_encode(settings_.client_id) + ":" + form_encode(secret)));
  req.body() = "grant_type=client_credentials";
  if (!settings_.scope.empty()) req.body() += "&scope=" + form_encode(settings_.scope);
  auto answer = co_await upstream::call_service(settings_.token_url, tls_.get(), req, max_token_answer, deadline);
  if (!answer.error.empty()) {
    out.error = "the token endpoint: " + answer.error;
    co_return out;
  }
  out = read_token_answer(answer.status, answer.body, wall_clock::now());
  co_return out;
}

}  // namespace rebound::auth
