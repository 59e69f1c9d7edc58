// httplib_engine.cpp: a llama.cpp-shaped test engine on cpp-httplib, with the
// library's defaults (Debian's libcpp-httplib-dev 0.11.4: keep-alive timeout
// 5 s, keep-alive max count 5, read and write timeouts 5 s), as llama.cpp's
// server uses it. Built and started by the Go package testengine
// (testengine.go). Usage:
//
//     httplib_engine --port N [--metrics-fault missing|hang|huge|nan]     (0 = any free port)
//         [--load-slots N --load-token-ns NS --load-per-running-ns NS --load-per-kv-ns NS
//          --load-prefill-ns NS [--load-keep-kv]]
//
// Prints exactly one line "READY <port>" on stdout once it is listening.
// Per-request behaviour comes from the X-Test-* request headers (the Header and Fault constants in ../testengine.go).
// GET /metrics answers llama.cpp-shaped metrics (as its server did with
// --metrics before PR #13660), or fails as --metrics-fault says (the Metrics
// constants). With --load-slots the engine times its work by the load
// model (struct Load; testengine.Load in ../load.go).
//
// Streams end as llama.cpp's do: the chunked content provider writes every
// event, calls sink.done() and returns false, which makes cpp-httplib close
// the connection although the response head announced keep-alive.

#include <httplib.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int kHangMaxMs = 120 * 1000;
constexpr int kPollMs = 50;

// Generation requests received, and those whose response is still running.
std::atomic<long> g_requests{0};
std::atomic<long> g_active{0};
std::atomic<long> g_seq{0};
std::atomic<long> g_prompt_tokens{0};
std::atomic<long> g_predicted_tokens{0};

// How GET /metrics fails ("" for not at all).
std::string g_metrics_fault;
constexpr int kMetricsHangMs = 30 * 1000;
constexpr size_t kMetricsHugeBytes = 50u << 20;
// llama.cpp's unified cache here: n_ctx 8192 cells; each request being
// served holds 256, and every request served leaves 64 behind (its slot's
// cached cells), up to half the cache.
constexpr long kCtx = 8192, kCellsPerRequest = 256, kCellsLeft = 64;

struct ActiveGuard {
  ActiveGuard() { g_active++; }
  ~ActiveGuard() { g_active--; }
  ActiveGuard(const ActiveGuard &) = delete;
  ActiveGuard &operator=(const ActiveGuard &) = delete;
};

// ---- A minimal JSON reader: enough to validate a request and read a few
// fields. No extra libraries: only what libcpp-httplib-dev and the C++
// standard library give.

struct JVal {
  enum Type { Null, Bool, Num, Str, Arr, Obj } type = Null;
  bool b = false;
  double n = 0;
  std::string s;
  std::vector<JVal> items;       // Arr values, Obj values
  std::vector<std::string> keys; // Obj keys, parallel to items

  const JVal *get(const std::string &key) const {
    if (type != Obj) return nullptr;
    for (size_t i = 0; i < keys.size(); i++) {
      if (keys[i] == key) return &items[i];
    }
    return nullptr;
  }
};

struct Parser {
  const char *p;
  const char *e;
  int depth = 0;

  void ws() {
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
  }
  bool lit(const char *s) {
    size_t n = std::strlen(s);
    if (static_cast<size_t>(e - p) < n || std::memcmp(p, s, n) != 0) return false;
    p += n;
    return true;
  }
  static void utf8(std::string &out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  bool hex4(unsigned &cp) {
    if (e - p < 4) return false;
    cp = 0;
    for (int i = 0; i < 4; i++) {
      char c = *p++;
      cp <<= 4;
      if (c >= '0' && c <= '9') cp |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f') cp |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') cp |= static_cast<unsigned>(c - 'A' + 10);
      else return false;
    }
    return true;
  }
  bool str(std::string &out) {
    p++; // opening quote
    while (p < e) {
      char c = *p++;
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return false;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (p >= e) return false;
      switch (char x = *p++) {
      case '"': case '\\': case '/': out += x; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'u': {
        unsigned cp;
        if (!hex4(cp)) return false;
        if (cp >= 0xD800 && cp < 0xDC00 && e - p >= 6 && p[0] == '\\' && p[1] == 'u') {
          const char *save = p;
          p += 2;
          unsigned lo;
          if (hex4(lo) && lo >= 0xDC00 && lo < 0xE000) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          } else {
            p = save;
          }
        }
        utf8(out, cp);
        break;
      }
      default: return false;
      }
    }
    return false;
  }
  bool digits() {
    const char *s = p;
    while (p < e && *p >= '0' && *p <= '9') p++;
    return p > s;
  }
  bool num(JVal &v) {
    const char *s = p;
    if (p < e && *p == '-') p++;
    if (p < e && *p == '0') {
      p++;
    } else if (!digits()) {
      return false;
    }
    if (p < e && *p == '.') {
      p++;
      if (!digits()) return false;
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
      p++;
      if (p < e && (*p == '+' || *p == '-')) p++;
      if (!digits()) return false;
    }
    v.type = JVal::Num;
    v.n = std::strtod(std::string(s, p).c_str(), nullptr);
    return true;
  }
  bool value(JVal &v) {
    if (++depth > 128) return false;
    bool ok = value1(v);
    depth--;
    return ok;
  }
  bool value1(JVal &v) {
    ws();
    if (p >= e) return false;
    switch (*p) {
    case '{': {
      p++;
      v.type = JVal::Obj;
      ws();
      if (p < e && *p == '}') {
        p++;
        return true;
      }
      for (;;) {
        ws();
        if (p >= e || *p != '"') return false;
        std::string key;
        if (!str(key)) return false;
        ws();
        if (p >= e || *p++ != ':') return false;
        JVal item;
        if (!value(item)) return false;
        v.keys.push_back(std::move(key));
        v.items.push_back(std::move(item));
        ws();
        if (p >= e) return false;
        char c = *p++;
        if (c == '}') return true;
        if (c != ',') return false;
      }
    }
    case '[': {
      p++;
      v.type = JVal::Arr;
      ws();
      if (p < e && *p == ']') {
        p++;
        return true;
      }
      for (;;) {
        JVal item;
        if (!value(item)) return false;
        v.items.push_back(std::move(item));
        ws();
        if (p >= e) return false;
        char c = *p++;
        if (c == ']') return true;
        if (c != ',') return false;
      }
    }
    case '"':
      v.type = JVal::Str;
      return str(v.s);
    case 't':
      v.type = JVal::Bool;
      v.b = true;
      return lit("true");
    case 'f':
      v.type = JVal::Bool;
      return lit("false");
    case 'n':
      return lit("null");
    default:
      return num(v);
    }
  }
};

bool parse_json(const std::string &text, JVal &out, std::string &err) {
  Parser ps{text.data(), text.data() + text.size()};
  if (!ps.value(out)) {
    err = "invalid JSON at offset " + std::to_string(ps.p - text.data());
    return false;
  }
  ps.ws();
  if (ps.p != ps.e) {
    err = "invalid JSON: trailing data at offset " + std::to_string(ps.p - text.data());
    return false;
  }
  return true;
}

std::string quote(const std::string &s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
    case '"': out += "\\\""; break;
    case '\\': out += "\\\\"; break;
    case '\n': out += "\\n"; break;
    case '\r': out += "\\r"; break;
    case '\t': out += "\\t"; break;
    default:
      if (c < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", c);
        out += buf;
      } else {
        out += static_cast<char>(c);
      }
    }
  }
  return out + "\"";
}

int count_words(const JVal *v) {
  if (v == nullptr) return 0;
  switch (v->type) {
  case JVal::Str: {
    int n = 0;
    bool in = false;
    for (char c : v->s) {
      bool space = c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
      if (!space && !in) n++;
      in = !space;
    }
    return n;
  }
  case JVal::Arr: {
    int n = 0;
    for (const auto &item : v->items) {
      if (item.type == JVal::Num) n++; // a prompt of token ids
      else if (item.type == JVal::Obj) n += count_words(item.get("text"));
      else n += count_words(&item);
    }
    return n;
  }
  default:
    return 0;
  }
}

// ---- Faults and timing.

void self_kill() {
  std::fflush(stdout);
  std::fflush(stderr);
  kill(getpid(), SIGKILL);
  for (;;) pause();
}

void sleep_ms(int ms) {
  if (ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

int header_int(const httplib::Request &req, const char *name, int def) {
  if (!req.has_header(name)) return def;
  std::string v = req.get_header_value(name);
  char *end = nullptr;
  long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || end == nullptr || *end != '\0') return def;
  return static_cast<int>(n);
}

// conn_fd finds the socket of req's connection among this process's file
// descriptors (cpp-httplib 0.11 does not hand it to handlers), so that a hang
// can end when the client goes away: DataSink::is_writable only asks select()
// whether a write would block, which stays true on a connection the peer
// closed. -1 if not found.
int conn_fd(const httplib::Request &req) {
  DIR *d = opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  int found = -1;
  while (struct dirent *ent = readdir(d)) {
    char *end = nullptr;
    long fd = std::strtol(ent->d_name, &end, 10);
    if (end == ent->d_name || *end != '\0' || fd == dirfd(d)) continue;
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    if (getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr *>(&a), &len) != 0 || a.ss_family != AF_INET) continue;
    if (ntohs(reinterpret_cast<sockaddr_in *>(&a)->sin_port) != req.remote_port) continue;
    len = sizeof a;
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr *>(&a), &len) != 0 || a.ss_family != AF_INET) continue;
    if (ntohs(reinterpret_cast<sockaddr_in *>(&a)->sin_port) != req.local_port) continue;
    found = static_cast<int>(fd);
    break;
  }
  closedir(d);
  return found;
}

// peer_gone reports whether the client closed the connection (or it broke).
bool peer_gone(int fd) {
  if (fd < 0) return false;
  char c;
  ssize_t r = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (r == 0) return true;
  return r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

// hang waits in silence until the client is gone, at most kHangMaxMs.
void hang(int fd, const std::function<bool()> &writable) {
  for (int waited = 0; waited < kHangMaxMs; waited += kPollMs) {
    if (peer_gone(fd) || (writable && !writable())) return;
    sleep_ms(kPollMs);
  }
}

// ---- The load model (testengine.Load), off unless --load-slots is given.
//
// At most `slots` requests run at once; the rest wait FIFO inside the
// engine, as llama.cpp's deferred requests do. A request that gets a slot
// first prefills its prompt, one prefill at a time, during which no other
// request makes a token; then each output token takes token_ns +
// per_running_ns x running + per_kv_ns x resident, resident being the KV
// cells held in every slot: its own prompt and output, and with keep_kv the
// cells a finished request left in its slot until another request takes it
// (llama.cpp's unified cache). The slot idle longest is taken first.
struct Load {
  int slots = 0;
  long token_ns = 0, per_running_ns = 0, per_kv_ns = 0, prefill_ns = 0;
  bool keep_kv = false;

  std::mutex mu; // guards everything below
  std::condition_variable cv;
  std::vector<long> cells, freed; // per slot: KV cells held; when it was freed
  std::vector<bool> busy;
  long clock = 0, next_ticket = 0;
  std::deque<long> line; // tickets of the requests waiting for a slot
  int running = 0;
  bool prefilling = false;

  bool on() const { return slots > 0; }

  void init() {
    cells.assign(slots, 0);
    freed.assign(slots, 0);
    busy.assign(slots, false);
  }

  long resident_locked() const {
    long n = 0;
    for (long c : cells) n += c;
    return n;
  }

  struct Counts {
    long running, waiting, resident;
  };
  Counts counts() {
    std::lock_guard<std::mutex> l(mu);
    return {running, static_cast<long>(line.size()), resident_locked()};
  }

  // acquire waits in line for a slot and takes it; -1 when the client on
  // fd went away first.
  int acquire(int fd) {
    std::unique_lock<std::mutex> l(mu);
    const long me = next_ticket++;
    line.push_back(me);
    while (line.front() != me || running >= slots) {
      if (cv.wait_for(l, std::chrono::milliseconds(kPollMs)) == std::cv_status::timeout && peer_gone(fd)) {
        line.erase(std::find(line.begin(), line.end(), me));
        cv.notify_all();
        return -1;
      }
    }
    line.pop_front();
    int slot = -1;
    for (int i = 0; i < slots; i++) {
      if (!busy[i] && (slot < 0 || freed[i] < freed[slot])) slot = i;
    }
    busy[slot] = true;
    cells[slot] = 0;
    running++;
    cv.notify_all(); // the next in line may take another free slot
    return slot;
  }

  void release(int slot) {
    std::lock_guard<std::mutex> l(mu);
    busy[slot] = false;
    freed[slot] = ++clock;
    if (!keep_kv) cells[slot] = 0;
    running--;
    cv.notify_all();
  }

  void prefill(int slot, int tokens) {
    {
      std::unique_lock<std::mutex> l(mu);
      cv.wait(l, [this] { return !prefilling; });
      prefilling = true;
    }
    std::this_thread::sleep_for(std::chrono::nanoseconds(tokens * prefill_ns));
    std::lock_guard<std::mutex> l(mu);
    prefilling = false;
    cells[slot] += tokens + 1; // the prompt, and the first token
    cv.notify_all();
  }

  // decode waits out one output token of slot: gap_ms when a header set
  // it (>= 0), else the model's time.
  void decode(int slot, int gap_ms) {
    long gap = gap_ms * 1000000L;
    if (gap_ms < 0) {
      std::lock_guard<std::mutex> l(mu);
      gap = token_ns + per_running_ns * running + per_kv_ns * resident_locked();
    }
    std::this_thread::sleep_for(std::chrono::nanoseconds(gap));
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [this] { return !prefilling; });
    cells[slot]++;
  }
};

Load g_load;

// Slot holds a slot of g_load from its acquire to its end.
struct Slot {
  int id = -1;
  explicit Slot(int fd) : id(g_load.acquire(fd)) {}
  ~Slot() {
    if (id >= 0) g_load.release(id);
  }
  Slot(const Slot &) = delete;
  Slot &operator=(const Slot &) = delete;
};

std::string error_json(int code, const std::string &message, const std::string &type) {
  // llama.cpp's error shape.
  return "{\"error\":{\"code\":" + std::to_string(code) + ",\"message\":" + quote(message) +
         ",\"type\":" + quote(type) + "}}";
}

struct Gen {
  bool chat = true;
  std::string id, model;
  long created = 0;
  int prompt_tokens = 0, n = 16;
  int logprobs = 0; // top logprobs per token (X-Test-Logprobs); 0: none
  int tools = 0;    // tool calls the answer is made of (X-Test-Tool-Calls, chat)

  std::string usage() const {
    return "{\"completion_tokens\":" + std::to_string(n) + ",\"prompt_tokens\":" + std::to_string(prompt_tokens) +
           ",\"total_tokens\":" + std::to_string(prompt_tokens + n) + ",\"prompt_tokens_details\":{\"cached_tokens\":0}}";
  }
  std::string timings() const {
    return "{\"prompt_n\":" + std::to_string(prompt_tokens) + ",\"prompt_ms\":1.0,\"predicted_n\":" + std::to_string(n) +
           ",\"predicted_ms\":1.0}";
  }
  std::string tail() const {
    return ",\"created\":" + std::to_string(created) + ",\"model\":" + quote(model) +
           ",\"system_fingerprint\":\"b0-testengine\",\"object\":" +
           (chat ? "\"chat.completion.chunk\"" : "\"text_completion\"") + ",\"id\":" + quote(id);
  }
  const char *finish() const { return tools > 0 ? "tool_calls" : "length"; }

  // What token i adds: text, or a piece of tool call k's arguments (JSON:
  // {"text": "tok tok "}), the calls taking the tokens in turn.
  int tool_of(int i) const {
    if (tools == 0) return -1;
    const int per = std::max(n / tools, 1);
    return std::min(i / per, tools - 1);
  }
  std::string piece(int i) const {
    const int k = tool_of(i);
    if (k < 0) return "tok ";
    const int per = std::max(n / tools, 1);
    const int first = k * per, last = k == tools - 1 ? n - 1 : first + per - 1;
    std::string p = "tok ";
    if (i == first) p = "{\"text\": \"" + p;
    if (i == last) p += "\"}";
    return p;
  }
  std::string tool_id(int k) const { return "call" + id + "x" + std::to_string(k); }

  // llama.cpp's logprobs entry of token i (probs_vector_to_json).
  std::string lp_entry(int i) const {
    auto one = [i](int j) {
      char lp[32];
      std::snprintf(lp, sizeof lp, "%.2f", -0.25 * (j + 1) - 0.01 * (i % 7));
      return "{\"id\":" + std::to_string(1000 + j) + ",\"token\":\"tok \",\"bytes\":[116,111,107,32],\"logprob\":" + lp;
    };
    std::string top = "[";
    for (int j = 0; j < logprobs; j++) top += (j ? "," : "") + one(j) + "}";
    return one(0) + ",\"top_logprobs\":" + top + "]}";
  }
  std::string logprobs_of(int from, int to) const {
    std::string out = "{\"content\":[";
    for (int i = from; i < to; i++) out += (i > from ? "," : "") + lp_entry(i);
    return out + "]}";
  }

  // The chunk of token i, llama.cpp-shaped.
  std::string content(int i) const {
    std::string choice;
    if (chat) {
      std::string delta;
      const int k = tool_of(i);
      if (k < 0) {
        delta = "{\"content\":" + quote(piece(i)) + "}";
      } else if (i == 0 || tool_of(i - 1) != k) {
        delta = "{\"tool_calls\":[{\"index\":" + std::to_string(k) + ",\"id\":" + quote(tool_id(k)) +
                ",\"type\":\"function\",\"function\":{\"name\":\"tool_" + std::to_string(k) + "\",\"arguments\":" +
                quote(piece(i)) + "}}]}";
      } else {
        delta = "{\"tool_calls\":[{\"index\":" + std::to_string(k) + ",\"function\":{\"arguments\":" + quote(piece(i)) + "}}]}";
      }
      choice = "{\"finish_reason\":null,\"index\":0,\"delta\":" + delta;
      if (logprobs > 0) choice += ",\"logprobs\":" + logprobs_of(i, i + 1);
      choice += "}";
    } else {
      choice = "{\"text\":" + quote(piece(i)) + ",\"index\":0,\"logprobs\":" +
               (logprobs > 0 ? logprobs_of(i, i + 1) : std::string("null")) + ",\"finish_reason\":null}";
    }
    return "data: {\"choices\":[" + choice + "]" + tail() + "}\n\n";
  }
  // The last chunk: finish_reason, an empty delta, usage and timings.
  std::string last() const {
    std::string choice = chat ? std::string("{\"finish_reason\":\"") + finish() + "\",\"index\":0,\"delta\":{}}"
                              : std::string("{\"text\":\"\",\"index\":0,\"logprobs\":null,\"finish_reason\":\"") + finish() + "\"}";
    return "data: {\"choices\":[" + choice + "]" + tail() + ",\"usage\":" + usage() + ",\"timings\":" + timings() +
           "}\n\n";
  }
  // The non-streamed answer, as llama.cpp's to_json_oaicompat_chat and
  // to_json_oaicompat give it.
  std::string whole() const {
    std::string text;
    for (int i = 0; i < n; i++) text += piece(i);
    std::string choice;
    if (chat) {
      std::string msg = "{\"role\":\"assistant\",\"content\":";
      if (tools == 0) {
        msg += quote(text) + "}";
      } else {
        msg += "null,\"tool_calls\":[";
        for (int k = 0; k < tools; k++) {
          std::string args;
          for (int i = 0; i < n; i++) {
            if (tool_of(i) == k) args += piece(i);
          }
          msg += (k ? "," : "") + std::string("{\"type\":\"function\",\"function\":{\"name\":\"tool_") + std::to_string(k) +
                 "\",\"arguments\":" + quote(args) + "},\"id\":" + quote(tool_id(k)) + "}";
        }
        msg += "]}";
      }
      choice = std::string("{\"finish_reason\":\"") + finish() + "\",\"index\":0,\"message\":" + msg;
      if (logprobs > 0) choice += ",\"logprobs\":" + logprobs_of(0, n);
      choice += "}";
    } else {
      choice = "{\"text\":" + quote(text) + ",\"index\":0,\"logprobs\":" +
               (logprobs > 0 ? logprobs_of(0, n) : std::string("null")) + ",\"finish_reason\":\"" + finish() + "\"}";
    }
    return "{\"choices\":[" + choice + "],\"created\":" + std::to_string(created) + ",\"model\":" + quote(model) +
           ",\"system_fingerprint\":\"b0-testengine\",\"object\":" +
           (chat ? "\"chat.completion\"" : "\"text_completion\"") + ",\"usage\":" + usage() + ",\"id\":" + quote(id) +
           ",\"timings\":" + timings() + "}";
  }
};

// The metrics exposition of llama.cpp's server (no labels), every value NaN
// when nan is set.
std::string metrics_text(bool nan) {
  long active = g_active.load(), deferred = 0;
  long cells = std::min(kCtx, active * kCellsPerRequest + std::min(kCtx / 2, g_requests.load() * kCellsLeft));
  if (g_load.on()) {
    const Load::Counts c = g_load.counts();
    active = c.running;
    deferred = c.waiting;
    cells = std::min(kCtx, c.resident);
  }
  struct Metric {
    const char *name, *type, *help;
    double value;
  };
  const Metric ms[] = {
      {"prompt_tokens_total", "counter", "Number of prompt tokens processed.", double(g_prompt_tokens.load())},
      {"prompt_seconds_total", "counter", "Prompt process time", 0.001 * g_requests.load()},
      {"tokens_predicted_total", "counter", "Number of generation tokens processed.", double(g_predicted_tokens.load())},
      {"tokens_predicted_seconds_total", "counter", "Predict process time", 0.001 * g_predicted_tokens.load()},
      {"n_decode_total", "counter", "Total number of llama_decode() calls", double(g_predicted_tokens.load())},
      {"n_busy_slots_per_decode", "counter", "Average number of busy slots per llama_decode() call", 1},
      {"prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s.", 1000},
      {"predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s.", 100},
      {"kv_cache_usage_ratio", "gauge", "KV-cache usage. 1 means 100 percent usage.", double(cells) / kCtx},
      {"kv_cache_tokens", "gauge", "KV-cache tokens.", double(cells)},
      {"requests_processing", "gauge", "Number of requests processing.", double(active)},
      {"requests_deferred", "gauge", "Number of requests deferred.", double(deferred)},
  };
  std::string out;
  char num[64];
  for (const auto &m : ms) {
    if (nan) {
      std::snprintf(num, sizeof num, "nan");
    } else {
      std::snprintf(num, sizeof num, "%g", m.value);
    }
    out += std::string("# HELP llamacpp:") + m.name + " " + m.help + "\n# TYPE llamacpp:" + m.name + " " + m.type +
           "\nllamacpp:" + m.name + " " + num + "\n";
  }
  return out;
}

void get_metrics(const httplib::Request &req, httplib::Response &res) {
  if (g_metrics_fault == "missing") {
    // llama.cpp's server without --metrics.
    res.status = 501;
    res.set_content(error_json(501, "This server does not support metrics endpoint. Start it with `--metrics`",
                               "not_supported_error"),
                    "application/json; charset=utf-8");
    return;
  }
  if (g_metrics_fault == "hang") {
    const int fd = conn_fd(req);
    for (int waited = 0; waited < kMetricsHangMs && !peer_gone(fd); waited += kPollMs) sleep_ms(kPollMs);
    res.status = 204;
    return;
  }
  if (g_metrics_fault == "huge") {
    static const std::string block = [] {
      std::string b(64 << 10, '\0');
      unsigned x = 1;
      for (auto &c : b) {
        x = x * 1103515245u + 12345u;
        c = static_cast<char>(x >> 16);
      }
      return b;
    }();
    res.set_content_provider(kMetricsHugeBytes, "text/plain; version=0.0.4",
                             [](size_t offset, size_t length, httplib::DataSink &sink) {
                               const size_t n = std::min(length, block.size() - offset % block.size());
                               return sink.write(block.data() + offset % block.size(), n);
                             });
    return;
  }
  res.set_content(metrics_text(g_metrics_fault == "nan"), "text/plain; version=0.0.4");
}

// first_token waits until slot's first token: its prefill, or first_ms
// when a header set it (>= 0).
void first_token(int slot, int prompt_tokens, int first_ms) {
  if (first_ms >= 0) {
    sleep_ms(first_ms);
  } else {
    g_load.prefill(slot, prompt_tokens);
  }
}

void generate(const httplib::Request &req, httplib::Response &res, bool chat) {
  g_requests++;
  auto active = std::make_shared<ActiveGuard>();
  const std::string fault = req.get_header_value("X-Test-Fault");
  const int first_delay = std::max(header_int(req, "X-Test-First-Delay-Ms", 0), 0);
  const int gap = std::max(header_int(req, "X-Test-Gap-Ms", 0), 0);
  // With the load model, headers given still set their own delays (-1: the model's).
  const int own_first = req.has_header("X-Test-First-Delay-Ms") ? first_delay : -1;
  const int own_gap = req.has_header("X-Test-Gap-Ms") ? gap : -1;

  if (fault == "kill-before-headers") self_kill();
  if (fault == "hang-before-headers") {
    hang(conn_fd(req), nullptr);
    res.status = 204;
    return;
  }
  if (fault == "status-500") {
    res.status = 500;
    res.set_content(error_json(500, "test engine: injected failure", "server_error"), "application/json; charset=utf-8");
    return;
  }
  if (fault == "status-400") {
    res.status = 400;
    res.set_content(error_json(400, "test engine: injected bad request", "invalid_request_error"),
                    "application/json; charset=utf-8");
    return;
  }
  if (fault == "status-503") {
    res.status = 503;
    res.set_content(error_json(503, "Loading model", "unavailable_error"), "application/json; charset=utf-8");
    return;
  }
  if (fault == "non-json-500") {
    res.status = 500;
    res.set_content("Internal Server Error", "text/plain");
    return;
  }
  if (fault == "non-json-200") {
    res.status = 200;
    res.set_content("hello", "text/plain");
    return;
  }

  JVal body;
  std::string err;
  if (!parse_json(req.body, body, err) || body.type != JVal::Obj) {
    if (err.empty()) err = "request body must be a JSON object";
    res.status = 400;
    res.set_content(error_json(400, err, "invalid_request_error"), "application/json; charset=utf-8");
    return;
  }

  Gen g;
  g.chat = chat;
  const JVal *model = body.get("model");
  g.model = model != nullptr && model->type == JVal::Str && !model->s.empty() ? model->s : "test";
  const JVal *stream = body.get("stream");
  const bool streamed = stream != nullptr && stream->type == JVal::Bool && stream->b;
  const JVal *max_tokens = body.get("max_tokens");
  if (max_tokens == nullptr || max_tokens->type != JVal::Num) max_tokens = body.get("n_predict");
  if (max_tokens != nullptr && max_tokens->type == JVal::Num) g.n = static_cast<int>(max_tokens->n);
  g.n = std::max(header_int(req, "X-Test-Tokens", g.n), 0);
  g.logprobs = std::max(header_int(req, "X-Test-Logprobs", 0), 0);
  if (chat) g.tools = std::min(std::max(header_int(req, "X-Test-Tool-Calls", 0), 0), std::max(g.n, 1));
  if (chat) {
    const JVal *msgs = body.get("messages");
    if (msgs != nullptr && msgs->type == JVal::Arr) {
      for (const auto &m : msgs->items) g.prompt_tokens += count_words(m.get("content"));
    }
  } else {
    g.prompt_tokens = count_words(body.get("prompt"));
  }
  g_prompt_tokens += g.prompt_tokens;
  g_predicted_tokens += g.n;
  g.created = static_cast<long>(std::time(nullptr));
  g.id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(++g_seq);

  if (!streamed) {
    std::string whole = g.whole();
    if (fault == "hang-after-headers" || fault == "kill-after-headers") {
      // The head goes out (with the body's Content-Length) before the
      // provider is first called; the body never follows.
      const bool kill_it = fault == "kill-after-headers";
      const int fd = conn_fd(req);
      res.set_content_provider(whole.size(), "application/json; charset=utf-8",
                               [kill_it, fd, active](size_t, size_t, httplib::DataSink &sink) {
                                 if (kill_it) self_kill();
                                 hang(fd, sink.is_writable);
                                 return false;
                               });
      return;
    }
    if (!g_load.on()) {
      sleep_ms(first_delay + std::max(g.n - 1, 0) * gap);
    } else {
      Slot slot(conn_fd(req));
      if (slot.id < 0) return; // the client went away
      first_token(slot.id, g.prompt_tokens, own_first);
      for (int i = 1; i < g.n; i++) g_load.decode(slot.id, own_gap);
    }
    res.set_content(whole, "application/json; charset=utf-8");
    return;
  }

  const int fd = conn_fd(req);
  res.set_chunked_content_provider(
      "text/event-stream",
      [g, fault, first_delay, gap, own_first, own_gap, fd, active](size_t, httplib::DataSink &sink) {
        auto write = [&sink](const std::string &s) { return sink.write(s.data(), s.size()); };
        // cpp-httplib has written the head before it calls the provider.
        if (fault == "kill-after-headers") self_kill();
        if (fault == "hang-after-headers") {
          hang(fd, sink.is_writable);
          return false;
        }
        std::unique_ptr<Slot> slot;
        if (g_load.on()) {
          slot.reset(new Slot(fd));
          if (slot->id < 0) return false; // the client went away
          first_token(slot->id, g.prompt_tokens, own_first);
        } else {
          sleep_ms(first_delay);
        }
        if (fault == "broken-sse") {
          if (write(g.content(0)) && write("data: {not json\n\n")) sink.done();
          return false;
        }
        if (fault == "huge-line") {
          if (write(g.content(0)) && write("data: " + std::string(4 << 20, 'x') + "\n\n") &&
              write("data: [DONE]\n\n")) {
            sink.done();
          }
          return false;
        }
        const bool cut = fault == "kill-mid-stream" || fault == "hang-mid-stream" || fault == "truncated";
        const int chunks = cut ? std::min(3, g.n) : g.n;
        for (int i = 0; i < chunks; i++) {
          if (i > 0 && slot) {
            g_load.decode(slot->id, own_gap);
          } else if (i > 0) {
            sleep_ms(gap);
          }
          if (!write(g.content(i))) return false;
        }
        if (fault == "kill-mid-stream") self_kill();
        if (fault == "hang-mid-stream") {
          hang(fd, sink.is_writable);
          return false;
        }
        if (fault != "truncated" && !(write(g.last()) && write("data: [DONE]\n\n"))) return false;
        // As llama.cpp's server: done, then false, so cpp-httplib closes the
        // connection after the terminating chunk.
        sink.done();
        return false;
      });
}

} // namespace

int main(int argc, char **argv) {
  std::signal(SIGPIPE, SIG_IGN);
  int port = 0;
  for (int i = 1; i < argc; i++) {
    if (std::strcmp(argv[i], "--port") == 0 && i + 1 < argc) {
      port = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--metrics-fault") == 0 && i + 1 < argc) {
      g_metrics_fault = argv[++i];
    } else if (std::strcmp(argv[i], "--load-slots") == 0 && i + 1 < argc) {
      g_load.slots = std::max(std::atoi(argv[++i]), 0);
    } else if (std::strcmp(argv[i], "--load-token-ns") == 0 && i + 1 < argc) {
      g_load.token_ns = std::atol(argv[++i]);
    } else if (std::strcmp(argv[i], "--load-per-running-ns") == 0 && i + 1 < argc) {
      g_load.per_running_ns = std::atol(argv[++i]);
    } else if (std::strcmp(argv[i], "--load-per-kv-ns") == 0 && i + 1 < argc) {
      g_load.per_kv_ns = std::atol(argv[++i]);
    } else if (std::strcmp(argv[i], "--load-prefill-ns") == 0 && i + 1 < argc) {
      g_load.prefill_ns = std::atol(argv[++i]);
    } else if (std::strcmp(argv[i], "--load-keep-kv") == 0) {
      g_load.keep_kv = true;
    } else {
      std::fprintf(stderr, "usage: %s [--port N] [--metrics-fault missing|hang|huge|nan] [--load-slots N --load-token-ns NS "
                   "--load-per-running-ns NS --load-per-kv-ns NS --load-prefill-ns NS [--load-keep-kv]]\n", argv[0]);
      return 2;
    }
  }
  g_load.init();

  httplib::Server svr;
  svr.new_task_queue = [] { return new httplib::ThreadPool(128); };

  svr.Post("/v1/chat/completions",
           [](const httplib::Request &req, httplib::Response &res) { generate(req, res, true); });
  svr.Post("/v1/completions", [](const httplib::Request &req, httplib::Response &res) { generate(req, res, false); });
  svr.Get("/health", [](const httplib::Request &, httplib::Response &res) {
    res.set_content("{\"status\":\"ok\"}", "application/json; charset=utf-8");
  });
  svr.Get("/v1/models", [](const httplib::Request &, httplib::Response &res) {
    res.set_content("{\"object\":\"list\",\"data\":[{\"id\":\"test\",\"object\":\"model\",\"owned_by\":\"llamacpp\"}]}",
                    "application/json; charset=utf-8");
  });
  svr.Get("/metrics", get_metrics);
  svr.Get("/test/stats", [](const httplib::Request &, httplib::Response &res) {
    res.set_content("{\"requests\":" + std::to_string(g_requests.load()) + ",\"active\":" +
                        std::to_string(g_active.load()) + "}",
                    "application/json");
  });

  int bound = port;
  if (port == 0) {
    bound = svr.bind_to_any_port("127.0.0.1");
    if (bound <= 0) {
      std::fprintf(stderr, "bind 127.0.0.1:0 failed: %s\n", std::strerror(errno));
      return 3;
    }
  } else if (!svr.bind_to_port("127.0.0.1", port)) {
    std::fprintf(stderr, "bind 127.0.0.1:%d failed: %s\n", port, std::strerror(errno));
    return 3;
  }
  std::printf("READY %d\n", bound);
  std::fflush(stdout);
  return svr.listen_after_bind() ? 0 : 1;
}
