#include "http/reply.h"

#include <utility>

namespace etcdq::http {

const char* reason_phrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 412: return "Precondition Failed";
    case 429: return "Too Many Requests";
    case 499: return "status code 499";  // Go's words for a status it has no text for
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "Internal Server Error";
  }
}

void Reply::set_callbacks(std::function<void()> resume, std::function<void()> cancel) {
  std::lock_guard<std::mutex> lock(mu_);
  resume_ = std::move(resume);
  cancel_ = std::move(cancel);
}

Reply::Write Reply::write(std::string_view bytes) {
  std::function<void()> wake;
  Write w;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (gone_) return Write::kGone;
    buf_.append(bytes);
    pending_.store(true, std::memory_order_release);
    paused_ = buf_.size() >= kMaxBuffered;
    w = paused_ ? Write::kPaused : Write::kMore;
    wake = wake_;
  }
  if (wake) wake();
  return w;
}

void Reply::finish(bool keep_open) {
  std::function<void()> wake;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    finished_ = true;
    keep_open_ = keep_open;
    pending_.store(true, std::memory_order_release);
    resume_ = nullptr;
    cancel_ = nullptr;  // nothing left to cancel
    wake = wake_;
  }
  if (wake) wake();
}

void Reply::attach(std::function<void()> wake) {
  bool ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    wake_ = wake;
    ready = !buf_.empty() || finished_;
  }
  if (ready && wake) wake();
}

void Reply::take(std::string* out, bool* finished, bool* keep_open) {
  std::function<void()> resume;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out->append(buf_);
    buf_.clear();
    pending_.store(false, std::memory_order_release);
    if (buf_.capacity() > kMaxBuffered) buf_.shrink_to_fit();
    *finished = finished_;
    *keep_open = keep_open_;
    if (paused_) {
      paused_ = false;
      resume = resume_;
    }
  }
  if (resume) resume();
}

void Reply::cancel() {
  std::function<void()> cancel;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (gone_) return;
    gone_ = true;
    wake_ = nullptr;
    resume_ = nullptr;
    cancel = std::move(cancel_);
    cancel_ = nullptr;
    buf_.clear();
    buf_.shrink_to_fit();
  }
  if (cancel) cancel();
}

}  // namespace etcdq::http
