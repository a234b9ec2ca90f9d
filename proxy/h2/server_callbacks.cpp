#include "proxy/h2/server_state.hpp"

// What nghttp2 reports to a server connection as it reads frames: a stream's head field by
// field, its body, its end, and its close. nghttp2 fixes these signatures.
namespace rebound::h2::detail {

int server_state::on_begin_headers(nghttp2_session* session, const nghttp2_frame* frame, void* user) {
  if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) return 0;
  auto& st = self(user);
  if (st.answers_ && st.answers_->full()) {
    // The client has not taken the answers it already has: no new stream until it does. Not
    // processed, so the client may send it again (RFC 9113 8.7); its frames find no stream.
    nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, frame->hd.stream_id, NGHTTP2_REFUSED_STREAM);
    return 0;
  }
  st.streams_.emplace(frame->hd.stream_id, std::make_shared<server_stream>(frame->hd.stream_id));
  ++st.streams_opened_;
  st.set_idle();
  return 0;
}

int server_state::on_header(nghttp2_session* session, const nghttp2_frame* frame, const std::uint8_t* name,
                            std::size_t namelen, const std::uint8_t* value, std::size_t valuelen, std::uint8_t,
                            void* user) {
  auto& st = self(user);
  auto ss = st.find(frame->hd.stream_id);
  if (!ss || frame->hd.type != NGHTTP2_HEADERS) return 0;
  // RFC 9113 section 6.5.2 counts 32 bytes of overhead per field.
  ss->header_bytes += namelen + valuelen + 32;
  if (frame->headers.cat == NGHTTP2_HCAT_REQUEST &&
      std::string_view(reinterpret_cast<const char*>(name), namelen) == "content-type" &&
      std::string_view(reinterpret_cast<const char*>(value), valuelen).starts_with("application/grpc"))
    ss->grpc = true;  // noted even when the head is too large to keep: its refusal is a gRPC one
  if (ss->header_bytes > header_bomb_factor * st.limits_.max_header_list) {
    // Decoding the rest of the block would cost what the attacker wants it to: stop here.
    nghttp2_session_terminate_session(session, NGHTTP2_ENHANCE_YOUR_CALM);
    return NGHTTP2_ERR_CALLBACK_FAILURE;
  }
  if (ss->header_bytes > st.limits_.max_header_list) {
    ss->head_too_large = true;
    ss->request = {};
    return 0;
  }
  if (ss->head_too_large) return 0;
  auto& to = frame->headers.cat == NGHTTP2_HCAT_REQUEST ? ss->request.head : ss->request.trailers;
  to.push_back(detail::make_field(name, namelen, value, valuelen));
  return 0;
}

int server_state::on_data_chunk(nghttp2_session* session, std::uint8_t, std::int32_t stream_id,
                                const std::uint8_t* data, std::size_t len, void* user) {
  auto& st = self(user);
  auto ss = st.find(stream_id);
  if (ss && ss->streaming) {
    ss->request_pipe->append(data, len);  // credited as the upstream side takes it
    return 0;
  }
  // Held whole (bounded by max_request_body): the stream gets its credit at once, so one
  // body may reach that bound; the connection gets it back only when the body is let go,
  // so all the bodies one connection holds stay within connection_buffer.
  if (!ss || ss->body_too_large || ss->answered) {
    nghttp2_session_consume(session, stream_id, len);  // not kept
    return 0;
  }
  nghttp2_session_consume_stream(session, stream_id, len);
  ss->held += len;
  if (ss->request.body.size() + len > st.limits_.max_request_body) {
    ss->body_too_large = true;
    ss->refused_early = true;
    ss->request.body = std::string();
    st.release_held(*ss);
    ss->response =
        st.refusal(*ss, stream_refusal::body_too_large, "the request message is larger than limits.max_request_body");
    st.answer(*ss);
    return 0;
  }
  ss->request.body.append(reinterpret_cast<const char*>(data), len);
  return 0;
}

int server_state::on_frame_recv(nghttp2_session* session, const nghttp2_frame* frame, void* user) {
  if (frame->hd.type == NGHTTP2_RST_STREAM) {
    auto& st = self(user);
    auto ss = st.find(frame->hd.stream_id);
    if (ss && !ss->answered) ++st.premature_resets_;
    if (st.streams_opened_ >= reset_window_streams && st.premature_resets_ * 2 >= st.streams_opened_)
      nghttp2_session_terminate_session(session, NGHTTP2_ENHANCE_YOUR_CALM);
    return 0;
  }
  if (frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) return 0;
  auto& st = self(user);
  auto ss = st.find(frame->hd.stream_id);
  if (!ss) return 0;
  if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST && !ss->head_too_large) {
    try {
      ss->handler = st.handler_.at_head(ss->request.head);
    } catch (...) {
      // nghttp2 is C: nothing may unwind through it. A head no handler took is answered 502.
    }
    if (ss->handler.stream) st.start_stream(*ss);
  }
  if (!(frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) return 0;
  if (ss->streaming)
    ss->request_pipe->end(std::move(ss->request.trailers));
  else
    st.request_ended(*ss);
  return 0;
}

int server_state::on_frame_send(nghttp2_session* session, const nghttp2_frame* frame, void* user) {
  if (frame->hd.type != NGHTTP2_HEADERS || !(frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) return 0;
  auto ss = self(user).find(frame->hd.stream_id);
  // A 413 or 408 answered before the request's end: the rest of its body is not wanted
  // (RFC 9113 section 8.1 allows RST_STREAM NO_ERROR after a complete response).
  if (ss && ss->refused_early && !ss->request_complete)
    nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, ss->id, NGHTTP2_NO_ERROR);
  return 0;
}

int server_state::on_stream_close(nghttp2_session*, std::int32_t stream_id, std::uint32_t, void* user) {
  auto& st = self(user);
  auto it = st.streams_.find(stream_id);
  if (it == st.streams_.end()) return 0;
  auto ss = std::move(it->second);
  st.streams_.erase(it);
  ss->closed = true;
  ss->source.body = nullptr;
  st.release_held(*ss);
  st.detach_pipes(*ss);
  ss->cancel.emit(net::cancellation_type::terminal);
  st.last_activity_ = clock::now();
  st.set_idle();
  return 0;
}

}  // namespace rebound::h2::detail
