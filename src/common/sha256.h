// SHA-256 (FIPS 180-4) of a byte string or a file, as lowercase hex: model identity in reports.
#pragma once

#include <string>
#include <string_view>

namespace ss {

std::string Sha256Hex(std::string_view bytes);
// Streams the file in 1 MiB chunks; throws ss::Error naming the path if it cannot be read.
std::string Sha256File(const std::string& path);

}  // namespace ss
