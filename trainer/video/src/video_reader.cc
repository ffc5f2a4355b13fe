// The one FFmpeg decoder: VideoReader (encode/decode/roundtrip through readVideo, and the training data's file
// source).
#include <algorithm>
#include <cctype>
#include <optional>
#include <utility>

#include "av_handles.h"
#include "taehv/files/input_file.h"
#include "taehv/video/video_file.h"

namespace taehv::video {

namespace {

int swsFlags(RgbConversion conversion) {
  return conversion == RgbConversion::kAccurate ? SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT : SWS_BILINEAR;
}

// Takes the frames the decoder has ready and gives out the selected ones as RGB, one at a time. One per read.
class FrameTaker {
 public:
  enum class Got {
    kFrame,      // a selected frame
    kNeedInput,  // the decoder wants the next packet
    kEnd,        // the decoder is drained, the selection is complete, or (kept damage) the decoder failed
  };

  FrameTaker(const std::string& path, AVCodecContext* codec, const FrameSelection& selection,
             RgbConversion conversion, OnDamage on_damage)
      : path_(path),
        codec_(codec),
        selection_(selection),
        sws_flags_(swsFlags(conversion)),
        strict_(on_damage == OnDamage::kFail),
        frame_(av_frame_alloc()) {}

  // Receives frames from the decoder until a selected one is converted into `out`. Throws VideoError on damage
  // under kFail.
  Got receive(torch::Tensor& out) {
    if (selection_.count >= 0 && given_ >= selection_.count) return Got::kEnd;
    while (true) {
      const int rc = avcodec_receive_frame(codec_, frame_.get());
      if (rc == AVERROR(EAGAIN)) return Got::kNeedInput;
      if (rc == AVERROR_EOF) return Got::kEnd;
      if (rc < 0) {
        const std::string why = avFailure(rc);
        return damaged("corrupt video data after " + count() + ": " + why, why);
      }
      const int64_t index = decoded_++;
      if (index < selection_.start || (index - selection_.start) % selection_.stride != 0) continue;
      const int w = frame_->width, h = frame_->height;
      if (w <= 0 || h <= 0) continue;
      if (given_ > 0 && (w != rgb_->width || h != rgb_->height)) {
        if (!strict_) continue;  // kept damage: only frames of the first size
        throw VideoError(path_ + ": the frame size changes mid-stream (" + std::to_string(rgb_->width) + "x" +
                         std::to_string(rgb_->height) + " to " + std::to_string(w) + "x" + std::to_string(h) +
                         " at frame " + std::to_string(given_) + "), which is not supported");
      }
      if (!convert(out)) {
        return damaged("cannot convert its pixel format to RGB", "cannot convert its pixel format to RGB");
      }
      ++given_;
      return Got::kFrame;
    }
  }

  // Damage in the data (a packet the decoder refuses): thrown under kFail; under kKeepDecoded the frames so far are
  // the result (the caller stops reading and drains the decoder), or it is an error when there are none.
  void damagedData(const std::string& what) const {
    if (strict_ || given_ == 0) throw VideoError(path_ + ": " + what);
  }

  std::string count() const { return std::to_string(given_) + " frame" + (given_ == 1 ? "" : "s"); }
  int64_t given() const { return given_; }
  int64_t decoded() const { return decoded_; }
  const std::string& failure() const { return failure_; }

 private:
  // frame_ as a new (H, W, 3) uint8 tensor. swscale's SIMD code writes whole vectors, past the end of a row of
  // W * 3 bytes (an 8x8 frame into a 192-byte tensor got 8 bytes written after it: heap corruption at widths 8,
  // 24, 40, 426): it converts into rgb_, whose rows are aligned and padded as swscale needs (av_frame_get_buffer),
  // and the rows are copied out. False when swscale cannot convert this pixel format.
  bool convert(torch::Tensor& out) {
    const int w = frame_->width, h = frame_->height;
    sws_.reset(sws_getCachedContext(sws_.release(), w, h, static_cast<AVPixelFormat>(frame_->format), w, h,
                                    AV_PIX_FMT_RGB24, sws_flags_, nullptr, nullptr, nullptr));
    if (!sws_) return false;
    if (!rgb_) rgb_ = allocRgbFrame(w, h);
    sws_scale(sws_.get(), frame_->data, frame_->linesize, 0, h, rgb_->data, rgb_->linesize);
    out = torch::empty({h, w, 3}, torch::kUInt8);
    av_image_copy_plane(out.data_ptr<uint8_t>(), w * 3, rgb_->data[0], rgb_->linesize[0], w * 3, h);
    return true;
  }

  // The decoder failed: thrown under kFail; under kKeepDecoded decoding ends with the frames so far.
  Got damaged(const std::string& message, const std::string& reason) {
    if (strict_) throw VideoError(path_ + ": " + message);
    failure_ = reason;
    return Got::kEnd;
  }

  std::string path_;
  AVCodecContext* codec_;
  FrameSelection selection_;
  int sws_flags_;
  bool strict_;
  FramePtr frame_;
  SwsPtr sws_;
  FramePtr rgb_;         // swscale's padded output, of the first frame's size
  int64_t decoded_ = 0;  // frames the decoder returned, selected or not
  int64_t given_ = 0;    // selected frames given out
  std::string failure_;  // why a kKeepDecoded read ended early
};

}  // namespace

struct VideoReader::Stream {
  InputPtr format;
  const AVCodec* decoder = nullptr;
  int index = -1;
  AVStream* stream = nullptr;
  // Set by start():
  bool started = false;
  FrameSelection selection;
  bool strict = true;
  CodecPtr codec;
  PacketPtr packet;
  std::unique_ptr<FrameTaker> taker;
  bool draining = false;  // the decoder was sent its end: what it holds comes out, nothing more goes in
  bool ended = false;     // next() said the end: the checks are done
};

bool videoFilesSupported() { return true; }

VideoReader::VideoReader(const std::string& path) : path_(path), stream_(std::make_unique<Stream>()) {
  silenceAvLog();
  avLoggedError().clear();
  // FFmpeg opens the file by name: its type is checked first (a FIFO would block the open, a device never ends).
  if (Status regular = files::checkInputFile(path, "", files::Role::kOther); !regular.ok()) {
    throw VideoError(regular.error);
  }
  AVFormatContext* raw = nullptr;
  if (const int rc = avformat_open_input(&raw, path.c_str(), nullptr, nullptr); rc < 0) {
    throw VideoError(path + ": cannot read it as a video: " + avFailure(rc));
  }
  stream_->format.reset(raw);
  AVFormatContext* format = stream_->format.get();
  if (const int rc = avformat_find_stream_info(format, nullptr); rc < 0) {
    throw VideoError(path + ": cannot read its stream information: " + avFailure(rc));
  }
  stream_->index = av_find_best_stream(format, AVMEDIA_TYPE_VIDEO, -1, -1, &stream_->decoder, 0);
  if (stream_->index == AVERROR_STREAM_NOT_FOUND) {
    throw VideoError(path + ": has no video stream (" + std::to_string(format->nb_streams) + " other stream" +
                     (format->nb_streams == 1 ? "" : "s") + ")");
  }
  if (stream_->index < 0 || stream_->decoder == nullptr) {
    throw VideoError(path + ": no decoder for its video stream in this FFmpeg");
  }
  stream_->stream = format->streams[stream_->index];
}

VideoReader::~VideoReader() = default;

int64_t VideoReader::frameCountEstimate() const {
  const AVStream* stream = stream_->stream;
  int64_t n = stream->nb_frames;
  if (n <= 0 && stream->duration > 0 && stream->avg_frame_rate.num > 0) {
    n = static_cast<int64_t>(static_cast<double>(stream->duration) * av_q2d(stream->time_base) *
                             av_q2d(stream->avg_frame_rate));
  }
  const int64_t file_duration = stream_->format->duration;
  if (n <= 0 && file_duration > 0 && stream->avg_frame_rate.num > 0) {
    n = static_cast<int64_t>(static_cast<double>(file_duration) / AV_TIME_BASE * av_q2d(stream->avg_frame_rate));
  }
  return n;
}

FrameRate VideoReader::rate() const {
  AVRational r = stream_->stream->avg_frame_rate;
  if (r.num <= 0 || r.den <= 0) r = stream_->stream->r_frame_rate;
  if (r.num <= 0 || r.den <= 0) return {};
  return {r.num, r.den};
}

void VideoReader::start(const FrameSelection& selection, RgbConversion conversion, OnDamage on_damage) {
  TORCH_CHECK(selection.start >= 0 && selection.stride >= 1, "VideoReader::start: start ", selection.start,
              ", stride ", selection.stride);
  TORCH_CHECK(selection.count == -1 || selection.count >= 1, "VideoReader::start: count ", selection.count);
  TORCH_CHECK(!stream_->started, "VideoReader::start: one read per reader");
  Stream& s = *stream_;
  s.started = true;
  s.selection = selection;
  s.strict = on_damage == OnDamage::kFail;
  s.codec.reset(avcodec_alloc_context3(s.decoder));
  if (!s.codec || avcodec_parameters_to_context(s.codec.get(), s.stream->codecpar) < 0) {
    throw VideoError(path_ + ": bad codec parameters in its video stream");
  }
  s.codec->thread_count = 1;
  if (s.strict) s.codec->err_recognition |= AV_EF_EXPLODE;  // a damaged packet is an error, not a concealed frame
  avLoggedError().clear();
  if (const int rc = avcodec_open2(s.codec.get(), s.decoder, nullptr); rc < 0) {
    throw VideoError(path_ + ": cannot open the " + s.decoder->name + " decoder: " + avFailure(rc));
  }
  s.taker = std::make_unique<FrameTaker>(path_, s.codec.get(), selection, conversion, on_damage);
  s.packet.reset(av_packet_alloc());
}

std::optional<torch::Tensor> VideoReader::next() {
  TORCH_CHECK(stream_->started, "VideoReader::next: start() first");
  Stream& s = *stream_;
  FrameTaker& taker = *s.taker;
  while (!s.ended) {
    torch::Tensor frame;
    const FrameTaker::Got got = taker.receive(frame);
    if (got == FrameTaker::Got::kFrame) return frame;
    if (got == FrameTaker::Got::kNeedInput && !s.draining) {
      feedPacket();
      continue;
    }
    s.ended = true;  // drained, complete, or failed (kept damage)
    checkEnd();
  }
  return std::nullopt;
}

// Sends the decoder the stream's next packet, or its end (to drain its delayed frames) when the file ends, cannot
// be read on (kept damage) or holds a damaged packet (kept damage, after frames were decoded).
void VideoReader::feedPacket() {
  Stream& s = *stream_;
  FrameTaker& taker = *s.taker;
  while (true) {
    const int rc = av_read_frame(s.format.get(), s.packet.get());
    if (rc < 0 && rc != AVERROR_EOF && s.strict) {  // the file ends early or cannot be read on
      throw VideoError(path_ + ": truncated or unreadable after " + taker.count() + ": " + avFailure(rc));
    }
    if (rc < 0) break;
    if (s.packet->stream_index != s.index) {
      av_packet_unref(s.packet.get());
      continue;
    }
    const bool flagged = s.strict && (s.packet->flags & AV_PKT_FLAG_CORRUPT) != 0;
    const int sent = avcodec_send_packet(s.codec.get(), s.packet.get());
    av_packet_unref(s.packet.get());
    if (!flagged && (sent >= 0 || sent == AVERROR(EAGAIN))) return;
    taker.damagedData("corrupt or truncated video data after " + taker.count() +
                      (flagged ? std::string() : ": " + avFailure(sent)));
    break;
  }
  avcodec_send_packet(s.codec.get(), nullptr);
  s.draining = true;
}

// What the end of a read says about the whole: no frame at all, or (kFail, the whole stream) fewer frames than the
// container announces.
void VideoReader::checkEnd() const {
  const Stream& s = *stream_;
  const FrameTaker& taker = *s.taker;
  if (taker.given() == 0) {
    throw VideoError(path_ + ": its video stream has no frames" +
                     (s.selection.start > 0 ? " from frame " + std::to_string(s.selection.start) + " on"
                                            : std::string()) +
                     (taker.failure().empty() ? std::string() : " (" + taker.failure() + ")"));
  }
  const int64_t announced = s.stream->nb_frames;
  if (s.strict && s.selection.count < 0 && announced > 0 && taker.decoded() < announced) {
    throw VideoError(path_ + ": truncated: " + std::to_string(taker.decoded()) + " frame" +
                     (taker.decoded() == 1 ? "" : "s") + " decoded of the " + std::to_string(announced) +
                     " its header announces");
  }
}

std::vector<torch::Tensor> VideoReader::read(const FrameSelection& selection, RgbConversion conversion,
                                             OnDamage on_damage) {
  start(selection, conversion, on_damage);
  std::vector<torch::Tensor> frames;
  while (std::optional<torch::Tensor> frame = next()) frames.push_back(std::move(*frame));
  return frames;
}

Video readVideo(const std::string& path) {
  VideoReader reader(path);
  const FrameRate rate = reader.rate();
  std::vector<torch::Tensor> frames = reader.read({}, RgbConversion::kAccurate, OnDamage::kFail);
  if (rate.num <= 0) throw VideoError(path + ": its video stream has no frame rate");
  return {torch::stack(frames), rate};
}

}  // namespace taehv::video
