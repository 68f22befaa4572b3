// A small HTTP/1.1 server for the viewer (sinkscope serve; docs/SERVE.md, docs/GUARANTEES.md).
// Written for the threats a local server faces rather than for throughput:
//   - every limit is explicit (Limits): head and target size, body size (Content-Length only: a
//     chunked body is refused with 411, so no body can grow past the limit), a deadline for the
//     whole head (a client that trickles header bytes is cut off, not just one that goes silent),
//     idle keep-alive time, write time, connections at once (more get 503 at once);
//   - one thread per connection, so a stalled client holds only its own thread, never the others';
//   - pipelined requests are answered in order from one buffer per connection;
//   - a handler can ask whether its client is still there (PeerClosed on Request::socket), so long
//     work stops when the client gives up;
//   - a guard runs after the head and before the body (Host, Origin, token checks), so a refused
//     request's body is never read.
// RFC 9110 (semantics) and RFC 9112 (HTTP/1.1 message syntax) are the references.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ss::http {

struct Limits {
  size_t max_head_bytes = 16 << 10;   // request line and headers: 431 beyond
  size_t max_target_bytes = 8 << 10;  // the request target (path and query): 414 beyond
  size_t max_body_bytes = 8 << 20;    // Content-Length: 413 beyond
  int head_timeout_ms = 10000;        // the whole head, from its first byte: then 408 and closed
  int body_timeout_ms = 60000;        // the whole body
  int idle_timeout_ms = 5000;         // waiting for the next request on a kept-alive connection
  int write_timeout_ms = 30000;       // any one wait to send
  int max_connections = 64;           // open at once; the next gets 503 and is closed
  int max_requests_per_connection = 1000;
};

struct Request {
  std::string method, target, path, query, version;
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased, values trimmed
  std::vector<std::pair<std::string, std::string>> params;   // the query, percent-decoded
  std::string body;
  int socket = -1;  // the connection: for PeerClosed

  // The first header of that (lower-case) name, or null.
  const std::string* Header(std::string_view name) const;
  // The first query parameter of that name, or null.
  const std::string* Param(std::string_view name) const;
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // added to the standard ones
  bool close = false;  // close the connection after this reply
};

using Handler = std::function<void(const Request&, Response&)>;
// Runs after the head, before the body is read: returns true when it has answered (refused) the
// request; the connection then closes, the body unread.
using Guard = std::function<bool(const Request&, Response&)>;

// Thrown through a handler (e.g. from an interrupt poll) when its client has gone: the connection
// closes without a reply.
struct ClientGone {};

// True when the peer of a connected socket has closed its side or the socket has failed.
bool PeerClosed(int socket);

// "Not Found" for 404, and so on ("Unknown" for codes the server never sends).
const char* ReasonPhrase(int status);

// Percent-decoding of a query component ('+' is a space, as forms send it). False on a '%' not
// followed by two hex digits.
bool PercentDecode(std::string_view in, std::string& out);

// Parses a request head: the request line and the header lines, without the blank line that ends
// them. On success fills method, target, path, query, version, headers and params; on failure
// returns the status to answer (400, 414, 501, 505) and a message. Exposed for tests and the
// fuzzer.
struct HeadError {
  int status;
  std::string message;
};
std::optional<HeadError> ParseHead(std::string_view head, const Limits& limits, Request& req);

class Server {
 public:
  explicit Server(Limits limits = {});
  ~Server();  // stops and waits for every connection to close
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // A handler for one method and exact path. Another method on a known path gets 405, an unknown
  // path 404.
  void Route(const std::string& method, const std::string& path, Handler handler);
  void SetGuard(Guard guard) { guard_ = std::move(guard); }
  // Called for a 4xx/5xx the server itself answers (bad head, too large, unknown path): fills the
  // body. By default a plain-text reason.
  void SetErrorBody(std::function<void(const Request&, Response&, const std::string&)> fn) {
    error_body_ = std::move(fn);
  }

  // Binds `host`:`port` exclusively (no SO_REUSEPORT: a second server on the port fails here with
  // "the port is in use"); port 0 takes a free one. Returns the port bound. Throws ss::Error.
  int Bind(const std::string& host, int port);
  // Accepts connections until Stop().
  void Run();
  void Stop();
  int port() const { return port_; }
  int open_connections() const { return open_.load(); }

 private:
  void Serve(int fd);
  void Refuse(int fd, const Request& req, Response& res, const std::string& message);
  bool Write(int fd, const Request& req, Response& res, bool close);
  void Answer(const Request& req, Response& res);

  Limits limits_;
  struct Route_ {
    std::string method, path;
    Handler handler;
  };
  std::vector<Route_> routes_;
  Guard guard_;
  std::function<void(const Request&, Response&, const std::string&)> error_body_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> open_{0};
  std::mutex mutex_;  // guards sockets_
  std::condition_variable closed_;
  std::set<int> sockets_;
};

}  // namespace ss::http
