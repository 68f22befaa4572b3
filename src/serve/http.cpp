#include "serve/http.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/error.h"

namespace ss::http {

namespace {

using Clock = std::chrono::steady_clock;

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

// RFC 9110 5.6.2: token characters (method and header names).
bool IsTokenChar(unsigned char c) {
  if (c >= '0' && c <= '9') return true;
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  return std::strchr("!#$%&'*+-.^_`|~", c) != nullptr && c != '\0';
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

int MillisLeft(Clock::time_point deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1 << 30));
}

// Waits until `fd` is readable: 1, or the deadline passed: 0, or the socket failed: -1.
int WaitReadable(int fd, Clock::time_point deadline) {
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    const int r = poll(&p, 1, MillisLeft(deadline));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) return 0;
    return (p.revents & (POLLIN | POLLHUP)) ? 1 : -1;
  }
}

// Appends what the socket has (up to 64 KiB) to `buf`: bytes read, 0 at the peer's end, -1 on
// error.
ssize_t ReadSome(int fd, std::string& buf) {
  char chunk[1 << 16];
  for (;;) {
    const ssize_t n = recv(fd, chunk, sizeof chunk, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n > 0) buf.append(chunk, static_cast<size_t>(n));
    return n;
  }
}

bool SendAll(int fd, std::string_view data, int timeout_ms) {
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!data.empty()) {
    const ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      const int left = MillisLeft(deadline);
      if (left == 0 || poll(&p, 1, left) <= 0 || !(p.revents & POLLOUT)) return false;
      continue;
    }
    return false;
  }
  return true;
}

// Whether a comma-separated header value holds `token` (case-insensitive), e.g. Connection: close.
bool HasToken(const std::string* value, std::string_view token) {
  if (!value) return false;
  const std::string v = Lower(*value);
  size_t start = 0;
  while (start <= v.size()) {
    const size_t comma = std::min(v.find(',', start), v.size());
    if (Trim(std::string_view(v).substr(start, comma - start)) == token) return true;
    start = comma + 1;
  }
  return false;
}

// After a reply to a request whose body was not read: stop sending, then read and drop what the
// client still sends, for a little while, before the socket closes. Closing with unread bytes
// would make the kernel reset the connection, and a client still sending its body (Python's
// http.client, for one) would see the reset instead of the reply.
void LingerClose(int fd) {
  shutdown(fd, SHUT_WR);
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(2);
  std::string sink;
  size_t dropped = 0;
  while (dropped < (size_t{64} << 20) && WaitReadable(fd, deadline) > 0) {
    const ssize_t n = ReadSome(fd, sink);
    if (n <= 0) break;
    dropped += static_cast<size_t>(n);
    sink.clear();
  }
}

}  // namespace

const std::string* Request::Header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (k == name) return &v;
  return nullptr;
}

const std::string* Request::Param(std::string_view name) const {
  for (const auto& [k, v] : params)
    if (k == name) return &v;
  return nullptr;
}

bool PeerClosed(int socket) {
  pollfd p{socket, POLLRDHUP, 0};
  const int r = poll(&p, 1, 0);
  if (r < 0) return errno != EINTR;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

const char* ReasonPhrase(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 411:
      return "Length Required";
    case 413:
      return "Content Too Large";
    case 414:
      return "URI Too Long";
    case 415:
      return "Unsupported Media Type";
    case 417:
      return "Expectation Failed";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    case 507:
      return "Insufficient Storage";
    default:
      return "Unknown";
  }
}

bool PercentDecode(std::string_view in, std::string& out) {
  out.clear();
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    const char c = in[i];
    if (c == '+') {
      out += ' ';
    } else if (c == '%') {
      if (i + 2 >= in.size()) return false;
      const int hi = HexDigit(in[i + 1]), lo = HexDigit(in[i + 2]);
      if (hi < 0 || lo < 0) return false;
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else {
      out += c;
    }
  }
  return true;
}

std::optional<HeadError> ParseHead(std::string_view head, const Limits& limits, Request& req) {
  const size_t eol = std::min(head.find("\r\n"), head.size());
  const std::string_view line = head.substr(0, eol);
  // request-line = method SP request-target SP HTTP-version (RFC 9112 3)
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp1 == std::string_view::npos || sp2 == std::string_view::npos || sp1 == 0 ||
      line.find(' ', sp2 + 1) != std::string_view::npos)
    return HeadError{400, "malformed request line"};
  const std::string_view method = line.substr(0, sp1), target = line.substr(sp1 + 1, sp2 - sp1 - 1),
                         version = line.substr(sp2 + 1);
  for (unsigned char c : method)
    if (!IsTokenChar(c)) return HeadError{400, "malformed method in the request line"};
  if (target.size() > limits.max_target_bytes)
    return HeadError{414, fmt::format("the request target is {} bytes, more than the limit of {}",
                                      target.size(), limits.max_target_bytes)};
  if (target.empty() || target[0] != '/')
    return HeadError{400, "the request target must be a path starting with '/'"};
  for (unsigned char c : target)
    if (c <= ' ' || c >= 0x7f)
      return HeadError{400, "the request target holds a byte that is not printable ASCII"};
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    if (version.size() == 8 && version.substr(0, 5) == "HTTP/" && version[6] == '.')
      return HeadError{505,
                       fmt::format("{} is not supported (HTTP/1.1 and HTTP/1.0 are)", version)};
    return HeadError{400, "malformed HTTP version in the request line"};
  }
  req.method = std::string(method);
  req.target = std::string(target);
  req.version = std::string(version);
  const size_t qmark = target.find('?');
  req.path = std::string(target.substr(0, qmark));
  req.query = qmark == std::string_view::npos ? "" : std::string(target.substr(qmark + 1));
  if (const size_t hash = req.query.find('#'); hash != std::string::npos) req.query.resize(hash);
  if (const size_t hash = req.path.find('#'); hash != std::string::npos) req.path.resize(hash);

  req.headers.clear();
  size_t pos = eol;
  while (pos < head.size()) {
    pos += 2;  // past "\r\n"
    const size_t end = std::min(head.find("\r\n", pos), head.size());
    const std::string_view h = head.substr(pos, end - pos);
    pos = end;
    if (h.empty()) return HeadError{400, "an empty line inside the header section"};
    if (h[0] == ' ' || h[0] == '\t') return HeadError{400, "folded header lines are not accepted"};
    const size_t colon = h.find(':');
    if (colon == std::string_view::npos || colon == 0)
      return HeadError{400, "a header line without a name and a colon"};
    for (unsigned char c : h.substr(0, colon))
      if (!IsTokenChar(c)) return HeadError{400, "malformed header name"};
    const std::string_view value = Trim(h.substr(colon + 1));
    for (unsigned char c : value)
      if (c == '\0' || c == '\r' || c == '\n' || (c < ' ' && c != '\t') || c == 0x7f)
        return HeadError{400,
                         fmt::format("header '{}' holds a control character", h.substr(0, colon))};
    std::string name = Lower(h.substr(0, colon));
    // RFC 9112 3.2: a request with more than one Host is a 400. The same for the other headers
    // the server decides on (whose origin, whose token, what the body is): with two, which one
    // a check read and which one the handler acts on could differ.
    static constexpr std::string_view kSingle[] = {"host",   "origin",         "content-type",
                                                   "expect", "sec-fetch-site", "x-sinkscope-token"};
    if (std::find(std::begin(kSingle), std::end(kSingle), name) != std::end(kSingle) &&
        req.Header(name))
      return HeadError{400, fmt::format("header '{}' is given more than once", name)};
    req.headers.emplace_back(std::move(name), std::string(value));
  }

  req.params.clear();
  size_t start = 0;
  while (start < req.query.size()) {
    const size_t amp = std::min(req.query.find('&', start), req.query.size());
    const std::string_view pair = std::string_view(req.query).substr(start, amp - start);
    start = amp + 1;
    if (pair.empty()) continue;
    const size_t eq = pair.find('=');
    std::string key, value;
    if (!PercentDecode(pair.substr(0, eq), key) ||
        !PercentDecode(eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1),
                       value))
      return HeadError{400, "malformed percent-escape in the query"};
    // A parameter given twice: which one counts would be a guess (the first, the last).
    if (req.Param(key))
      return HeadError{400, fmt::format("query parameter '{}' is given more than once",
                                        PrintableExcerpt(key, 64))};
    req.params.emplace_back(std::move(key), std::move(value));
  }
  return std::nullopt;
}

Server::Server(Limits limits) : limits_(limits) {
  error_body_ = [](const Request&, Response& res, const std::string& message) {
    res.content_type = "text/plain; charset=utf-8";
    res.body = message + "\n";
  };
}

Server::~Server() {
  Stop();
  std::unique_lock<std::mutex> lock(mutex_);
  closed_.wait(lock, [this] { return open_.load() == 0; });
  if (listen_fd_ >= 0) close(listen_fd_);
}

void Server::Route(const std::string& method, const std::string& path, Handler handler) {
  routes_.push_back({method, path, std::move(handler)});
}

int Server::Bind(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0)
    Fail("--host {}: cannot resolve the address ({})", host, gai_strerror(rc));
  int fd = -1, error = 0;
  for (addrinfo* a = found; a; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      error = errno;
      continue;
    }
    // SO_REUSEADDR lets a restarted server bind while old connections linger in TIME_WAIT; on
    // Linux it never lets two sockets listen on one port (SO_REUSEPORT would, and splits the
    // connections between them: not set).
    const int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, 128) == 0) break;
    error = errno;
    close(fd);
    fd = -1;
  }
  freeaddrinfo(found);
  if (fd < 0) {
    if (error == EADDRINUSE)
      Fail("--host {} --port {}: the port is in use (another server listens there)", host, port);
    Fail("--host {} --port {}: cannot listen ({})", host, port, std::strerror(error));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  port_ = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                                      : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  listen_fd_ = fd;
  return port_;
}

void Server::Run() {
  if (listen_fd_ < 0) Fail("the server is not bound");
  while (!stopping_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (poll(&p, 1, 200) <= 0) continue;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    const int yes = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
    if (open_.load() >= limits_.max_connections) {
      // No thread for it: a short reply, sent without waiting, and closed.
      static constexpr std::string_view kBusy =
          "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 30\r\n"
          "Retry-After: 1\r\nConnection: close\r\n\r\ntoo many connections at once\r\n";
      (void)send(fd, kBusy.data(), kBusy.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      close(fd);
      continue;
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      sockets_.insert(fd);
      ++open_;
    }
    std::thread([this, fd] {
      try {
        Serve(fd);
      } catch (...) {  // nothing may escape a connection's thread
      }
      std::lock_guard<std::mutex> lock(mutex_);
      sockets_.erase(fd);
      close(fd);
      --open_;
      closed_.notify_all();
    }).detach();
  }
}

void Server::Stop() {
  stopping_ = true;
  std::lock_guard<std::mutex> lock(mutex_);
  for (int fd : sockets_) shutdown(fd, SHUT_RDWR);  // wakes reads; long work sees its client gone
}

bool Server::Write(int fd, const Request& req, Response& res, bool close_after) {
  std::string out = fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n"
      "Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n",
      res.status, ReasonPhrase(res.status), res.content_type, res.body.size());
  for (const auto& [k, v] : res.headers) out += fmt::format("{}: {}\r\n", k, v);
  out += close_after ? "Connection: close\r\n\r\n" : "\r\n";
  if (req.method != "HEAD") out += res.body;
  return SendAll(fd, out, limits_.write_timeout_ms);
}

// A reply the server makes itself (the request was not routed): the error body, then closed.
void Server::Refuse(int fd, const Request& req, Response& res, const std::string& message) {
  error_body_(req, res, message);
  if (Write(fd, req, res, /*close_after=*/true)) LingerClose(fd);
}

void Server::Answer(const Request& req, Response& res) {
  bool known_path = false;
  std::string allow;
  for (const Route_& r : routes_) {
    if (r.path != req.path) continue;
    known_path = true;
    allow += (allow.empty() ? "" : ", ") + r.method;
    if (r.method != req.method) continue;
    try {
      r.handler(req, res);
    } catch (const ClientGone&) {
      throw;
    } catch (const std::exception& e) {
      res = Response{};
      res.status = 500;
      error_body_(req, res, e.what());
    }
    return;
  }
  res.status = known_path ? 405 : 404;
  if (known_path) res.headers.emplace_back("Allow", allow);
  error_body_(req, res,
              known_path ? fmt::format("the method is not allowed (allowed: {})", allow)
                         : std::string("not found"));
}

void Server::Serve(int fd) {
  std::string buf;  // bytes read and not yet consumed: pipelined requests wait here in order
  for (int served = 0; served < limits_.max_requests_per_connection && !stopping_; ++served) {
    Request req;
    req.socket = fd;
    Response res;
    // The head: an idle wait for its first byte, then one deadline for all of it.
    Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(limits_.idle_timeout_ms);
    bool started = false;
    size_t head_end = std::string::npos;
    for (;;) {
      // RFC 9112 2.2: empty lines before a request line are ignored.
      size_t skip = 0;
      while (buf.compare(skip, 2, "\r\n") == 0) skip += 2;
      if (skip) buf.erase(0, skip);
      if (!buf.empty() && !started) {
        started = true;
        deadline = Clock::now() + std::chrono::milliseconds(limits_.head_timeout_ms);
      }
      head_end = buf.find("\r\n\r\n");
      // The limit holds for a head that arrived in one read as for one that came in pieces.
      const size_t head_bytes = head_end == std::string::npos ? buf.size() : head_end + 4;
      if (head_end != std::string::npos && head_bytes <= limits_.max_head_bytes) break;
      if (head_bytes > limits_.max_head_bytes) {
        const bool long_line = buf.find("\r\n") == std::string::npos;
        res.status = long_line && buf.size() > limits_.max_target_bytes ? 414 : 431;
        return Refuse(
            fd, req, res,
            res.status == 414
                ? fmt::format("the request line is longer than {} bytes", limits_.max_target_bytes)
                : fmt::format("the request head is larger than {} bytes", limits_.max_head_bytes));
      }
      const int ready = WaitReadable(fd, deadline);
      if (ready == 0 && started) {
        res.status = 408;
        return Refuse(
            fd, req, res,
            fmt::format("the request head did not arrive within {} ms", limits_.head_timeout_ms));
      }
      if (ready <= 0 || ReadSome(fd, buf) <= 0) return;  // idle, gone or failed: closed quietly
    }
    if (auto error = ParseHead(std::string_view(buf).substr(0, head_end), limits_, req)) {
      res.status = error->status;
      return Refuse(fd, req, res, error->message);
    }
    buf.erase(0, head_end + 4);

    // The body: Content-Length only, at most max_body_bytes.
    if (req.Header("transfer-encoding")) {
      res.status = 411;
      return Refuse(fd, req, res,
                    "send the body with Content-Length (a chunked or other transfer-coded "
                    "body is not accepted)");
    }
    size_t length = 0;
    int lengths = 0;
    for (const auto& [k, v] : req.headers) {
      if (k != "content-length") continue;
      const bool digits =
          !v.empty() && v.size() <= 18 &&
          std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
      if (!digits || (lengths++ && std::stoull(v) != length)) {
        res.status = 400;
        return Refuse(fd, req, res, "malformed or conflicting Content-Length");
      }
      length = std::stoull(v);
    }
    if (length > limits_.max_body_bytes) {
      res.status = 413;
      return Refuse(fd, req, res,
                    fmt::format("the request body is {} bytes, more than the limit of {} "
                                "bytes",
                                length, limits_.max_body_bytes));
    }
    if (guard_ && guard_(req, res)) {
      if (Write(fd, req, res, /*close_after=*/true)) LingerClose(fd);
      return;
    }
    if (const std::string* expect = req.Header("expect")) {
      if (Lower(*expect) != "100-continue") {
        res.status = 417;
        return Refuse(fd, req, res, "only 'Expect: 100-continue' is understood");
      }
      if (length > buf.size() &&
          !SendAll(fd, "HTTP/1.1 100 Continue\r\n\r\n", limits_.write_timeout_ms))
        return;
    }
    const Clock::time_point body_deadline =
        Clock::now() + std::chrono::milliseconds(limits_.body_timeout_ms);
    while (buf.size() < length) {
      const int ready = WaitReadable(fd, body_deadline);
      if (ready == 0) {
        res.status = 408;
        return Refuse(
            fd, req, res,
            fmt::format("the request body did not arrive within {} ms", limits_.body_timeout_ms));
      }
      if (ready < 0 || ReadSome(fd, buf) <= 0) return;
    }
    req.body = buf.substr(0, length);
    buf.erase(0, length);

    const bool close_after =
        res.close || HasToken(req.Header("connection"), "close") ||
        (req.version == "HTTP/1.0" && !HasToken(req.Header("connection"), "keep-alive")) ||
        served + 1 == limits_.max_requests_per_connection;
    try {
      Answer(req, res);
    } catch (const ClientGone&) {
      return;
    }
    if (!Write(fd, req, res, close_after || res.close) || close_after || res.close) return;
  }
}

}  // namespace ss::http
