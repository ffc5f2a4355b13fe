// Owners of FFmpeg's objects (unique_ptr deleters) and its error text, for taehv::video's reader and writer (the
// only code that calls libav*). Includes FFmpeg's headers; private to trainer/video.
#pragma once

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/imgutils.h>
#include <libswscale/swscale.h>
}

#include <cstdarg>
#include <cstdio>
#include <memory>
#include <new>
#include <string>

namespace taehv::video {

/// av_strerror's text for an AVERROR code.
inline std::string avError(int code) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {0};
  av_strerror(code, buf, sizeof buf);
  return buf;
}

/// The last error FFmpeg logged on this thread since avFailure() took one: its log is kept here, never printed.
inline std::string& avLoggedError() {
  static thread_local std::string line;
  return line;
}

/// FFmpeg's log callback: nothing is printed (the reader and writer report through VideoError); the text of an
/// error-level line is kept for avFailure().
inline void keepAvLoggedError(void* /*context*/, int level, const char* format, va_list args) {
  if (level > AV_LOG_ERROR) return;
  char buf[512];
  std::vsnprintf(buf, sizeof buf, format, args);
  std::string line = buf;
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
  if (!line.empty()) avLoggedError() = line;
}

/// Routes FFmpeg's log to keepAvLoggedError (once per process is enough; repeating it is harmless).
inline void silenceAvLog() { av_log_set_callback(&keepAvLoggedError); }

/// Why an FFmpeg call failed with `code`: the error FFmpeg logged on this thread since the last avFailure(), which
/// names the cause where the code may not (a 0x0 y4m: "Picture size 0x0 is invalid", returned as EBUSY), else the
/// code's text. Takes the logged line: the next failure starts afresh.
inline std::string avFailure(int code) {
  std::string line;
  line.swap(avLoggedError());
  return line.empty() ? avError(code) : line;
}

struct InputCloser {
  void operator()(AVFormatContext* c) const { avformat_close_input(&c); }
};
struct CodecCloser {
  void operator()(AVCodecContext* c) const { avcodec_free_context(&c); }
};
struct FrameFree {
  void operator()(AVFrame* f) const { av_frame_free(&f); }
};
struct PacketFree {
  void operator()(AVPacket* p) const { av_packet_free(&p); }
};
struct SwsFree {
  void operator()(SwsContext* s) const { sws_freeContext(s); }
};

using InputPtr = std::unique_ptr<AVFormatContext, InputCloser>;  ///< from avformat_open_input
using CodecPtr = std::unique_ptr<AVCodecContext, CodecCloser>;
using FramePtr = std::unique_ptr<AVFrame, FrameFree>;
using PacketPtr = std::unique_ptr<AVPacket, PacketFree>;
using SwsPtr = std::unique_ptr<SwsContext, SwsFree>;

/// An RGB24 frame of w x h whose rows are aligned and padded as swscale's SIMD code needs (it reads and writes
/// whole vectors, past the W * 3 bytes of a row): the one kind of RGB buffer sws_scale is handed, in and out.
/// Throws std::bad_alloc when FFmpeg cannot allocate it.
inline FramePtr allocRgbFrame(int w, int h) {
  FramePtr frame(av_frame_alloc());
  if (!frame) throw std::bad_alloc();
  frame->format = AV_PIX_FMT_RGB24;
  frame->width = w;
  frame->height = h;
  if (av_frame_get_buffer(frame.get(), 0) < 0) throw std::bad_alloc();
  return frame;
}

}  // namespace taehv::video
