// writeVideo: RGB frames as H.264 through FFmpeg, written atomically.
#include "taehv/video/video_file.h"

extern "C" {
#include <libavutil/opt.h>
}

#include <unistd.h>

#include <cerrno>
#include <memory>
#include <optional>
#include <vector>

#include "av_handles.h"
#include "taehv/model/output_file.h"

namespace taehv::video {
namespace {

struct OutputFree {
  void operator()(AVFormatContext* c) const { avformat_free_context(c); }
};
struct AvioFree {
  void operator()(AVIOContext* io) const {
    av_freep(&io->buffer);
    avio_context_free(&io);
  }
};

// The frame rates H264Writer takes. Measured with FFmpeg 5.1 (12 and 120 frames of testsrc): MP4 and MOV lose
// frames when each lasts an hour (1/3600 fps: 10 of 12 read back; 1/3000 and faster read back whole), and time
// offsets of B-frames overflow (32 bits) when a rate's terms are near 2^30 (1073741823/1073741822 failed with
// testsrc, passed with other content); Matroska keeps times in milliseconds (1000000 fps read back as 1000). One
// rule for every container: at most kSlowestFrameSeconds a frame (a margin of 5), at most kFastestFrameRate, and
// terms beyond kMaxFrameRateTerm written as the nearest fraction within it.
constexpr int64_t kSlowestFrameSeconds = 600;
constexpr int64_t kFastestFrameRate = 1000;
constexpr int kMaxFrameRateTerm = 1 << 20;

std::string rateText(FrameRate rate) {
  return rate.den == 1 ? std::to_string(rate.num) : std::to_string(rate.num) + "/" + std::to_string(rate.den);
}

// avio_alloc_context's write callback takes a const buffer from FFmpeg 7 (libavformat 61) on.
#if LIBAVFORMAT_VERSION_MAJOR >= 61
using AvioBuffer = const uint8_t*;
#else
using AvioBuffer = uint8_t*;
#endif

// The muxer FFmpeg picks for `path`'s name. One that opens files of its own (AVFMT_NOFILE: image sequences, HLS,
// DASH, segment, tee) is refused: it would ignore the temporary file writeFileAtomically hands out, write the
// target and files beside it directly, and leave them behind on failure.
const AVOutputFormat* fileMuxer(const std::string& path) {
  const AVOutputFormat* muxer = av_guess_format(nullptr, path.c_str(), nullptr);
  if (muxer == nullptr) throw VideoError(path + ": FFmpeg knows no container for this file name (use .mp4 or .mkv)");
  if ((muxer->flags & AVFMT_NOFILE) != 0) {
    throw VideoError(path + ": FFmpeg's " + muxer->name + " muxer writes files of its own, which cannot be written "
                     "to a temporary file and renamed; use .mp4 or .mkv");
  }
  return muxer;
}

// Encodes to the file descriptor writeFileAtomically gives, through a seekable AVIOContext (MP4 seeks back to
// finish its header). Throws VideoError for encoder failures; returns false with errno set when a write failed.
class H264Writer {
 public:
  H264Writer(const std::string& path, const AVOutputFormat* muxer, int fd) : path_(path), muxer_(muxer), fd_(fd) {}

  bool write(int w, int h, FrameRate rate, const FrameSource& next) {
    AVFormatContext* raw = nullptr;
    if (avformat_alloc_output_context2(&raw, muxer_, nullptr, nullptr) < 0 || raw == nullptr) {
      throw VideoError(path_ + ": cannot set up FFmpeg's " + muxer_->name + " muxer");
    }
    std::unique_ptr<AVFormatContext, OutputFree> format(raw);
    const AVCodec* encoder = avcodec_find_encoder_by_name("libx264");
    if (encoder == nullptr) encoder = avcodec_find_encoder(AV_CODEC_ID_H264);
    if (encoder == nullptr) throw VideoError("this FFmpeg has no H.264 encoder (libx264): cannot write " + path_);
    CodecPtr codec(avcodec_alloc_context3(encoder));
    codec->width = w;
    codec->height = h;
    codec->pix_fmt = AV_PIX_FMT_YUV420P;
    codec->time_base = AVRational{rate.den, rate.num};
    codec->framerate = AVRational{rate.num, rate.den};
    if (format->oformat->flags & AVFMT_GLOBALHEADER) codec->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
    av_opt_set(codec->priv_data, "crf", "18", 0);
    av_opt_set(codec->priv_data, "preset", "medium", 0);
    if (const int rc = avcodec_open2(codec.get(), encoder, nullptr); rc < 0) {
      throw VideoError(path_ + ": cannot open the " + encoder->name + " encoder: " + avFailure(rc));
    }
    AVStream* stream = avformat_new_stream(format.get(), nullptr);
    if (stream == nullptr || avcodec_parameters_from_context(stream->codecpar, codec.get()) < 0) {
      throw VideoError(path_ + ": cannot add a video stream");
    }
    stream->time_base = codec->time_base;
    stream->avg_frame_rate = codec->framerate;
    stream->r_frame_rate = codec->framerate;

    constexpr int kBufferBytes = 1 << 16;
    auto* buffer = static_cast<unsigned char*>(av_malloc(kBufferBytes));
    std::unique_ptr<AVIOContext, AvioFree> io(
        avio_alloc_context(buffer, kBufferBytes, 1, this, nullptr, &H264Writer::writePacket, &H264Writer::seek));
    format->pb = io.get();
    format->flags |= AVFMT_FLAG_CUSTOM_IO;
    check(avformat_write_header(format.get(), nullptr), "writing the header");

    SwsPtr sws(sws_getContext(w, h, AV_PIX_FMT_RGB24, w, h, AV_PIX_FMT_YUV420P,
                                                            SWS_BICUBIC | SWS_ACCURATE_RND, nullptr, nullptr, nullptr));
    FramePtr frame(av_frame_alloc());
    frame->format = AV_PIX_FMT_YUV420P;
    frame->width = w;
    frame->height = h;
    check(av_frame_get_buffer(frame.get(), 0), "allocating a frame");
    // swscale reads whole vectors past the end of a row: each frame goes through an aligned, padded copy.
    const FramePtr padded = allocRgbFrame(w, h);
    PacketPtr packet(av_packet_alloc());
    for (int64_t t = 0;; ++t) {
      const std::optional<torch::Tensor> rgb = next();
      AVFrame* in = nullptr;
      if (rgb) {
        TORCH_CHECK(rgb->dim() == 3 && rgb->size(0) == h && rgb->size(1) == w && rgb->size(2) == 3 &&
                        rgb->scalar_type() == torch::kUInt8,
                    "writeVideo: frame ", t, " is ", rgb->sizes(), ", not (", h, ", ", w, ", 3) uint8");
        check(av_frame_make_writable(frame.get()), "allocating a frame");
        const torch::Tensor pixels = rgb->contiguous();
        av_image_copy_plane(padded->data[0], padded->linesize[0], pixels.data_ptr<uint8_t>(), w * 3, w * 3, h);
        sws_scale(sws.get(), padded->data, padded->linesize, 0, h, frame->data, frame->linesize);
        frame->pts = t;
        in = frame.get();
      } else if (t == 0) {
        throw VideoError(path_ + ": no frames to write");
      }
      check(avcodec_send_frame(codec.get(), in), "encoding");  // in == nullptr: flush
      while (true) {
        const int rc = avcodec_receive_packet(codec.get(), packet.get());
        if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF) break;
        check(rc, "encoding");
        av_packet_rescale_ts(packet.get(), codec->time_base, stream->time_base);
        packet->stream_index = stream->index;
        check(av_interleaved_write_frame(format.get(), packet.get()), "writing a packet");
        if (write_errno_ != 0) break;
      }
      if (write_errno_ != 0 || in == nullptr) break;
    }
    if (write_errno_ == 0) check(av_write_trailer(format.get()), "writing the trailer");
    avio_flush(io.get());
    if (write_errno_ != 0) errno = write_errno_;
    return write_errno_ == 0;
  }

 private:
  // A failed write of the file itself (a full disk) is reported by writeFileAtomically with the free space; any
  // other failure is the encoder's.
  void check(int rc, const char* what) const {
    if (rc < 0 && write_errno_ == 0) throw VideoError(path_ + ": " + what + " failed: " + avFailure(rc));
  }

  static int writePacket(void* self_raw, AvioBuffer data, int size) {
    auto* self = static_cast<H264Writer*>(self_raw);
    if (self->write_errno_ != 0) return AVERROR(self->write_errno_);
    if (!writeAllBytes(self->fd_, data, static_cast<size_t>(size))) {
      self->write_errno_ = errno != 0 ? errno : EIO;
      return AVERROR(self->write_errno_);
    }
    return size;
  }

  static int64_t seek(void* self_raw, int64_t offset, int whence) {
    auto* self = static_cast<H264Writer*>(self_raw);
    if (whence == AVSEEK_SIZE) {
      const off_t here = ::lseek(self->fd_, 0, SEEK_CUR);
      const off_t end = ::lseek(self->fd_, 0, SEEK_END);
      ::lseek(self->fd_, here, SEEK_SET);
      return end;
    }
    const off_t at = ::lseek(self->fd_, offset, whence & ~AVSEEK_FORCE);
    return at < 0 ? AVERROR(errno) : at;
  }

  std::string path_;
  const AVOutputFormat* muxer_;
  int fd_;
  int write_errno_ = 0;
};

}  // namespace

std::string frameRateProblem(FrameRate rate) {
  if (rate.num <= 0 || rate.den <= 0) return "no frame rate";
  if (rate.den > rate.num * kSlowestFrameSeconds || rate.num > rate.den * kFastestFrameRate) {
    return "a frame rate of " + rateText(rate) + " fps cannot be written: H.264 files take from one frame every ten " +
           "minutes (1/600 fps) to a thousand frames a second";
  }
  return "";
}

void writeVideo(const std::string& path, int64_t width, int64_t height, FrameRate rate, const FrameSource& next) {
  if (width <= 0 || height <= 0 || height % 2 != 0 || width % 2 != 0) {
    throw VideoError(path + ": H.264 (4:2:0) needs an even width and height, the frames are " + std::to_string(width) +
                     "x" + std::to_string(height));
  }
  if (const std::string why = frameRateProblem(rate); !why.empty()) throw VideoError(path + ": " + why);
  if (!isVideoFileName(path)) {
    throw VideoError(path + ": not a video file name (" + videoFileExtensionList() + "; H.264 in .mp4 or .mkv)");
  }
  // 30000/1001 stays exact; a rate such as 2147483647/2147483000 becomes the nearest fraction of terms up to 2^20
  // (relative difference below 1e-6), which every container stores.
  FrameRate written;
  av_reduce(&written.num, &written.den, rate.num, rate.den, kMaxFrameRateTerm);
  silenceAvLog();
  const AVOutputFormat* muxer = fileMuxer(path);  // before any file is made
  writeFileAtomically(path, [&](int fd) {
    return H264Writer(path, muxer, fd).write(static_cast<int>(width), static_cast<int>(height), written, next);
  });
}

void writeVideo(const std::string& path, const torch::Tensor& frames, FrameRate rate) {
  TORCH_CHECK(frames.dim() == 4 && frames.size(3) == 3 && frames.scalar_type() == torch::kUInt8 && frames.size(0) >= 1,
              "writeVideo takes (T, H, W, 3) uint8 frames, got ", frames.sizes());
  int64_t t = 0;
  writeVideo(path, frames.size(2), frames.size(1), rate, [&]() -> std::optional<torch::Tensor> {
    if (t == frames.size(0)) return std::nullopt;
    return frames[t++];
  });
}

}  // namespace taehv::video
