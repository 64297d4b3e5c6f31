#include "preprocess.h"

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstdint>
#include <cstring>

#include <jpeglib.h>
#include <png.h>

namespace deployc {

using nlohmann::json;

namespace {
constexpr int kPrecisionBits = 32 - 8 - 2;  // Pillow's fixed point for 8-bit resampling

// ---- decoding -------------------------------------------------------------------------------------
bool too_large(int width, int height) {
  return static_cast<uint64_t>(width) * static_cast<uint64_t>(height) > 178956970ULL;  // Pillow's bomb limit
}

struct PngReader {
  const std::string* bytes;
  size_t pos;
};

void png_read(png_structp png, png_bytep out, png_size_t n) {
  auto* r = static_cast<PngReader*>(png_get_io_ptr(png));
  if (r->pos + n > r->bytes->size()) png_error(png, "truncated PNG");
  std::memcpy(out, r->bytes->data() + r->pos, n);
  r->pos += n;
}

Failure decode_png(const std::string& bytes, Image& out) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (!info) return {1, "out of memory"};
  std::vector<png_bytep> rows;
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    return {2, "cannot decode the image: broken PNG data"};
  }
  PngReader reader{&bytes, 0};
  png_set_read_fn(png, &reader, png_read);
  png_read_info(png, info);
  const int color = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
  if (depth == 16) png_set_strip_16(png);  // the high byte, as Pillow keeps it
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (color & PNG_COLOR_MASK_ALPHA) png_set_strip_alpha(png);
  if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  out.width = static_cast<int>(png_get_image_width(png, info));
  out.height = static_cast<int>(png_get_image_height(png, info));
  if (too_large(out.width, out.height)) {
    png_destroy_read_struct(&png, &info, nullptr);
    return {2, "the image is too large: " + std::to_string(out.width) + " x " + std::to_string(out.height) + " pixels"};
  }
  if (png_get_rowbytes(png, info) != static_cast<size_t>(out.width) * 3) {
    png_destroy_read_struct(&png, &info, nullptr);
    return {2, "cannot decode the image: unexpected PNG pixel layout"};
  }
  out.rgb.assign(static_cast<size_t>(out.width) * out.height * 3, 0);
  rows.resize(static_cast<size_t>(out.height));
  for (int y = 0; y < out.height; ++y) rows[y] = out.rgb.data() + static_cast<size_t>(y) * out.width * 3;
  png_read_image(png, rows.data());
  png_destroy_read_struct(&png, &info, nullptr);
  return {};
}

struct JpegError {
  jpeg_error_mgr mgr;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void jpeg_fail(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  longjmp(e->jump, 1);
}

// The orientation tag (0x0112) of a JPEG's Exif APP1 segment; 1 when there is none.
int exif_orientation(const std::string& b) {
  size_t pos = 2;
  while (pos + 4 <= b.size() && static_cast<uint8_t>(b[pos]) == 0xFF) {
    const uint8_t marker = static_cast<uint8_t>(b[pos + 1]);
    const size_t len = (static_cast<uint8_t>(b[pos + 2]) << 8) | static_cast<uint8_t>(b[pos + 3]);
    if (marker == 0xDA || len < 2) break;  // start of scan: no more metadata
    const size_t body = pos + 4, end = std::min(b.size(), pos + 2 + len);
    if (marker == 0xE1 && end - body > 14 && b.compare(body, 6, std::string("Exif\0\0", 6)) == 0) {
      const size_t tiff = body + 6;
      const bool little = b[tiff] == 'I';
      auto u16 = [&](size_t at) -> unsigned {
        if (at + 2 > end) return 0;
        unsigned a = static_cast<uint8_t>(b[at]), c = static_cast<uint8_t>(b[at + 1]);
        return little ? a | (c << 8) : (a << 8) | c;
      };
      auto u32 = [&](size_t at) -> size_t { return little ? u16(at) | (static_cast<size_t>(u16(at + 2)) << 16)
                                                          : (static_cast<size_t>(u16(at)) << 16) | u16(at + 2); };
      const size_t ifd = tiff + u32(tiff + 4);
      const unsigned entries = u16(ifd);
      for (unsigned i = 0; i < entries; ++i) {
        const size_t e = ifd + 2 + 12 * i;
        if (e + 12 > end) break;
        if (u16(e) == 0x0112) return static_cast<int>(u16(e + 8));
      }
      return 1;
    }
    pos += 2 + len;
  }
  return 1;
}

// Pillow's ImageOps.exif_transpose for orientations 2-8.
Image orient(const Image& in, int orientation) {
  if (orientation < 2 || orientation > 8) return in;
  const bool swap = orientation >= 5;
  Image out;
  out.height = swap ? in.width : in.height;
  out.width = swap ? in.height : in.width;
  out.rgb.resize(in.rgb.size());
  const int H = in.height, W = in.width;
  for (int y = 0; y < out.height; ++y)
    for (int x = 0; x < out.width; ++x) {
      int sy = y, sx = x;
      switch (orientation) {
        case 2: sx = W - 1 - x; break;                       // mirror left-right
        case 3: sy = H - 1 - y; sx = W - 1 - x; break;       // rotate 180
        case 4: sy = H - 1 - y; break;                       // mirror top-bottom
        case 5: sy = x; sx = y; break;                       // transpose
        case 6: sy = H - 1 - x; sx = y; break;               // rotate 90 clockwise
        case 7: sy = H - 1 - x; sx = W - 1 - y; break;       // transverse
        case 8: sy = x; sx = W - 1 - y; break;               // rotate 90 counter-clockwise
      }
      std::memcpy(&out.rgb[(static_cast<size_t>(y) * out.width + x) * 3], &in.rgb[(static_cast<size_t>(sy) * W + sx) * 3], 3);
    }
  return out;
}

Failure decode_jpeg(const std::string& bytes, Image& out) {
  jpeg_decompress_struct cinfo;
  JpegError err;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_fail;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return {2, std::string("cannot decode the image: ") + err.message};
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
    jpeg_destroy_decompress(&cinfo);
    return {2, "CMYK JPEGs are not supported (convert the image to RGB)"};
  }
  const bool gray = cinfo.jpeg_color_space == JCS_GRAYSCALE;
  cinfo.out_color_space = gray ? JCS_GRAYSCALE : JCS_RGB;
  if (too_large(static_cast<int>(cinfo.image_width), static_cast<int>(cinfo.image_height))) {
    const std::string size = std::to_string(cinfo.image_width) + " x " + std::to_string(cinfo.image_height);
    jpeg_destroy_decompress(&cinfo);
    return {2, "the image is too large: " + size + " pixels"};
  }
  jpeg_start_decompress(&cinfo);
  Image raw;
  raw.width = static_cast<int>(cinfo.output_width);
  raw.height = static_cast<int>(cinfo.output_height);
  raw.rgb.resize(static_cast<size_t>(raw.width) * raw.height * 3);
  std::vector<uint8_t> row(static_cast<size_t>(raw.width) * cinfo.output_components);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW r = row.data();
    const int y = static_cast<int>(cinfo.output_scanline);
    jpeg_read_scanlines(&cinfo, &r, 1);
    uint8_t* dst = &raw.rgb[static_cast<size_t>(y) * raw.width * 3];
    for (int x = 0; x < raw.width; ++x)
      for (int c = 0; c < 3; ++c) dst[x * 3 + c] = gray ? row[x] : row[x * 3 + c];
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  out = orient(raw, exif_orientation(bytes));
  return {};
}

// ---- resampling: Pillow's precompute_coeffs, normalize_coeffs_8bpc and the two passes ---------------
double bilinear(double x) {
  x = x < 0 ? -x : x;
  return x < 1.0 ? 1.0 - x : 0.0;
}

double bicubic(double x) {
  const double a = -0.5;
  x = x < 0 ? -x : x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
  if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
  return 0.0;
}

struct Coefficients {
  int ksize = 0;
  std::vector<int> first, count;
  std::vector<int64_t> fixed;  // out x ksize
};

Coefficients coefficients(int in_size, int out_size, const std::string& filter) {
  const bool cubic = filter == "bicubic";
  const double scale = static_cast<double>(in_size) / out_size;
  const double filterscale = std::max(scale, 1.0);
  const double support = (cubic ? 2.0 : 1.0) * filterscale;
  Coefficients c;
  c.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.first.resize(out_size);
  c.count.resize(out_size);
  c.fixed.assign(static_cast<size_t>(out_size) * c.ksize, 0);
  const double ss = 1.0 / filterscale;
  std::vector<double> w(c.ksize);
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = (xx + 0.5) * scale;
    const int xmin = std::max(static_cast<int>(center - support + 0.5), 0);
    const int xmax = std::min(static_cast<int>(center + support + 0.5), in_size) - xmin;
    double total = 0.0;
    for (int x = 0; x < xmax; ++x) {
      w[x] = cubic ? bicubic((x + xmin - center + 0.5) * ss) : bilinear((x + xmin - center + 0.5) * ss);
      total += w[x];
    }
    for (int x = 0; x < xmax; ++x) {
      const double k = total != 0.0 ? w[x] / total : w[x];
      c.fixed[static_cast<size_t>(xx) * c.ksize + x] =
          k < 0 ? static_cast<int64_t>(static_cast<int>(-0.5 + k * (1 << kPrecisionBits)))
                : static_cast<int64_t>(static_cast<int>(0.5 + k * (1 << kPrecisionBits)));
    }
    c.first[xx] = xmin;
    c.count[xx] = std::max(xmax, 0);
  }
  return c;
}

uint8_t clip8(int64_t v) {
  const int64_t shifted = v >> kPrecisionBits;  // arithmetic: floor, as Pillow's lookup table index
  return static_cast<uint8_t>(std::min<int64_t>(std::max<int64_t>(shifted, 0), 255));
}

Image horizontal(const Image& in, int width, const std::string& filter) {
  const Coefficients c = coefficients(in.width, width, filter);
  Image out{in.height, width, std::vector<uint8_t>(static_cast<size_t>(in.height) * width * 3)};
  for (int y = 0; y < in.height; ++y)
    for (int xx = 0; xx < width; ++xx)
      for (int ch = 0; ch < 3; ++ch) {
        int64_t ss = int64_t{1} << (kPrecisionBits - 1);
        for (int x = 0; x < c.count[xx]; ++x)
          ss += in.rgb[(static_cast<size_t>(y) * in.width + c.first[xx] + x) * 3 + ch] *
                c.fixed[static_cast<size_t>(xx) * c.ksize + x];
        out.rgb[(static_cast<size_t>(y) * width + xx) * 3 + ch] = clip8(ss);
      }
  return out;
}

Image vertical(const Image& in, int height, const std::string& filter) {
  const Coefficients c = coefficients(in.height, height, filter);
  Image out{height, in.width, std::vector<uint8_t>(static_cast<size_t>(height) * in.width * 3)};
  for (int yy = 0; yy < height; ++yy)
    for (int x = 0; x < in.width; ++x)
      for (int ch = 0; ch < 3; ++ch) {
        int64_t ss = int64_t{1} << (kPrecisionBits - 1);
        for (int y = 0; y < c.count[yy]; ++y)
          ss += in.rgb[(static_cast<size_t>(c.first[yy] + y) * in.width + x) * 3 + ch] *
                c.fixed[static_cast<size_t>(yy) * c.ksize + y];
        out.rgb[(static_cast<size_t>(yy) * in.width + x) * 3 + ch] = clip8(ss);
      }
  return out;
}

// The output size of a resize step: fixed, or the shorter side to shortest_edge (the longer truncated).
void resize_size(int h, int w, const json& step, int& out_h, int& out_w) {
  if (step.contains("shortest_edge")) {
    const int edge = step.at("shortest_edge");
    const int shorter = std::min(h, w), longer = std::max(h, w);
    const int new_long = static_cast<int>(static_cast<double>(edge) * longer / shorter);
    out_h = h <= w ? edge : new_long;
    out_w = h <= w ? new_long : edge;
  } else {
    out_h = step.at("height");
    out_w = step.at("width");
  }
}

int floor_div2(int v) { return v >= 0 ? v / 2 : -((-v + 1) / 2); }

// The centre window; an image smaller than it is first padded with zeros around it (transformers').
Image center_crop(const Image& in, int height, int width) {
  const int h = in.height, w = in.width;
  int top = floor_div2(h - height), left = floor_div2(w - width);
  Image src = in;
  int nh = h, nw = w;
  if (top < 0 || left < 0) {
    nh = std::max(height, h);
    nw = std::max(width, w);
    const int pad_top = (nh - h + 1) / 2, pad_left = (nw - w + 1) / 2;
    src = Image{nh, nw, std::vector<uint8_t>(static_cast<size_t>(nh) * nw * 3, 0)};
    for (int y = 0; y < h; ++y)
      std::memcpy(&src.rgb[(static_cast<size_t>(y + pad_top) * nw + pad_left) * 3], &in.rgb[static_cast<size_t>(y) * w * 3],
                  static_cast<size_t>(w) * 3);
    top += pad_top;
    left += pad_left;
  }
  const int y0 = std::max(0, top), y1 = std::min(nh, top + height), x0 = std::max(0, left), x1 = std::min(nw, left + width);
  Image out{y1 - y0, x1 - x0, {}};
  out.rgb.resize(static_cast<size_t>(out.height) * out.width * 3);
  for (int y = 0; y < out.height; ++y)
    std::memcpy(&out.rgb[static_cast<size_t>(y) * out.width * 3], &src.rgb[(static_cast<size_t>(y + y0) * nw + x0) * 3],
                static_cast<size_t>(out.width) * 3);
  return out;
}

// ---- audio ----------------------------------------------------------------------------------------
uint32_t le(const std::string& b, size_t at, int n) {
  uint32_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(b[at + i]);
  return v;
}

Failure decode_wav(const std::string& b, std::vector<double>& out, int& rate) {
  if (b.size() < 12 || b.compare(0, 4, "RIFF") != 0 || b.compare(8, 4, "WAVE") != 0) return {2, "not a RIFF/WAVE file"};
  size_t pos = 12, data_at = 0, data_len = 0;
  bool have_fmt = false, have_data = false;
  unsigned code = 0, channels = 0, block = 0, bits = 0;
  while (pos + 8 <= b.size()) {
    const std::string tag = b.substr(pos, 4);
    const size_t size = le(b, pos + 4, 4), body = pos + 8, avail = std::min(size, b.size() - body);
    if (tag == "fmt ") {
      if (avail < 16) return {2, "WAV fmt chunk is too short"};
      code = le(b, body, 2);
      channels = le(b, body + 2, 2);
      rate = static_cast<int>(le(b, body + 4, 4));
      block = le(b, body + 12, 2);
      bits = le(b, body + 14, 2);
      have_fmt = true;
    } else if (tag == "data") {
      data_at = body;
      data_len = avail;
      have_data = true;
    }
    pos = body + size + (size & 1);
  }
  if (!have_fmt || !have_data) return {2, "WAV file has no fmt or data chunk"};
  const bool known_bits = bits == 8 || bits == 16 || bits == 24 || bits == 32;
  if (code == 0xFFFE && channels && known_bits && bits != 32) code = 1;
  if (channels < 1 || rate < 1 || !known_bits || block != channels * bits / 8)
    return {2, "WAV header is inconsistent (" + std::to_string(channels) + " channels, " + std::to_string(bits) +
                   " bits, block " + std::to_string(block) + ")"};
  const bool pcm = code == 1, flt = (code == 3 || code == 0xFFFE) && bits == 32;
  if (!(pcm && (bits == 8 || bits == 16 || bits == 24 || bits == 32)) && !flt)
    return {2, "WAV format " + std::to_string(code) + " with " + std::to_string(bits) +
                   "-bit samples is not supported (PCM 8/16/24/32-bit or float32)"};
  const size_t n = data_len / block, width = bits / 8;
  out.assign(n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    double sum = 0.0;
    for (unsigned c = 0; c < channels; ++c) {
      const size_t at = data_at + i * block + c * width;
      double v;
      if (flt) {
        float f;
        std::memcpy(&f, &b[at], 4);
        v = f;
      } else if (bits == 8) {
        v = (static_cast<double>(static_cast<uint8_t>(b[at])) - 128.0) / 128.0;
      } else if (bits == 16) {
        v = static_cast<int16_t>(le(b, at, 2)) / 32768.0;
      } else if (bits == 24) {
        int32_t s = static_cast<int32_t>(le(b, at, 3));
        if (s >= (1 << 23)) s -= (1 << 24);
        v = s / 8388608.0;
      } else {
        v = static_cast<int32_t>(le(b, at, 4)) / 2147483648.0;
      }
      sum += v;
    }
    out[i] = sum / channels;
  }
  return {};
}

// `limit`: only the first output samples (what pad_or_trim keeps) are computed.
std::vector<double> resample(const std::vector<double>& x, int rate_in, int rate_out, size_t limit, int zeros = 16) {
  if (rate_in == rate_out) return x;
  const size_t n_out = std::min(limit, static_cast<size_t>((static_cast<int64_t>(x.size()) * rate_out) / rate_in));
  const double ratio = std::min(1.0, static_cast<double>(rate_out) / rate_in), half = zeros / ratio;
  std::vector<double> out(n_out, 0.0);
  for (size_t i = 0; i < n_out; ++i) {
    const double t = static_cast<double>(static_cast<int64_t>(i) * rate_in) / rate_out;
    const int64_t lo = std::max<int64_t>(static_cast<int64_t>(std::ceil(t - half)), 0);
    const int64_t hi = std::min<int64_t>(static_cast<int64_t>(std::floor(t + half)), static_cast<int64_t>(x.size()) - 1);
    double acc = 0.0;
    for (int64_t j = lo; j <= hi; ++j) {
      const double d = static_cast<double>(j) - t, y = ratio * d;
      const double sinc = y == 0.0 ? 1.0 : std::sin(M_PI * y) / (M_PI * y);
      acc += ratio * sinc * (0.5 + 0.5 * std::cos(M_PI * d / half)) * x[static_cast<size_t>(j)];
    }
    out[i] = acc;
  }
  return out;
}

double hz_to_mel(double f) { return f >= 1000.0 ? 15.0 + 27.0 * std::log(f / 1000.0) / std::log(6.4) : 3.0 * f / 200.0; }
double mel_to_hz(double m) { return m >= 15.0 ? 1000.0 * std::exp(std::log(6.4) / 27.0 * (m - 15.0)) : 200.0 * m / 3.0; }

std::vector<double> linspace(double a, double b, int n) {
  std::vector<double> v(static_cast<size_t>(n));
  const double step = (b - a) / (n - 1);
  for (int i = 0; i < n; ++i) v[i] = a + i * step;
  v[n - 1] = b;
  return v;
}

Array log_mel(const std::vector<double>& x, const json& step) {
  const int n_fft = step.at("n_fft"), hop = step.at("hop_length"), n_mels = step.at("n_mels"), sr = step.at("sample_rate");
  const double fmin = step.at("fmin"), fmax = step.at("fmax");
  const int bins = n_fft / 2 + 1, pad = n_fft / 2;
  std::vector<double> padded(x.size() + 2 * pad);
  for (int i = 0; i < pad; ++i) {  // numpy's "reflect": the edge sample is not repeated
    padded[pad - 1 - i] = x[static_cast<size_t>(i + 1)];
    padded[pad + x.size() + i] = x[x.size() - 2 - i];
  }
  std::copy(x.begin(), x.end(), padded.begin() + pad);
  const int frames = 1 + static_cast<int>((padded.size() - n_fft) / hop);
  std::vector<double> window(n_fft), cos_t(n_fft), sin_t(n_fft);
  for (int n = 0; n < n_fft; ++n) {
    window[n] = 0.5 - 0.5 * std::cos(2.0 * M_PI * n / n_fft);
    cos_t[n] = std::cos(2.0 * M_PI * n / n_fft);
    sin_t[n] = std::sin(2.0 * M_PI * n / n_fft);
  }
  // Slaney-normalised triangular filters, [bins, mels], as deployc/runtime/preprocess.py builds them.
  const std::vector<double> freqs = linspace(0.0, sr / 2.0, bins);
  std::vector<double> points = linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2);
  for (auto& p : points) p = mel_to_hz(p);
  std::vector<double> filters(static_cast<size_t>(bins) * n_mels);
  for (int f = 0; f < bins; ++f)
    for (int m = 0; m < n_mels; ++m) {
      const double down = -(points[m] - freqs[f]) / (points[m + 1] - points[m]);
      const double up = (points[m + 2] - freqs[f]) / (points[m + 2] - points[m + 1]);
      filters[static_cast<size_t>(f) * n_mels + m] = std::max(0.0, std::min(down, up)) * (2.0 / (points[m + 2] - points[m]));
    }
  const int kept = frames - 1;  // Whisper drops the last frame
  std::vector<double> mel(static_cast<size_t>(n_mels) * kept);
  std::vector<double> frame(n_fft), power(bins);
  double top = -1e300;
  for (int t = 0; t < kept; ++t) {
    for (int n = 0; n < n_fft; ++n) frame[n] = padded[static_cast<size_t>(t) * hop + n] * window[n];
    for (int k = 0; k < bins; ++k) {
      double re = 0.0, im = 0.0;
      for (int n = 0; n < n_fft; ++n) {
        const int idx = static_cast<int>((static_cast<int64_t>(k) * n) % n_fft);
        re += frame[n] * cos_t[idx];
        im -= frame[n] * sin_t[idx];
      }
      power[k] = re * re + im * im;
    }
    for (int m = 0; m < n_mels; ++m) {
      double v = 0.0;
      for (int k = 0; k < bins; ++k) v += power[k] * filters[static_cast<size_t>(k) * n_mels + m];
      const double l = std::log10(std::max(v, 1e-10));
      mel[static_cast<size_t>(m) * kept + t] = l;
      top = std::max(top, l);
    }
  }
  Array out{"float32", {1, n_mels, kept}, std::vector<uint8_t>(mel.size() * 4)};
  float* dst = reinterpret_cast<float*>(out.data.data());
  for (size_t i = 0; i < mel.size(); ++i) dst[i] = static_cast<float>((std::max(mel[i], top - 8.0) + 4.0) / 4.0);
  return out;
}
}  // namespace

Failure decode_image(const std::string& bytes, Image& out) {
  if (bytes.size() >= 8 && bytes.compare(0, 8, "\x89PNG\r\n\x1a\n", 8) == 0) return decode_png(bytes, out);
  if (bytes.size() >= 3 && static_cast<uint8_t>(bytes[0]) == 0xFF && static_cast<uint8_t>(bytes[1]) == 0xD8 &&
      static_cast<uint8_t>(bytes[2]) == 0xFF)
    return decode_jpeg(bytes, out);
  return {2, "not a PNG or JPEG file"};
}

Image resize(const Image& in, int height, int width, const std::string& filter) {
  Image out = in;
  if (out.width != width) out = horizontal(out, width, filter);  // Pillow: the horizontal pass first
  if (out.height != height) out = vertical(out, height, filter);
  return out;
}

Failure image_steps(const std::string& bytes, const json& steps, Array& out) {
  Image image;
  std::vector<float> pixels;  // HWC once rescaled
  bool as_float = false;
  std::string layout = "NHWC";
  for (const auto& step : steps) {
    const std::string op = step.at("op");
    if (op == "decode") {
      if (Failure f = decode_image(bytes, image)) return f;
    } else if (op == "resize") {
      int h, w;
      resize_size(image.height, image.width, step, h, w);
      image = resize(image, h, w, step.at("filter"));
    } else if (op == "center_crop") {
      image = center_crop(image, step.at("height"), step.at("width"));
    } else if (op == "rescale") {
      const double factor = step.at("factor");
      pixels.resize(image.rgb.size());
      for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<float>(static_cast<double>(image.rgb[i]) * factor);
      as_float = true;
    } else if (op == "normalize") {
      if (!as_float) {
        pixels.assign(image.rgb.begin(), image.rgb.end());
        as_float = true;
      }
      std::vector<float> mean = step.at("mean").get<std::vector<float>>(), std = step.at("std").get<std::vector<float>>();
      for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = (pixels[i] - mean[i % 3]) / std[i % 3];
    } else if (op == "layout") {
      layout = step.at("layout");
    } else {
      return {2, "unknown image step " + op + " (a bundle from a newer deployc?)"};
    }
  }
  if (!as_float) pixels.assign(image.rgb.begin(), image.rgb.end());
  const int64_t H = image.height, W = image.width;
  out = Array{"float32", layout == "NCHW" ? std::vector<int64_t>{1, 3, H, W} : std::vector<int64_t>{1, H, W, 3},
              std::vector<uint8_t>(pixels.size() * 4)};
  float* dst = reinterpret_cast<float*>(out.data.data());
  if (layout == "NCHW") {
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t i = 0; i < H * W; ++i) dst[c * H * W + i] = pixels[static_cast<size_t>(i * 3 + c)];
  } else {
    std::memcpy(dst, pixels.data(), pixels.size() * 4);
  }
  return {};
}

Failure audio_steps(const std::string& bytes, const json& steps, Array& out) {
  std::vector<double> x;
  int rate = 0;
  for (const auto& step : steps) {
    const std::string op = step.at("op");
    if (op == "decode_wav") {
      if (Failure f = decode_wav(bytes, x, rate)) return f;
    } else if (op == "resample") {
      size_t kept = SIZE_MAX;
      for (const auto& s : steps)
        if (s.value("op", "") == "pad_or_trim") kept = s.at("samples").get<size_t>();
      x = resample(x, rate, step.at("sample_rate"), kept);
      rate = step.at("sample_rate");
    } else if (op == "pad_or_trim") {
      x.resize(step.at("samples").get<size_t>(), 0.0);
    } else if (op == "log_mel") {
      if (rate != step.at("sample_rate").get<int>())
        return {2, "audio at " + std::to_string(rate) + " Hz, log_mel expects " + step.at("sample_rate").dump() + " Hz"};
      out = log_mel(x, step);
    } else {
      return {2, "unknown audio step " + op + " (a bundle from a newer deployc?)"};
    }
  }
  return {};
}

}  // namespace deployc
