#pragma once
/** A body on its way from one HTTP/2 stream to another while it still arrives: a streaming
    gRPC call's messages, relayed between the client's stream and the upstream's. The
    producing session appends what it receives; the consuming session's DATA source reads it
    out. Back-pressure is HTTP/2's own: the producer's session runs without automatic
    WINDOW_UPDATEs and gives credit back (`on_consumed`) only for bytes the consumer has
    taken, so a slow reader on one side slows the writer on the other, and what waits here is
    bounded by one stream window (plus what is kept for a replay, below).

    A request body may be sent again (a retry before the upstream answered) while every byte
    of it is still kept: up to `keep_limit` bytes are, until `stop_keeping()`.

    Both sessions of one call run on one worker's thread, so nothing here locks. Each side
    sets its hooks when it attaches and clears them when its stream closes, so a pipe that
    outlives one side never calls into it. */
#include "proxy/h2/message.hpp"

#include <cstddef>
#include <cstdint>
#include <functional>

namespace rebound::h2 {

class body_pipe {
 public:
  explicit body_pipe(std::size_t keep_limit = 0) : keep_limit_(keep_limit), keeping_(keep_limit > 0) {}

  // The producer's side.
  void append(const std::uint8_t* data, std::size_t n);
  /// The body is complete; `trailers` (possibly none) follow it.
  void end(fields trailers);
  /// The producer's stream failed: the consumer resets its stream.
  void fail();
  /// Set by the producer: the consumer took `n` more bytes (credit to give back).
  std::function<void(std::size_t)> on_consumed;
  /// Set by the producer: the consumer is gone; nothing more will be read.
  std::function<void()> on_abandoned;

  // The consumer's side.
  /// Copies up to `max` bytes out; 0 with `!ended()` means wait for `on_data`.
  std::size_t read(std::uint8_t* out, std::size_t max);
  /// Everything was read and the producer ended the body.
  bool drained() const { return ended_ && offset_ == buf_.size(); }
  bool ended() const { return ended_; }
  bool failed() const { return failed_; }
  bool abandoned() const { return abandoned_; }
  const fields& trailers() const { return trailers_; }
  /// What the consumer ends its stream with when the body fails after its head went out (a
  /// gRPC status); empty: the consumer resets its stream instead.
  fields trailers_on_failure;
  /// The consumer stops reading for good (its stream closed, or the call is over).
  void abandon();
  /// Set by the consumer: data, the end, or a failure arrived.
  std::function<void()> on_data;
  /// Which consumer set `on_data`: a stream that ends clears the hook only if it is still its
  /// own (a retry's new stream may have taken the pipe over).
  const void* consumer = nullptr;

  /// Reading starts again at the first byte, for a new attempt; false when some are no
  /// longer kept. Bytes read again are not credited twice.
  bool rewind();
  /// Keeps up to `limit` bytes for a replay (before anything is read or freed).
  void keep_up_to(std::size_t limit) {
    keep_limit_ = limit;
    keeping_ = base_ == 0 && total() <= limit && limit > 0;
  }
  /// Whether every byte appended so far is still here to be sent again.
  bool replayable() const { return keeping_; }
  /// No replay will be needed: what has been read may be freed.
  void stop_keeping();
  /// Bytes appended so far.
  std::uint64_t total() const { return base_ + buf_.size(); }
  /// Bytes the consumer has read (or let go of) so far.
  std::uint64_t taken() const { return base_ + offset_; }
  /// Whether the consumer has something still to send: bytes, or the body's end.
  bool owes_consumer() const { return offset_ < buf_.size() || ended_ || failed_; }

  /** The producer's stream is gone (its session must not be called again): its hooks are
      cleared, a body not ended fails, and the bytes it has not been credited for yet are
      returned, for the caller to give back at connection level. */
  std::uint64_t detach_producer();

 private:
  void compact();

  std::string buf_;           ///< from absolute position base_
  std::size_t offset_ = 0;    ///< the consumer's position in buf_
  std::uint64_t base_ = 0;    ///< bytes freed before buf_
  std::uint64_t credited_ = 0;  ///< absolute position up to which on_consumed was told
  std::size_t keep_limit_;
  bool keeping_;
  bool ended_ = false;
  bool failed_ = false;
  bool abandoned_ = false;
  fields trailers_;
};

}  // namespace rebound::h2
