// The one FFmpeg decoder: VideoReader (encode/decode/roundtrip through readVideo, and the training data's file
// source) and the video file-name rule.
#include <algorithm>
#include <cctype>
#include <utility>

#include "av_handles.h"
#include "taehv/files/input_file.h"
#include "taehv/video/video_file.h"

namespace taehv::video {

struct VideoReader::Stream {
  InputPtr format;
  const AVCodec* decoder = nullptr;
  int index = -1;
  AVStream* stream = nullptr;
  bool consumed = false;  // read() ran: the packets are gone
};

namespace {

int swsFlags(RgbConversion conversion) {
  return conversion == RgbConversion::kAccurate ? SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT : SWS_BILINEAR;
}

// Takes the frames the decoder has ready, keeps the selected ones as RGB. One object per read.
class FrameTaker {
 public:
  FrameTaker(const std::string& path, AVCodecContext* codec, const FrameSelection& selection,
             RgbConversion conversion, OnDamage on_damage)
      : path_(path),
        codec_(codec),
        selection_(selection),
        sws_flags_(swsFlags(conversion)),
        strict_(on_damage == OnDamage::kFail),
        frame_(av_frame_alloc()) {}

  // Receives every frame the decoder has ready. False when decoding is to stop: the selection is complete, or (kept
  // damage) the decoder failed. Throws VideoError on damage under kFail.
  bool receive() {
    while (true) {
      const int rc = avcodec_receive_frame(codec_, frame_.get());
      if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF) return true;
      if (rc < 0) return damaged("corrupt video data after " + count() + ": " + avError(rc), avError(rc));
      const int64_t index = decoded_++;
      if (index < selection_.start || (index - selection_.start) % selection_.stride != 0) continue;
      const int w = frame_->width, h = frame_->height;
      if (w <= 0 || h <= 0) continue;
      if (!frames_.empty() && (w != frames_.front().size(1) || h != frames_.front().size(0))) {
        if (!strict_) continue;  // kept damage: only frames of the first size
        throw VideoError(path_ + ": the frame size changes mid-stream (" + std::to_string(frames_.front().size(1)) +
                         "x" + std::to_string(frames_.front().size(0)) + " to " + std::to_string(w) + "x" +
                         std::to_string(h) + " at frame " + std::to_string(frames_.size()) +
                         "), which is not supported");
      }
      sws_.reset(sws_getCachedContext(sws_.release(), w, h, static_cast<AVPixelFormat>(frame_->format), w, h,
                                      AV_PIX_FMT_RGB24, sws_flags_, nullptr, nullptr, nullptr));
      if (!sws_) return damaged("cannot convert its pixel format to RGB", "cannot convert its pixel format to RGB");
      auto rgb = torch::empty({h, w, 3}, torch::kUInt8);
      uint8_t* dst[4] = {rgb.data_ptr<uint8_t>(), nullptr, nullptr, nullptr};
      int dst_stride[4] = {w * 3, 0, 0, 0};
      sws_scale(sws_.get(), frame_->data, frame_->linesize, 0, h, dst, dst_stride);
      frames_.push_back(std::move(rgb));
      if (selection_.count >= 0 && static_cast<int64_t>(frames_.size()) >= selection_.count) return false;
    }
  }

  // Damage in the data (a packet the decoder refuses): thrown under kFail; under kKeepDecoded the frames so far are
  // the result (the caller stops reading and drains the decoder), or it is an error when there are none.
  void damagedData(const std::string& what) const {
    if (strict_ || frames_.empty()) throw VideoError(path_ + ": " + what);
  }

  std::string count() const { return std::to_string(frames_.size()) + " frame" + (frames_.size() == 1 ? "" : "s"); }
  int64_t decoded() const { return decoded_; }
  const std::string& failure() const { return failure_; }
  std::vector<torch::Tensor>& frames() { return frames_; }

 private:
  // The decoder failed: thrown under kFail; under kKeepDecoded decoding stops with the frames so far.
  bool damaged(const std::string& message, const std::string& reason) {
    if (strict_) throw VideoError(path_ + ": " + message);
    failure_ = reason;
    return false;
  }

  std::string path_;
  AVCodecContext* codec_;
  FrameSelection selection_;
  int sws_flags_;
  bool strict_;
  FramePtr frame_;
  SwsPtr sws_;
  std::vector<torch::Tensor> frames_;
  int64_t decoded_ = 0;  // frames the decoder returned, selected or not
  std::string failure_;  // why a kKeepDecoded read stopped early
};

}  // namespace

VideoReader::VideoReader(const std::string& path) : path_(path), stream_(std::make_unique<Stream>()) {
  av_log_set_level(AV_LOG_QUIET);
  // FFmpeg opens the file by name: its type is checked first (a FIFO would block the open, a device never ends).
  if (Status regular = files::checkInputFile(path, "", files::Role::kOther); !regular.ok()) {
    throw VideoError(regular.error);
  }
  AVFormatContext* raw = nullptr;
  if (const int rc = avformat_open_input(&raw, path.c_str(), nullptr, nullptr); rc < 0) {
    throw VideoError(path + ": cannot read it as a video: " + avError(rc));
  }
  stream_->format.reset(raw);
  AVFormatContext* format = stream_->format.get();
  if (const int rc = avformat_find_stream_info(format, nullptr); rc < 0) {
    throw VideoError(path + ": cannot read its stream information: " + avError(rc));
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

std::vector<torch::Tensor> VideoReader::read(const FrameSelection& selection, RgbConversion conversion,
                                             OnDamage on_damage) {
  TORCH_CHECK(selection.start >= 0 && selection.stride >= 1, "VideoReader::read: start ", selection.start,
              ", stride ", selection.stride);
  TORCH_CHECK(selection.count == -1 || selection.count >= 1, "VideoReader::read: count ", selection.count);
  TORCH_CHECK(!stream_->consumed, "VideoReader::read: one read per reader");
  stream_->consumed = true;
  const bool strict = on_damage == OnDamage::kFail;
  AVFormatContext* format = stream_->format.get();
  CodecPtr codec(avcodec_alloc_context3(stream_->decoder));
  if (!codec || avcodec_parameters_to_context(codec.get(), stream_->stream->codecpar) < 0) {
    throw VideoError(path_ + ": bad codec parameters in its video stream");
  }
  codec->thread_count = 1;
  if (strict) codec->err_recognition |= AV_EF_EXPLODE;  // a damaged packet is an error, not a concealed frame
  if (const int rc = avcodec_open2(codec.get(), stream_->decoder, nullptr); rc < 0) {
    throw VideoError(path_ + ": cannot open the " + stream_->decoder->name + " decoder: " + avError(rc));
  }
  FrameTaker taker(path_, codec.get(), selection, conversion, on_damage);
  PacketPtr packet(av_packet_alloc());
  bool more = true;  // false: the selection is complete or the decoder failed; nothing is left to drain
  while (more) {
    const int rc = av_read_frame(format, packet.get());
    if (rc == AVERROR_EOF) break;
    if (rc < 0) {  // the file ends early or cannot be read on
      if (strict) throw VideoError(path_ + ": truncated or unreadable after " + taker.count() + ": " + avError(rc));
      break;
    }
    if (packet->stream_index != stream_->index) {
      av_packet_unref(packet.get());
      continue;
    }
    const bool flagged = strict && (packet->flags & AV_PKT_FLAG_CORRUPT) != 0;
    const int sent = avcodec_send_packet(codec.get(), packet.get());
    av_packet_unref(packet.get());
    if (flagged || (sent < 0 && sent != AVERROR(EAGAIN))) {
      taker.damagedData("corrupt or truncated video data after " + taker.count() +
                        (flagged ? std::string() : ": " + avError(sent)));
      break;
    }
    more = taker.receive();
  }
  if (more) {
    avcodec_send_packet(codec.get(), nullptr);  // drain the decoder's delayed frames
    taker.receive();
  }

  std::vector<torch::Tensor>& frames = taker.frames();
  if (frames.empty()) {
    throw VideoError(path_ + ": its video stream has no frames" +
                     (selection.start > 0 ? " from frame " + std::to_string(selection.start) + " on" : std::string()) +
                     (taker.failure().empty() ? std::string() : " (" + taker.failure() + ")"));
  }
  const int64_t announced = stream_->stream->nb_frames;
  if (strict && selection.count < 0 && announced > 0 && taker.decoded() < announced) {
    throw VideoError(path_ + ": truncated: " + std::to_string(taker.decoded()) + " frame" +
                     (taker.decoded() == 1 ? "" : "s") + " decoded of the " + std::to_string(announced) +
                     " its header announces");
  }
  return std::move(frames);
}

Video readVideo(const std::string& path) {
  VideoReader reader(path);
  const FrameRate rate = reader.rate();
  std::vector<torch::Tensor> frames = reader.read({}, RgbConversion::kAccurate, OnDamage::kFail);
  if (rate.num <= 0) throw VideoError(path + ": its video stream has no frame rate");
  return {torch::stack(frames), rate};
}

bool isVideoFileName(const std::string& path) {
  const std::string::size_type dot = path.rfind('.');
  if (dot == std::string::npos || path.find('/', dot) != std::string::npos) return false;
  std::string extension = path.substr(dot);
  std::transform(extension.begin(), extension.end(), extension.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return std::any_of(kVideoFileExtensions.begin(), kVideoFileExtensions.end(),
                     [&](const char* known) { return extension == known; });
}

std::string videoFileExtensionList() {
  std::string out;
  for (const char* extension : kVideoFileExtensions) {
    if (!out.empty()) out += ' ';
    out += extension;
  }
  return out;
}

}  // namespace taehv::video
