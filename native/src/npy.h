// Minimal .npy (NumPy format 1.0-3.0) reading and writing: C order, little-endian float32/int64/int32.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace deployc {

struct Array {
  std::string dtype;            // float32, int64, int32
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;    // raw little-endian elements
  size_t numel() const;
  template <typename T> const T* as() const { return reinterpret_cast<const T*>(data.data()); }
};

size_t dtype_size(const std::string& dtype);
// Both return an empty string on success, else what is wrong.
std::string read_npy(const std::string& path, Array& out);
std::string write_npy(const std::string& path, const Array& a);

}  // namespace deployc
