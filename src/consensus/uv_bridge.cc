#include "consensus/uv_bridge.h"

#include <unistd.h>

#include <utility>

namespace etcdq::consensus {

UvBridge::UvBridge(uv_loop_t* loop) : loop_(loop) {
  t_.impl = this;
  t_.init = on_init;
  t_.listen = on_listen;
  t_.connect = on_connect;
  t_.close = on_close;
}

bool UvBridge::post(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!open_) return false;
  tasks_.push_back(std::move(fn));
  uv_async_send(&async_);
  return true;
}

bool UvBridge::listening() {
  std::lock_guard<std::mutex> lock(mu_);
  return listening_;
}

uv_stream_t* UvBridge::adopt(int fd) {
  auto* pipe = static_cast<uv_pipe_t*>(raft_malloc(sizeof(uv_pipe_t)));
  if (pipe == nullptr) return nullptr;
  uv_pipe_init(loop_, pipe, 0);
  if (uv_pipe_open(pipe, fd) != 0) {
    uv_close(reinterpret_cast<uv_handle_t*>(pipe), [](uv_handle_t* h) { raft_free(h); });
    return nullptr;
  }
  return reinterpret_cast<uv_stream_t*>(pipe);
}

void UvBridge::connected(uint64_t key, int fd, int status) {
  auto it = connecting_.find(key);
  if (it == connecting_.end()) {
    if (fd >= 0) ::close(fd);
    return;
  }
  Connecting c = it->second;
  connecting_.erase(it);
  if (closing_) status = RAFT_CANCELED;
  uv_stream_t* stream = nullptr;
  if (status == 0) {
    stream = adopt(fd);
    if (stream == nullptr) {
      ::close(fd);  // libuv did not take it
      status = RAFT_NOCONNECTION;
    }
  } else if (fd >= 0) {
    ::close(fd);
  }
  c.cb(c.req, stream, status);
}

void UvBridge::connected(uint64_t key, uv_stream_t* stream, int status) {
  auto it = connecting_.find(key);
  if (it != connecting_.end()) {
    Connecting c = it->second;
    connecting_.erase(it);
    if (closing_) status = RAFT_CANCELED;
    if (status == 0 && stream != nullptr) {
      c.cb(c.req, stream, 0);
      return;
    }
    c.cb(c.req, nullptr, status == 0 ? RAFT_NOCONNECTION : status);
  }
  if (stream != nullptr) uv_close(reinterpret_cast<uv_handle_t*>(stream), [](uv_handle_t* h) { raft_free(h); });
}

void UvBridge::accept(raft_id from, const std::string& address, int fd) {
  uv_stream_t* stream = closing_ || accept_cb_ == nullptr ? nullptr : adopt(fd);
  if (stream == nullptr) {
    ::close(fd);
    return;
  }
  accept_cb_(&t_, from, address.c_str(), stream);
}

void UvBridge::drain() {
  std::vector<std::function<void()>> now;
  {
    std::lock_guard<std::mutex> lock(mu_);
    now.swap(tasks_);
    // Nothing is posted after this, so these are the last tasks.
    if (closing_) open_ = false;
  }
  for (auto& fn : now) fn();
  if (!closing_) return;
  auto pending = std::move(connecting_);
  connecting_.clear();
  for (auto& kv : pending) kv.second.cb(kv.second.req, nullptr, RAFT_CANCELED);
  if (!uv_is_closing(reinterpret_cast<uv_handle_t*>(&async_))) {
    uv_close(reinterpret_cast<uv_handle_t*>(&async_), [](uv_handle_t* h) {
      auto* self = static_cast<UvBridge*>(h->data);
      if (self->close_cb_) self->close_cb_(&self->t_);
    });
  }
}

int UvBridge::on_init(struct raft_uv_transport* t, raft_id id, const char* address) {
  UvBridge* self = of(t);
  self->id_ = id;
  self->address_ = address;
  if (uv_async_init(self->loop_, &self->async_, [](uv_async_t* a) { static_cast<UvBridge*>(a->data)->drain(); }) !=
      0) {
    return RAFT_IOERR;
  }
  self->async_.data = self;
  {
    std::lock_guard<std::mutex> lock(self->mu_);
    self->open_ = true;
  }
  self->after_init();
  return 0;
}

int UvBridge::on_listen(struct raft_uv_transport* t, raft_uv_accept_cb cb) {
  UvBridge* self = of(t);
  self->accept_cb_ = cb;
  std::lock_guard<std::mutex> lock(self->mu_);
  self->listening_ = true;
  return 0;
}

int UvBridge::on_connect(struct raft_uv_transport* t, struct raft_uv_connect* req, raft_id id, const char* address,
                         raft_uv_connect_cb cb) {
  UvBridge* self = of(t);
  if (self->closing_) return RAFT_CANCELED;
  uint64_t key = self->next_connect_++;
  self->connecting_[key] = Connecting{req, cb};
  self->start_connect(key, id, address);
  return 0;
}

void UvBridge::on_close(struct raft_uv_transport* t, raft_uv_transport_close_cb cb) {
  UvBridge* self = of(t);
  self->closing_ = true;
  self->close_cb_ = cb;
  {
    std::lock_guard<std::mutex> lock(self->mu_);
    self->listening_ = false;
  }
  self->before_close();
  uv_async_send(&self->async_);
}

}  // namespace etcdq::consensus
