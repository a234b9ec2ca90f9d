#include "proxy/observe/log.hpp"

#include "proxy/observe/json.hpp"

#include <spdlog/async.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <chrono>
#include <cstdio>

namespace rebound::observe {

logger::logger(std::string_view level) : pool_(std::make_shared<spdlog::details::thread_pool>(queue_lines, 1)) {
  // The stdout sink flushes after every line itself, on the logging thread.
  sink_ = std::make_shared<spdlog::async_logger>("rebound", std::make_shared<spdlog::sinks::stdout_sink_mt>(), pool_,
                                                 spdlog::async_overflow_policy::overrun_oldest);
  sink_->set_pattern("%v");
  sink_->set_level(spdlog::level::from_str(std::string(level)));
}

logger::logger(std::shared_ptr<spdlog::logger> sink) : sink_(std::move(sink)) {}

// The queue holds the async logger alive until its lines are written; releasing the logger
// first and the pool last lets the pool's destructor drain the queue and join its thread.
logger::~logger() {
  sink_.reset();
  pool_.reset();
}

std::size_t logger::dropped() const { return pool_ ? pool_->overrun_counter() : 0; }

void logger::event(spdlog::level::level_enum lvl, std::string_view name, std::initializer_list<field> fields) const {
  if (!sink_->should_log(lvl)) return;
  std::string line;
  line.reserve(160);
  auto const now = std::chrono::system_clock::now();
  auto const ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count();
  std::time_t const secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char ts[64];
  std::snprintf(ts, sizeof ts, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<int>(ms % 1000));
  line += "{\"ts\":\"";
  line += ts;
  line += "\",\"level\":";
  auto const lv = spdlog::level::to_string_view(lvl);
  append_json_string(line, std::string_view(lv.data(), lv.size()));
  line += ",\"event\":";
  append_json_string(line, name);
  for (auto const& f : fields) {
    line += ',';
    append_json_string(line, f.key);
    line += ':';
    std::visit(
        [&](auto const& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, std::string_view>) append_json_string(line, v);
          else if constexpr (std::is_same_v<T, bool>) line += v ? "true" : "false";
          else line += std::to_string(v);
        },
        f.value);
  }
  line += '}';
  sink_->log(lvl, "{}", line);
}

}  // namespace rebound::observe
