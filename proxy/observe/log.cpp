#include "proxy/observe/log.hpp"

#include "proxy/observe/json.hpp"

#include <spdlog/sinks/base_sink.h>

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <thread>

namespace rebound::observe {

/** The asynchronous stdout sink: a worker appends its line to a buffer under a mutex and goes
    on; a writing thread takes the whole buffer at once and writes it with one write(2).

    spdlog's own async logger (a queue of messages and a condition variable) woke its thread
    for nearly every line and wrote one line per system call; with two lines per request
    that cost 9% of throughput (bench/logging_cost.py). Here the thread is woken only when
    the buffer goes from empty to not empty, then waits `batch_window` to gather more, so a
    busy proxy writes at most ~100 times a second and an idle one not at all. A line reaches
    stdout at most ~10 ms after it was logged. When stdout cannot keep up and `max_pending`
    bytes are waiting, new lines are dropped (and counted) rather than a worker made to wait. */
class batch_sink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit batch_sink(int fd) : fd_(fd), thread_([this] { run(); }) {}
  ~batch_sink() override {
    {
      std::lock_guard lk(mutex_);
      stop_ = true;
    }
    wake_.notify_one();
    thread_.join();
    drain();
  }
  batch_sink(const batch_sink&) = delete;
  batch_sink& operator=(const batch_sink&) = delete;

  /// Writes every line logged so far, in order, before returning.
  void drain() {
    std::lock_guard order(write_mutex_);
    {
      std::lock_guard lk(mutex_);
      writing_.swap(pending_);
    }
    std::size_t done = 0;
    while (done < writing_.size()) {
      auto const n = ::write(fd_, writing_.data() + done, writing_.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;  // stdout closed or broken: the lines are lost, the proxy goes on
      done += static_cast<std::size_t>(n);
    }
    writing_.clear();
  }

  std::size_t dropped() const { return dropped_.load(std::memory_order_relaxed); }

 protected:
  // Called with mutex_ held (base_sink).
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (pending_.size() + msg.payload.size() + 1 > max_pending) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    bool const was_empty = pending_.empty();
    pending_.append(msg.payload.data(), msg.payload.size());
    pending_ += '\n';
    if (was_empty) wake_.notify_one();
  }
  // logger::flush() calls drain(), which need not hold the sink's mutex while writing.
  void flush_() override {}

 private:
  static constexpr std::size_t max_pending = 8u << 20;
  static constexpr auto batch_window = std::chrono::milliseconds(10);

  void run() {
    std::unique_lock lk(mutex_);
    for (;;) {
      wake_.wait(lk, [&] { return stop_ || !pending_.empty(); });
      if (stop_) return;
      lk.unlock();
      std::this_thread::sleep_for(batch_window);
      drain();
      lk.lock();
    }
  }

  int const fd_;
  std::mutex write_mutex_;  ///< keeps batches in order between the thread and drain()
  std::condition_variable wake_;
  bool stop_ = false;
  std::string pending_;  ///< guarded by mutex_
  std::string writing_;  ///< guarded by write_mutex_
  std::atomic<std::size_t> dropped_{0};
  std::thread thread_;  ///< last: it starts once everything above exists
};

logger::logger(std::string_view level) : logger(level, STDOUT_FILENO) {}

logger::logger(std::string_view level, int fd) : batch_(std::make_shared<batch_sink>(fd)) {
  sink_ = std::make_shared<spdlog::logger>("rebound", batch_);
  sink_->set_level(spdlog::level::from_str(std::string(level)));
}

logger::logger(std::shared_ptr<spdlog::logger> sink) : sink_(std::move(sink)) {}

// The spdlog logger first (it refers to the sink), then the sink: its destructor writes
// what is still waiting and joins its thread.
logger::~logger() {
  sink_.reset();
  batch_.reset();
}

void logger::flush() const {
  if (batch_)
    batch_->drain();
  else
    sink_->flush();
}

std::size_t logger::dropped() const { return batch_ ? batch_->dropped() : 0; }

void logger::event(spdlog::level::level_enum lvl, std::string_view name, std::initializer_list<field> fields) const {
  write(lvl, name, fields, {});
}

void logger::event(spdlog::level::level_enum lvl, std::string_view name, const request_summary& about,
                   std::initializer_list<field> fields) const {
  write(lvl, name,
        {{"correlation_id", about.correlation_id},
         {"dependency", about.dependency},
         {"method", about.method.empty() ? std::nullopt : std::optional(about.method)},
         {"path", about.path.empty() ? std::nullopt : std::optional(about.path)}},
        fields);
}

void logger::write(spdlog::level::level_enum lvl, std::string_view name, std::initializer_list<field> first,
                   std::initializer_list<field> then) const {
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
  auto const append = [&line](const field& f) {
    if (std::holds_alternative<std::monostate>(f.value)) return;
    line += ',';
    append_json_string(line, f.key);
    line += ':';
    std::visit(
        [&](auto const& v) {
          using T = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<T, std::string_view>)
            append_json_string(line, v);
          else if constexpr (std::is_same_v<T, bool>)
            line += v ? "true" : "false";
          else if constexpr (std::is_same_v<T, std::monostate>)
            return;
          else
            line += std::to_string(v);
        },
        f.value);
  };
  for (auto const& f : first) append(f);
  for (auto const& f : then) append(f);
  line += '}';
  sink_->log(lvl, spdlog::string_view_t(line));
}

}  // namespace rebound::observe
