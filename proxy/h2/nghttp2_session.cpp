#include "proxy/h2/nghttp2_session.hpp"

#include <algorithm>
#include <cstring>
#include <new>

namespace rebound::h2::detail {

namespace {

ssize_t read_body(nghttp2_session* session, std::int32_t stream_id, std::uint8_t* buf, std::size_t length,
                  std::uint32_t* data_flags, nghttp2_data_source* source, void*) {
  auto* src = static_cast<body_source*>(source->ptr);
  if (!src || !src->body) return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  auto const& body = *src->body;
  std::size_t const n = std::min(length, body.size() - src->offset);
  if (n > 0) std::memcpy(buf, body.data() + src->offset, n);
  src->offset += n;
  if (src->offset == body.size()) {
    *data_flags |= NGHTTP2_DATA_FLAG_EOF;
    if (src->trailers && !src->trailers->empty()) {
      auto nv = to_nv(*src->trailers);
      // The END_STREAM then rides on the trailing HEADERS instead of this DATA frame.
      if (nghttp2_submit_trailer(session, stream_id, nv.data(), nv.size()) == 0)
        *data_flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
    }
  }
  return static_cast<ssize_t>(n);
}

}  // namespace

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
