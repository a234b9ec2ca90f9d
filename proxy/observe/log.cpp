#include "proxy/observe/log.hpp"

#include "proxy/observe/json.hpp"

#include <spdlog/async.h>
#include <spdlog/details/null_mutex.h>
#include <spdlog/sinks/base_sink.h>

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>

namespace rebound::observe {
namespace {

/** stdout for the logging thread: lines gather in a buffer that is written when the queue
    behind them is empty or the buffer is full. An idle proxy's line goes out at once; a busy
    one's go out many per write(2), where a flush per line cost a system call per line (8% of
    throughput with two lines per request, bench/logging_cost.py). Only the logging thread
    calls it, hence the null mutex. */
class stdout_batch_sink final : public spdlog::sinks::base_sink<spdlog::details::null_mutex> {
 public:
  explicit stdout_batch_sink(spdlog::details::thread_pool& pool) : pool_(pool) { buffer_.reserve(batch_bytes); }
  ~stdout_batch_sink() override { write_out(); }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    buffer_.append(msg.payload.data(), msg.payload.size());
    buffer_ += '\n';
    if (buffer_.size() >= batch_bytes || pool_.queue_size() == 0) write_out();
  }
  void flush_() override { write_out(); }

 private:
  static constexpr std::size_t batch_bytes = 64 * 1024;

  void write_out() {
    std::size_t done = 0;
    while (done < buffer_.size()) {
      auto const n = ::write(STDOUT_FILENO, buffer_.data() + done, buffer_.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;  // stdout closed or broken: the lines are lost, the proxy goes on
      done += static_cast<std::size_t>(n);
    }
    buffer_.clear();
  }

  spdlog::details::thread_pool& pool_;
  std::string buffer_;
};

}  // namespace

logger::logger(std::string_view level) : pool_(std::make_shared<spdlog::details::thread_pool>(queue_lines, 1)) {
  sink_ = std::make_shared<spdlog::async_logger>("rebound", std::make_shared<stdout_batch_sink>(*pool_), pool_,
                                                 spdlog::async_overflow_policy::overrun_oldest);
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
