// Straight from FIPS 180-4 sections 4.1.2 (functions), 4.2.2 (constants), 5.1.1 (padding),
// 6.2.2 (compression).
#include "common/sha256.h"

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>

#ifdef SINKSCOPE_HAVE_OPENSSL
#include <openssl/evp.h>
#endif

#include "common/error.h"
#include "common/file_util.h"

namespace ss {
namespace {

constexpr uint32_t kRound[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

uint32_t Rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

class Sha256 {
 public:
  void Update(const uint8_t* p, size_t n) {
    total_ += n;
    while (n > 0) {
      const size_t take = std::min(n, sizeof(block_) - used_);
      std::memcpy(block_ + used_, p, take);
      used_ += take;
      p += take;
      n -= take;
      if (used_ == sizeof(block_)) {
        Compress(block_);
        used_ = 0;
      }
    }
  }
  std::string HexDigest() {
    const uint64_t bits = total_ * 8;
    const uint8_t one = 0x80, zero = 0;
    Update(&one, 1);
    while (used_ != 56) Update(&zero, 1);
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(bits >> (56 - 8 * i));
    Update(len, 8);
    std::string hex;
    for (uint32_t v : h_) {
      char buf[9];
      std::snprintf(buf, sizeof(buf), "%08x", v);
      hex += buf;
    }
    return hex;
  }

 private:
  void Compress(const uint8_t* b) {
    uint32_t w[64];
    for (int t = 0; t < 16; ++t)
      w[t] = uint32_t(b[4 * t]) << 24 | uint32_t(b[4 * t + 1]) << 16 | uint32_t(b[4 * t + 2]) << 8 |
             uint32_t(b[4 * t + 3]);
    for (int t = 16; t < 64; ++t) {
      const uint32_t s0 = Rotr(w[t - 15], 7) ^ Rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
      const uint32_t s1 = Rotr(w[t - 2], 17) ^ Rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
      w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    uint32_t a = h_[0], bb = h_[1], c = h_[2], d = h_[3], e = h_[4], f = h_[5], g = h_[6],
             h = h_[7];
    for (int t = 0; t < 64; ++t) {
      const uint32_t t1 =
          h + (Rotr(e, 6) ^ Rotr(e, 11) ^ Rotr(e, 25)) + ((e & f) ^ (~e & g)) + kRound[t] + w[t];
      const uint32_t t2 =
          (Rotr(a, 2) ^ Rotr(a, 13) ^ Rotr(a, 22)) + ((a & bb) ^ (a & c) ^ (bb & c));
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = bb;
      bb = a;
      a = t1 + t2;
    }
    h_[0] += a;
    h_[1] += bb;
    h_[2] += c;
    h_[3] += d;
    h_[4] += e;
    h_[5] += f;
    h_[6] += g;
    h_[7] += h;
  }
  uint32_t h_[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                    0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  uint8_t block_[64];
  size_t used_ = 0;
  uint64_t total_ = 0;
};

}  // namespace

std::string Sha256Hex(std::string_view bytes) {
  Sha256 s;
  s.Update(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  return s.HexDigest();
}

std::string Sha256File(const std::string& path) {
  const int fd = OpenRegularFile(path);  // a FIFO or device would never end
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(fdopen(fd, "rb"), std::fclose);
  if (!f) {
    close(fd);
    Fail("{}: cannot open for hashing", path);
  }
  std::unique_ptr<uint8_t[]> buf(new uint8_t[1 << 20]);
  size_t n;
#ifdef SINKSCOPE_HAVE_OPENSSL
  // Files can be a 7B checkpoint's 13.4 GB (trace's cache key): OpenSSL's SHA-256 uses the CPU's
  // SHA extensions where it has them (1.4 GB/s on a Xeon core against 160 MB/s for the plain
  // code above, which stays the reference: tests compare the two).
  std::unique_ptr<EVP_MD_CTX, void (*)(EVP_MD_CTX*)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1)
    Fail("{}: cannot start hashing", path);
  while ((n = std::fread(buf.get(), 1, 1 << 20, f.get())) > 0)
    EVP_DigestUpdate(ctx.get(), buf.get(), n);
  if (std::ferror(f.get())) Fail("{}: read error while hashing", path);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_DigestFinal_ex(ctx.get(), digest, &length);
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) {
    char two[3];
    std::snprintf(two, sizeof(two), "%02x", digest[i]);
    hex += two;
  }
  return hex;
#else
  Sha256 s;
  while ((n = std::fread(buf.get(), 1, 1 << 20, f.get())) > 0) s.Update(buf.get(), n);
  if (std::ferror(f.get())) Fail("{}: read error while hashing", path);
  return s.HexDigest();
#endif
}

}  // namespace ss
