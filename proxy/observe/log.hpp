#pragma once
/** Structured log events: one JSON object per line on stdout (SPEC section 9).

    A call names the event and passes only typed fields, so a request body or a header
    value can never be logged by accident. The logger is an object owned by the app
    and handed down, not a global.

    The line is built on the calling worker; writing it to stdout happens on a logging
    thread, in batches, so a slow reader of stdout never stalls a worker (see batch_sink in
    log.cpp). When 8 MiB of lines wait unwritten, new lines are dropped rather than the
    worker made to wait; dropped() counts them. */
#include <spdlog/logger.h>

#include <exception>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

namespace rebound::observe {

struct field {
  std::string_view key;
  /// monostate: the field is left out of the line (a gRPC field on an HTTP/1.1 request).
  std::variant<std::string_view, long long, double, bool, std::monostate> value;
  field(std::string_view k, std::string_view v) : key(k), value(v) {}
  field(std::string_view k, const char* v) : key(k), value(std::string_view(v)) {}
  field(std::string_view k, const std::string& v) : key(k), value(std::string_view(v)) {}
  template <class I, class = std::enable_if_t<std::is_integral_v<I> && !std::is_same_v<I, bool>>>
  field(std::string_view k, I v) : key(k), value(static_cast<long long>(v)) {}
  field(std::string_view k, double v) : key(k), value(v) {}
  field(std::string_view k, bool v) : key(k), value(v) {}
  field(std::string_view k, std::optional<std::string_view> v)
      : key(k), value(v ? decltype(value)(*v) : decltype(value)(std::monostate{})) {}
  field(std::string_view k, std::optional<unsigned> v)
      : key(k), value(v ? decltype(value)(static_cast<long long>(*v)) : decltype(value)(std::monostate{})) {}
};

/** What names a request in every line about it (Pingora's request_summary): the caller's
    correlation id, the dependency, the method and the path without its query.
    An event given one writes these four first, so a search for a request's lines matches
    every event of it the same way. */
struct request_summary {
  std::string_view correlation_id, dependency, method, path;
};

class batch_sink;

class logger {
 public:
  /// Writes to stdout from its own thread; `level` is one of trace, debug, info, warn, error, off.
  explicit logger(std::string_view level);
  /// The same, writing to `fd` (tests use a pipe). The caller keeps `fd` open.
  logger(std::string_view level, int fd);
  ~logger();
  logger(const logger&) = delete;
  logger& operator=(const logger&) = delete;
  /// Writes to an existing spdlog logger (tests capture output this way).
  explicit logger(std::shared_ptr<spdlog::logger> sink);

  void event(spdlog::level::level_enum lvl, std::string_view name, std::initializer_list<field> fields) const;
  void info(std::string_view name, std::initializer_list<field> fields = {}) const {
    event(spdlog::level::info, name, fields);
  }
  void warn(std::string_view name, std::initializer_list<field> fields = {}) const {
    event(spdlog::level::warn, name, fields);
  }
  void error(std::string_view name, std::initializer_list<field> fields = {}) const {
    event(spdlog::level::err, name, fields);
  }
  /// An event about one request: `about` first, then `fields`.
  void event(spdlog::level::level_enum lvl, std::string_view name, const request_summary& about,
             std::initializer_list<field> fields) const;
  void info(std::string_view name, const request_summary& about, std::initializer_list<field> fields) const {
    event(spdlog::level::info, name, about, fields);
  }
  void warn(std::string_view name, const request_summary& about, std::initializer_list<field> fields) const {
    event(spdlog::level::warn, name, about, fields);
  }
  bool enabled(spdlog::level::level_enum lvl) const { return sink_->should_log(lvl); }
  /// A new level (a reloaded config's log_level); safe while other threads log.
  void set_level(std::string_view level) { sink_->set_level(spdlog::level::from_str(std::string(level))); }
  /// Writes every line logged so far before returning.
  void flush() const;
  /// Lines dropped because stdout did not keep up.
  std::size_t dropped() const;

 private:
  void write(spdlog::level::level_enum lvl, std::string_view name, std::initializer_list<field> first,
             std::initializer_list<field> then) const;
  std::shared_ptr<batch_sink> batch_;  ///< null when writing to a caller's spdlog logger
  std::shared_ptr<spdlog::logger> sink_;
};

/// Logs what escaped a coroutine instead of losing it (co_spawn's detached would): the
/// completion token of every coroutine a worker spawns.
struct report_failure {
  const logger* log;
  const char* what;
  void operator()(std::exception_ptr e) const {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      log->error("internal_error", {{"task", what}, {"message", x.what()}});
    } catch (...) {
      log->error("internal_error", {{"task", what}, {"message", "unknown exception"}});
    }
  }
};

}  // namespace rebound::observe
