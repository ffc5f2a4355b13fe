// Video decoding through FFmpeg's libav* (Debian's libavformat/libavcodec/libswscale).
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "taehv/train/data.h"
#include "taehv/video/av_handles.h"

namespace taehv::train {

using video::avError;
using video::CodecPtr;
using video::FramePtr;
using video::InputPtr;
using video::PacketPtr;
using video::SwsPtr;

std::vector<torch::Tensor> decodeVideoFrames(const std::string& path, int64_t start, int64_t stride, int64_t frames,
                                             int64_t* total_frames_estimate) {
  av_log_set_level(AV_LOG_QUIET);
  AVFormatContext* raw = nullptr;
  if (int rc = avformat_open_input(&raw, path.c_str(), nullptr, nullptr); rc < 0) {
    throw DataError(path + ": cannot open video: " + avError(rc));
  }
  InputPtr format(raw);
  if (int rc = avformat_find_stream_info(format.get(), nullptr); rc < 0) {
    throw DataError(path + ": cannot read stream info: " + avError(rc));
  }
  const AVCodec* codec = nullptr;
  const int stream_index = av_find_best_stream(format.get(), AVMEDIA_TYPE_VIDEO, -1, -1, &codec, 0);
  if (stream_index < 0 || !codec) throw DataError(path + ": no decodable video stream");
  AVStream* stream = format->streams[stream_index];
  if (total_frames_estimate) {
    int64_t n = stream->nb_frames;
    if (n <= 0 && stream->duration > 0 && stream->avg_frame_rate.num > 0) {
      n = static_cast<int64_t>(static_cast<double>(stream->duration) * av_q2d(stream->time_base) *
                               av_q2d(stream->avg_frame_rate));
    }
    if (n <= 0 && format->duration > 0 && stream->avg_frame_rate.num > 0) {
      n = static_cast<int64_t>(static_cast<double>(format->duration) / AV_TIME_BASE * av_q2d(stream->avg_frame_rate));
    }
    *total_frames_estimate = n;
  }
  std::vector<torch::Tensor> out;
  if (frames <= 0) return out;

  CodecPtr ctx(avcodec_alloc_context3(codec));
  if (!ctx) throw DataError(path + ": out of memory");
  if (avcodec_parameters_to_context(ctx.get(), stream->codecpar) < 0) throw DataError(path + ": bad codec parameters");
  ctx->thread_count = 1;
  if (int rc = avcodec_open2(ctx.get(), codec, nullptr); rc < 0) {
    throw DataError(path + ": cannot open decoder: " + avError(rc));
  }
  FramePtr frame(av_frame_alloc());
  PacketPtr packet(av_packet_alloc());
  SwsPtr sws;
  int64_t index = 0;
  bool failed = false;
  std::string failure;

  auto take = [&]() -> bool {  // consume decoded frames; false when enough
    while (true) {
      const int rc = avcodec_receive_frame(ctx.get(), frame.get());
      if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF) return true;
      if (rc < 0) {
        failed = true;
        failure = avError(rc);
        return false;
      }
      const bool wanted = index >= start && (index - start) % stride == 0;
      ++index;
      if (!wanted) continue;
      const int w = frame->width, h = frame->height;
      if (w <= 0 || h <= 0) continue;
      sws.reset(sws_getCachedContext(sws.release(), w, h, static_cast<AVPixelFormat>(frame->format), w, h,
                                     AV_PIX_FMT_RGB24, SWS_BILINEAR, nullptr, nullptr, nullptr));
      if (!sws) {
        failed = true;
        failure = "cannot convert pixel format";
        return false;
      }
      auto rgb = torch::empty({h, w, 3}, torch::kUInt8);
      uint8_t* dst[4] = {rgb.data_ptr<uint8_t>(), nullptr, nullptr, nullptr};
      int dst_stride[4] = {w * 3, 0, 0, 0};
      sws_scale(sws.get(), frame->data, frame->linesize, 0, h, dst, dst_stride);
      if (!out.empty() && out.front().sizes() != rgb.sizes()) continue;  // resolution change mid-stream
      out.push_back(rgb);
      if (static_cast<int64_t>(out.size()) >= frames) return false;
    }
  };

  bool more = true;
  while (more && av_read_frame(format.get(), packet.get()) >= 0) {
    if (packet->stream_index == stream_index) {
      const int rc = avcodec_send_packet(ctx.get(), packet.get());
      if (rc < 0 && rc != AVERROR(EAGAIN)) {
        av_packet_unref(packet.get());
        if (out.empty()) throw DataError(path + ": corrupt video data: " + avError(rc));
        break;
      }
      more = take();
    }
    av_packet_unref(packet.get());
  }
  if (more) {
    avcodec_send_packet(ctx.get(), nullptr);  // flush
    take();
  }
  if (out.empty()) {
    throw DataError(path + ": no decodable frames" + (failed ? " (" + failure + ")" : std::string()));
  }
  return out;
}

}  // namespace taehv::train
