// Image and audio preprocessing steps of a pipeline (the runtime config's `image` and `audio` stages),
// with the arithmetic of deployc/runtime/preprocess.py: the two agree to 1e-5 (tests/pipeline/test_preprocess.py).
//   image: decode (PNG via libpng, JPEG via libjpeg(-turbo), EXIF orientation applied) -> resize
//          (Pillow's 8-bit resampling, exactly) -> center_crop -> rescale -> normalize -> layout
//   audio: decode_wav -> resample (Hann-windowed sinc) -> pad_or_trim -> log_mel (Whisper's recipe)
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "failure.h"
#include "npy.h"

namespace deployc {

struct Image {
  int height = 0, width = 0;
  std::vector<uint8_t> rgb;  // height x width x 3
};

// PNG or JPEG file bytes -> 8-bit RGB (alpha dropped, gray spread to 3 channels, 16-bit cut to the high
// byte, a JPEG's EXIF orientation applied). Exit code 2 when the bytes are not a decodable image.
Failure decode_image(const std::string& bytes, Image& out);
// Pillow's Image.resize for 8-bit images with the bilinear or bicubic filter.
Image resize(const Image& in, int height, int width, const std::string& filter);

// Runs a stage's steps on the input file's bytes: float32 [1, 3, H, W] (NCHW) or [1, H, W, 3].
Failure image_steps(const std::string& bytes, const nlohmann::json& steps, Array& out);
// Runs a stage's steps on a WAV file's bytes: float32 [1, n_mels, frames].
Failure audio_steps(const std::string& bytes, const nlohmann::json& steps, Array& out);

}  // namespace deployc
