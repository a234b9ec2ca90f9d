#include "proxy/h2/nghttp2_session.hpp"

#include <algorithm>
#include <cstring>
#include <new>

namespace rebound::h2::detail {

namespace {

/// Ends a stream's DATA: the trailers go out as a HEADERS frame that carries END_STREAM.
void end_data(nghttp2_session* session, std::int32_t stream_id, const fields& trailers, std::uint32_t* data_flags) {
  *data_flags |= NGHTTP2_DATA_FLAG_EOF;
  if (trailers.empty()) return;
  auto nv = to_nv(trailers);
  if (nghttp2_submit_trailer(session, stream_id, nv.data(), nv.size()) == 0) *data_flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
}

ssize_t read_body(nghttp2_session* session, std::int32_t stream_id, std::uint8_t* buf, std::size_t length,
                  std::uint32_t* data_flags, nghttp2_data_source* source, void*) {
  auto* src = static_cast<body_source*>(source->ptr);
  if (!src || !src->body) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  auto const& body = *src->body;
  std::size_t const n = std::min(length, body.size() - src->offset);
  if (n > 0) std::memcpy(buf, body.data() + src->offset, n);
  src->offset += n;
  if (src->offset == body.size()) {
    static const fields none;
    end_data(session, stream_id, src->trailers ? *src->trailers : none, data_flags);
  }
  return static_cast<ssize_t>(n);
}

ssize_t read_pipe(nghttp2_session* session, std::int32_t stream_id, std::uint8_t* buf, std::size_t length,
                  std::uint32_t* data_flags, nghttp2_data_source* source, void*) {
  auto* pipe = static_cast<body_pipe*>(source->ptr);
  if (!pipe) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  if (pipe->failed() && pipe->trailers_on_failure.empty()) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  auto const n = pipe->read(buf, length);
  if (pipe->drained()) {
    end_data(session, stream_id, pipe->trailers(), data_flags);
    return static_cast<ssize_t>(n);
  }
  if (n > 0) return static_cast<ssize_t>(n);
  if (pipe->failed()) {
    // What arrived went out first; the stream ends with the status its owner chose.
    end_data(session, stream_id, pipe->trailers_on_failure, data_flags);
    return 0;
  }
  return NGHTTP2_ERR_DEFERRED;
}

}  // namespace

nghttp2_data_provider make_provider(body_pipe& pipe) {
  nghttp2_data_provider p{};
  p.source.ptr = &pipe;
  p.read_callback = &read_pipe;
  return p;
}

option_ptr manual_window_options() {
  nghttp2_option* o = nullptr;
  if (nghttp2_option_new(&o) != 0) throw std::bad_alloc();
  option_ptr owned(o);
  nghttp2_option_set_no_auto_window_update(o, 1);
  return owned;
}

callbacks_ptr new_callbacks() {
  nghttp2_session_callbacks* cbs = nullptr;
  if (nghttp2_session_callbacks_new(&cbs) != 0) throw std::bad_alloc();
  return callbacks_ptr(cbs);
}

std::vector<nghttp2_nv> to_nv(const fields& fs) {
  std::vector<nghttp2_nv> nv;
  nv.reserve(fs.size());
  for (auto const& f : fs)
    nv.push_back({reinterpret_cast<std::uint8_t*>(const_cast<char*>(f.name.data())),
                  reinterpret_cast<std::uint8_t*>(const_cast<char*>(f.value.data())), f.name.size(), f.value.size(),
                  NGHTTP2_NV_FLAG_NONE});
  return nv;
}

nghttp2_data_provider make_provider(body_source& src) {
  nghttp2_data_provider p{};
  p.source.ptr = &src;
  p.read_callback = &read_body;
  return p;
}

}  // namespace rebound::h2::detail
