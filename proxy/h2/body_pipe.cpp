#include "proxy/h2/body_pipe.hpp"

#include <algorithm>
#include <cstring>

namespace rebound::h2 {

void body_pipe::append(const std::uint8_t* data, std::size_t n) {
  if (ended_ || failed_) return;
  buf_.append(reinterpret_cast<const char*>(data), n);
  if (keeping_ && total() > keep_limit_) keeping_ = false;  // too large to send again
  if (abandoned_) {
    // Nobody will read it: credit it at once so the producer's connection does not stall.
    offset_ = buf_.size();
    compact();
  }
  if (on_data) on_data();
}

void body_pipe::end(fields trailers) {
  if (ended_ || failed_) return;
  ended_ = true;
  trailers_ = std::move(trailers);
  if (on_data) on_data();
}

void body_pipe::fail() {
  if (ended_ || failed_) return;
  failed_ = true;
  if (on_data) on_data();
}

std::size_t body_pipe::read(std::uint8_t* out, std::size_t max) {
  std::size_t const n = std::min(max, buf_.size() - offset_);
  if (n > 0) std::memcpy(out, buf_.data() + offset_, n);
  offset_ += n;
  compact();
  return n;
}

void body_pipe::abandon() {
  if (abandoned_) return;
  abandoned_ = true;
  keeping_ = false;
  offset_ = buf_.size();
  compact();
  if (on_abandoned) on_abandoned();
}

std::uint64_t body_pipe::detach_producer() {
  on_consumed = nullptr;
  on_abandoned = nullptr;
  fail();
  auto const owed = total() - credited_;
  credited_ = total();
  return owed;
}

bool body_pipe::rewind() {
  if (!keeping_ || base_ != 0) return false;
  offset_ = 0;
  return true;
}

void body_pipe::stop_keeping() {
  keeping_ = false;
  compact();
}

void body_pipe::compact() {
  auto const position = base_ + offset_;
  if (position > credited_) {
    auto const n = static_cast<std::size_t>(position - credited_);
    credited_ = position;
    if (on_consumed) on_consumed(n);
  }
  if (keeping_ || offset_ == 0) return;
  // Freed in large steps, and only once what was read is at least what is left: erasing
  // from the front at every read would copy the rest each time, quadratic in what is buffered
  // (a client that appends a whole 20 MiB body before sending spent seconds in memmove).
  auto const left = buf_.size() - offset_;
  if (left == 0 || (offset_ >= 64 * 1024 && offset_ >= left)) {
    buf_.erase(0, offset_);
    base_ += offset_;
    offset_ = 0;
  }
}

}  // namespace rebound::h2
