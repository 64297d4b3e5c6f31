#pragma once
#include <string>

namespace deployc {
// Lowercase hex sha256 of a file; empty when it cannot be read.
std::string file_sha256(const std::string& path);
}  // namespace deployc
