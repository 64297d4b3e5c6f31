#include "npy.h"

#include <fstream>
#include <regex>
#include <sstream>

namespace deployc {

size_t Array::numel() const {
  size_t n = 1;
  for (auto d : shape) n *= static_cast<size_t>(d);
  return n;
}

size_t dtype_size(const std::string& dtype) {
  if (dtype == "float32" || dtype == "int32") return 4;
  if (dtype == "int64") return 8;
  return 0;
}

namespace {
const char kMagic[] = "\x93NUMPY";
std::string descr_of(const std::string& dtype) {
  return dtype == "float32" ? "<f4" : dtype == "int64" ? "<i8" : dtype == "int32" ? "<i4" : "";
}
}  // namespace

std::string read_npy(const std::string& path, Array& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "cannot open " + path;
  char magic[6];
  in.read(magic, 6);
  if (!in || std::string(magic, 6) != std::string(kMagic, 6)) return path + ": not a .npy file";
  uint8_t version[2];
  in.read(reinterpret_cast<char*>(version), 2);
  uint32_t header_len = 0;
  if (version[0] == 1) {
    uint8_t b[2];
    in.read(reinterpret_cast<char*>(b), 2);
    header_len = b[0] | (b[1] << 8);
  } else {
    uint8_t b[4];
    in.read(reinterpret_cast<char*>(b), 4);
    header_len = b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<uint32_t>(b[3]) << 24);
  }
  std::string header(header_len, '\0');
  in.read(header.data(), header_len);
  std::smatch m;
  if (!std::regex_search(header, m, std::regex("'descr':\\s*'([^']+)'"))) return path + ": no dtype in header";
  std::string descr = m[1];
  out.dtype = descr == "<f4" ? "float32" : descr == "<i8" ? "int64" : descr == "<i4" ? "int32" : "";
  if (out.dtype.empty()) return path + ": unsupported dtype " + descr + " (float32, int64, int32)";
  if (std::regex_search(header, m, std::regex("'fortran_order':\\s*True"))) return path + ": Fortran order";
  if (!std::regex_search(header, m, std::regex("'shape':\\s*\\(([^)]*)\\)"))) return path + ": no shape in header";
  out.shape.clear();
  std::stringstream dims(m[1].str());
  std::string item;
  while (std::getline(dims, item, ','))
    if (item.find_first_not_of(" ") != std::string::npos) out.shape.push_back(std::stoll(item));
  out.data.resize(out.numel() * dtype_size(out.dtype));
  in.read(reinterpret_cast<char*>(out.data.data()), static_cast<std::streamsize>(out.data.size()));
  if (!in) return path + ": truncated data";
  return "";
}

std::string write_npy(const std::string& path, const Array& a) {
  std::ostringstream shape;
  shape << "(";
  for (size_t i = 0; i < a.shape.size(); ++i) shape << a.shape[i] << (a.shape.size() == 1 || i + 1 < a.shape.size() ? "," : "");
  shape << ")";
  std::string header = "{'descr': '" + descr_of(a.dtype) + "', 'fortran_order': False, 'shape': " + shape.str() + ", }";
  size_t total = 10 + header.size() + 1;
  header += std::string((64 - total % 64) % 64, ' ') + "\n";
  std::ofstream out(path, std::ios::binary);
  if (!out) return "cannot write " + path;
  out.write(kMagic, 6);
  const char version[2] = {1, 0};
  out.write(version, 2);
  const uint16_t len = static_cast<uint16_t>(header.size());
  const char lenb[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  out.write(lenb, 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(a.data.data()), static_cast<std::streamsize>(a.data.size()));
  return out ? "" : "cannot write " + path;
}

}  // namespace deployc
